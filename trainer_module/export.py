"""The SavedModel that Pusher ships: raw English strings in, French strings out.

The Transform graph (normalization + vocabulary) and the decoders are inside it, so serving
needs no Python preprocessing; loading needs only TensorFlow and `import tensorflow_text`.
Signatures:
  serving_default(english: string [B]) -> translation [B], token_ids [B, L], score [B],
      source_tokens [B] (English tokens; only the first max_source_tokens [B] are translated),
      beam_width [B]
  beam_search(english: string [B])     -> the same, with beam search (width from hparams)
  translate_examples(examples: serialized tf.Example [B]) -> translation, and per example
      token_nll, token_correct, token_count over all its references (TFMA's input)
  transform_features(examples: serialized tf.Example [B]) -> english_length_bucket (slicing)
  attention(english: string [B]) -> attention [B, T, S] (last decoder layer's cross-attention,
      mean over heads, for the greedy translation), source_tokens [B, S], target_tokens [B, T]
"""
from __future__ import annotations

import dataclasses

import tensorflow as tf
import tensorflow_transform as tft

from trainer_module import decoding
from trainer_module.hparams import HParams
from trainer_module.model import Transformer
from trainer_module.optimization import token_cross_entropy
from trainer_module.preprocessing import (ENGLISH, LENGTH_BUCKET, RESERVED_TOKENS, SOURCE_IDS,
                                          SOURCE_VOCAB, TARGET_IDS, TARGET_VOCAB, detokenize)
from trainer_module.tokens import END_ID, PAD_ID, START_ID

SERVING_SIGNATURE, BEAM_SIGNATURE = "serving_default", "beam_search"
EXAMPLES_SIGNATURE, TRANSFORM_SIGNATURE = "translate_examples", "transform_features"
ATTENTION_SIGNATURE = "attention"
TRANSLATION = "translation"


def _signature(input_name: str):
    """tf.function over one string vector, traced without AutoGraph: the model and the decoders
    are plain ops and explicit tf.while_loops, and converting them (and Keras underneath) for
    nothing took half of the export's time."""
    def wrap(method):
        return tf.function(tf.autograph.experimental.do_not_convert(method),
                           input_signature=[tf.TensorSpec([None], tf.string, name=input_name)])
    return wrap


def id_to_token(tf_transform_output: tft.TFTransformOutput, vocab_name: str) -> list[bytes]:
    """Id -> token: the reserved tokens, then Transform's vocabulary file."""
    return [t.encode() for t in RESERVED_TOKENS] + list(
        tf_transform_output.vocabulary_by_name(vocab_name))


class Translator(tf.Module):
    """Everything serving needs, tracked so tf.saved_model.save captures it."""

    def __init__(self, model: Transformer, tf_transform_output: tft.TFTransformOutput,
                 hparams: HParams) -> None:
        super().__init__()
        self.model = model
        self.hparams = hparams
        self.tft_layer = tf_transform_output.transform_features_layer()
        self.source_tokens = tf.constant(id_to_token(tf_transform_output, SOURCE_VOCAB))
        self.target_tokens = tf.constant(id_to_token(tf_transform_output, TARGET_VOCAB))
        self._raw_spec = tf_transform_output.raw_feature_spec()
        self._english_spec = {ENGLISH: self._raw_spec[ENGLISH]}

    def source_ids(self, english: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """[B] raw sentences -> ids [B, S] int32 (PAD_ID-padded, cut at max_source_length)
        and the number of tokens before the cut [B] (so callers can warn about truncation)."""
        ids = self.tft_layer({ENGLISH: tf.reshape(english, [-1, 1])})[SOURCE_IDS]
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        ids = ids[:, :self.hparams.max_source_length]
        return tf.cast(ids.to_tensor(default_value=PAD_ID), tf.int32), lengths

    def translate(self, english: tf.Tensor, beam: bool = False) -> dict[str, tf.Tensor]:
        source_ids, source_tokens = self.source_ids(english)
        max_length = decoding.max_decode_length(source_ids, self.hparams)
        if beam:
            token_ids, score = decoding.beam_search_decode(
                self.model, source_ids, max_length, self.hparams.beam_width,
                self.hparams.beam_alpha)
        else:
            token_ids, score = decoding.greedy_decode(self.model, source_ids, max_length)
        # An input with no tokens (empty or whitespace) translates to the empty string.
        has_input = tf.reduce_any(tf.not_equal(source_ids, PAD_ID), axis=1)
        token_ids = tf.where(has_input[:, None], token_ids, PAD_ID)
        return {TRANSLATION: self.to_text(token_ids), "token_ids": token_ids,
                "score": tf.where(has_input, score, 0.0), "source_tokens": source_tokens,
                "max_source_tokens": tf.fill(tf.shape(source_tokens),
                                             self.hparams.max_source_length),
                "beam_width": tf.fill(tf.shape(source_tokens),
                                      self.hparams.beam_width if beam else 1)}

    def to_text(self, token_ids: tf.Tensor) -> tf.Tensor:
        """[B, L] ids -> [B] French sentences (up to the first END_ID, PAD dropped)."""
        ended = tf.cumsum(tf.cast(tf.equal(token_ids, END_ID), tf.int32), axis=1, exclusive=True)
        keep = tf.equal(ended, 0) & tf.not_equal(token_ids, PAD_ID) & tf.not_equal(token_ids, END_ID)
        words = tf.ragged.boolean_mask(tf.gather(self.target_tokens, token_ids), keep)
        return detokenize(words)

    def parse_english(self, examples: tf.Tensor) -> tf.Tensor:
        return tf.reshape(tf.io.parse_example(examples, self._english_spec)[ENGLISH], [-1])

    @_signature(ENGLISH)
    def serve_greedy(self, english):
        return self.translate(english)

    @_signature(ENGLISH)
    def serve_beam(self, english):
        return self.translate(english, beam=True)

    @_signature(ENGLISH)
    def serve_attention(self, english):
        """Cross-attention of the last decoder layer (mean over heads) for the greedy output."""
        source_ids, _ = self.source_ids(english)
        token_ids, _ = decoding.greedy_decode(
            self.model, source_ids, decoding.max_decode_length(source_ids, self.hparams))
        target_in = tf.concat([tf.fill([tf.shape(token_ids)[0], 1], START_ID),
                               token_ids[:, :-1]], axis=1)
        weights = self.model.cross_attention_weights(source_ids, target_in)
        return {"attention": tf.reduce_mean(weights[:, -1], axis=1),  # [B, T, S]
                "source_tokens": tf.gather(self.source_tokens, source_ids),  # [B, S]
                "target_tokens": tf.gather(self.target_tokens, token_ids)}  # [B, T]

    def reference_token_stats(self, examples: tf.Tensor) -> dict[str, tf.Tensor]:
        """Teacher-forced on every French reference of each example: sums per example [B]
        of -log p(token), of argmax-correct tokens and of target tokens (with [end]), from
        which TFMA computes corpus token accuracy and perplexity."""
        features = self.tft_layer(tf.io.parse_example(examples, self._raw_spec))
        references = features[TARGET_IDS]  # [B, (R), (T)]
        owner = references.value_rowids()  # example of each reference [N]
        source = tf.gather(features[SOURCE_IDS], owner)[:, :self.hparams.max_source_length]
        target = references.values  # [N, (T)]
        edge = tf.RaggedTensor.from_tensor(tf.ones([target.nrows(), 1], target.dtype))
        target_in = tf.concat([edge * START_ID, target], axis=1).to_tensor(PAD_ID)
        labels = tf.cast(tf.concat([target, edge * END_ID], axis=1).to_tensor(PAD_ID), tf.int32)
        logits = self.model((tf.cast(source.to_tensor(PAD_ID), tf.int32),
                             tf.cast(target_in, tf.int32)), training=False)
        weights = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)
        correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels),
                          tf.float32)
        batch = tf.shape(examples)[0]

        def per_example(per_token: tf.Tensor) -> tf.Tensor:
            return tf.math.unsorted_segment_sum(tf.reduce_sum(per_token * weights, axis=1),
                                                owner, batch)

        return {"token_nll": per_example(token_cross_entropy(labels, logits)),
                "token_correct": per_example(correct),
                "token_count": per_example(tf.ones_like(weights))}

    @_signature("examples")
    def serve_examples(self, examples):
        return {TRANSLATION: self.translate(self.parse_english(examples))[TRANSLATION],
                **self.reference_token_stats(examples)}

    @_signature("examples")
    def serve_transform_features(self, examples):
        features = self.tft_layer({ENGLISH: tf.reshape(self.parse_english(examples), [-1, 1])})
        return {LENGTH_BUCKET: features[LENGTH_BUCKET]}


def float32_copy(model: Transformer) -> Transformer:
    """The trained weights in a float32 model built outside any distribution strategy.

    Mixed-precision training keeps float32 variables but computes in float16/bfloat16; serving
    and the Evaluator should not (float16 matmuls are emulated, slowly, on most CPUs). Plain
    variables also keep the export free of the strategy's collectives, so the chief alone can
    write it.
    """
    if tf.distribute.has_strategy():
        raise RuntimeError("float32_copy must be called outside the strategy's scope")
    copy = Transformer(dataclasses.replace(model.hparams, precision="float32"))
    copy((tf.ones([1, 1], tf.int32), tf.ones([1, 1], tf.int32)))
    copy.set_weights(model.get_weights())
    return copy


def export_translator(model: Transformer, tf_transform_output: tft.TFTransformOutput,
                      hparams: HParams, export_dir: str) -> None:
    translator = Translator(model, tf_transform_output, hparams)
    tf.saved_model.save(translator, export_dir, signatures={
        SERVING_SIGNATURE: translator.serve_greedy,
        BEAM_SIGNATURE: translator.serve_beam,
        EXAMPLES_SIGNATURE: translator.serve_examples,
        TRANSFORM_SIGNATURE: translator.serve_transform_features,
        ATTENTION_SIGNATURE: translator.serve_attention,
    })

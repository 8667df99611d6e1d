"""The SavedModel that Pusher ships: raw English strings in, French strings out.

The Transform graph (normalization + vocabulary) and the decoders are inside it, so serving
needs no Python preprocessing; loading needs only TensorFlow and `import tensorflow_text`.
A line of several sentences is translated sentence by sentence, and a sentence longer than the
model's max_source_length tokens in pieces cut at its clauses (segmentation.py;
hparams.split_sentences). Signatures:
  serving_default(english: string [B]) -> translation [B], token_ids [B, L] (the translation's,
      PAD-padded), score [B] (summed over the line's pieces), source_tokens [B] (English
      tokens of the line's longest piece: only the first max_source_tokens [B] of a piece are
      translated), clause_tokens [B] (of its longest clause: one of more than
      max_source_tokens was cut between words), beam_width [B]
  beam_search(english: string [B])     -> the same, with beam search (width from hparams)
  translate_examples(examples: serialized tf.Example [B]) -> translation, and per example
      token_nll, token_correct, token_count over all its references (TFMA's input)
  transform_features(examples: serialized tf.Example [B]) -> english_length_bucket (slicing)
  attention(english: string [B]) -> attention [B, T, S] (last decoder layer's cross-attention,
      mean over heads, for the greedy translation of each line whole), source_tokens [B, S],
      target_tokens [B, T]
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Callable

import tensorflow as tf
import tensorflow_transform as tft

from trainer_module import decode_probe, decoding, devices, segmentation, serving_warmup
from trainer_module.hparams import HParams
from trainer_module.model import Transformer
from trainer_module.optimization import token_cross_entropy
from transform_module.preprocessing import (ENGLISH, LENGTH_BUCKET, RESERVED_TOKENS,
                                            SOURCE_IDS, SOURCE_VOCAB, TARGET_IDS,
                                            TARGET_VOCAB, detokenize)
from transform_module.tokens import END_ID, PAD_ID, START_ID
from transform_module.wordpiece import WORDPIECE_JOINER

_LOG = logging.getLogger(__name__)

SERVING_SIGNATURE, BEAM_SIGNATURE = "serving_default", "beam_search"
EXAMPLES_SIGNATURE, TRANSFORM_SIGNATURE = "translate_examples", "transform_features"
ATTENTION_SIGNATURE = "attention"
TRANSLATION = "translation"
# References teacher-forced at once in reference_token_sums. Their logits are [chunk, longest
# reference + 1, target vocabulary] float32, and the loss's temporaries as much again: 64 x 129
# x 8k x 4 B is about 260 MB each at the base profile's max_target_length 128 with the default
# 8,000 pieces. Unchunked, one example of 500 references, or a batch of hundreds of examples,
# would take gigabytes.
REFERENCE_CHUNK = 64
# Rows decoded together, sentences sorted by length (Translator.decode_by_length): 256
# sentences greedily, 256 // beam_width with beam search (a row per beam). Fewer leave more of
# a step's fixed cost to each row, more mix lengths: greedy, 256 sentences decoded the eval
# split and the dev set faster than 64 or 1,024 (the same outputs), while beam 4 on 256
# sentences (1,024 rows) was slower than on 64 (BENCHMARKS.md, "Decoding speed").
DECODE_ROWS = 256


def _traced(*input_signature: tf.TensorSpec):
    """tf.function with a fixed input signature, traced without AutoGraph: the model and the
    decoders are plain ops and explicit tf.while_loops, and converting them (and Keras
    underneath) for nothing took half of the export's time."""
    def wrap(method):
        return tf.function(tf.autograph.experimental.do_not_convert(method),
                           input_signature=list(input_signature))
    return wrap


def _signature(input_name: str):
    """A signature over one string vector [B]."""
    return _traced(tf.TensorSpec([None], tf.string, name=input_name))


def id_to_token(tf_transform_output: tft.TFTransformOutput, vocab_name: str) -> list[bytes]:
    """Id -> token: the reserved tokens, then Transform's vocabulary file."""
    return [t.encode() for t in RESERVED_TOKENS] + list(
        tf_transform_output.vocabulary_by_name(vocab_name))


class Translator(tf.Module):
    """Everything serving needs, tracked so tf.saved_model.save captures it.

    The model's variables are tracked, not the Keras model itself: saving a tracked Keras model
    also traces every layer's call for Keras' own loader, which nothing here uses and which
    took most of the export's time (docs/benchmarks-history.md, "Export"). Transform's Keras
    layer is not tracked either, for the same reason (Keras traced a default signature of it):
    what it tracks itself, its loaded Transform graph with the vocabularies, is.
    """

    def __init__(self, model: Transformer, tf_transform_output: tft.TFTransformOutput,
                 hparams: HParams) -> None:
        super().__init__()
        decoder = decoding_copy(model, hparams.decode_precision)
        self._model = lambda: decoder  # a function attribute is not tracked
        self.decode_precision = "float32" if decoder is model else "bfloat16"
        # The trained float32 weights (continued training, benchmarks/reexport.py read them),
        # and the served model's own where it has its own (bfloat16).
        self.model_variables = list(model.variables)
        if decoder is not model:
            self.decoding_variables = list(decoder.variables)
        self.hparams = hparams
        tft_layer = tf_transform_output.transform_features_layer()
        self._tft_layer = lambda: tft_layer
        # The layer's own tracking (TransformFeaturesLayer tracks its loader's attributes so).
        self.transform_graph = tft_layer._saved_model_loader_tracked_dict
        self.source_tokens = tf.constant(id_to_token(tf_transform_output, SOURCE_VOCAB))
        target_tokens = id_to_token(tf_transform_output, TARGET_VOCAB)
        self.target_tokens = tf.constant(target_tokens)
        self.spelling = decoding.PieceSpelling.of(target_tokens, WORDPIECE_JOINER)
        self._raw_spec = tf_transform_output.raw_feature_spec()
        self._english_spec = {ENGLISH: self._raw_spec[ENGLISH]}

    @property
    def model(self) -> Transformer:
        """The served model: it translates, and scores the references (translate_examples)."""
        return self._model()

    def transform(self, features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """Raw features -> Transform's outputs (its graph as the Trainer's input saw them)."""
        return self._tft_layer()(features)

    @_traced(tf.TensorSpec([None], tf.string))
    def tokens(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """[N] texts -> their ids [N, (T)], as the model sees them (Transform's graph:
        normalization, then SentencePiece or WordPiece). A tf.function of its own, traced once
        for the several calls of every signature (as greedy_ids)."""
        return self.transform({ENGLISH: tf.reshape(texts, [-1, 1])})[SOURCE_IDS]

    def padded(self, ids: tf.RaggedTensor) -> tuple[tf.Tensor, tf.Tensor]:
        """`tokens`' ids -> ids [B, S] int32 (PAD_ID-padded, cut at max_source_length) and the
        number of tokens before the cut [B] (so callers can warn about truncation)."""
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        ids = ids[:, :self.hparams.max_source_length]
        return tf.cast(ids.to_tensor(default_value=PAD_ID), tf.int32), lengths

    def source_ids(self, english: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """[B] raw sentences -> `padded` ids [B, S] and token counts [B]."""
        return self.padded(self.tokens(english))

    def token_counts(self, english: tf.Tensor) -> tf.Tensor:
        """[N] texts -> [N] int32: their English tokens, as the model would see them."""
        return tf.cast(self.tokens(english).row_lengths(), tf.int32)

    @_traced(tf.TensorSpec([None], tf.string))
    def chunks(self, sentences: tf.Tensor
               ) -> tuple[tf.RaggedTensor, tf.Tensor, tf.RaggedTensor]:
        """[N] sentences -> the pieces each is translated in [N, (C)], [N] the tokens of its
        longest clause (longer than max_source_length: it was cut between words), and the
        pieces' `tokens` [P, (T)].

        A sentence within max_source_length tokens is one piece. A longer one is cut at
        segmentation.CUTS, strongest first, each only where a piece is still longer than
        hparams.clause_tokens (between words: than max_source_length), and its pieces packed
        back, in order, into as few as fit clause_tokens. A batch without a long sentence is
        tokenized once here, for the counts and the model alike."""
        limit = self.hparams.max_source_length
        ids = self.tokens(sentences)
        sentence_tokens = tf.cast(ids.row_lengths(), tf.int32)

        def whole() -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.RaggedTensor]:
            return (sentences, tf.range(tf.size(sentences, out_type=tf.int64)), sentence_tokens,
                    ids)

        def cut() -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.RaggedTensor]:
            text, owner, longest_clause = self._cut(sentences, sentence_tokens)
            return text, owner, longest_clause, self.tokens(text)

        text, owner, longest_clause, piece_ids = tf.cond(
            tf.reduce_any(sentence_tokens > limit), cut, whole)
        return (tf.RaggedTensor.from_value_rowids(text, owner, nrows=tf.size(
            sentences, out_type=tf.int64)), longest_clause, piece_ids)

    def _cut(self, sentences: tf.Tensor, sentence_tokens: tf.Tensor
             ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """`chunks` for a batch with a long sentence: the pieces [P], the sentence of each
        [P] (in order) and the tokens of each sentence's longest clause [N]."""
        limit = self.hparams.max_source_length
        target = self.hparams.clause_tokens or limit
        pieces, counts = tf.RaggedTensor.from_tensor(sentences[:, None]), sentence_tokens
        for level, cut in enumerate(segmentation.CUTS):
            if level:
                counts = self.token_counts(pieces.flat_values)
            last = level == len(segmentation.CUTS) - 1  # what is left: clauses
            if last:
                longest_clause = tf.reduce_max(pieces.with_flat_values(counts), axis=1)
            too_long = (tf.gather(sentence_tokens, pieces.value_rowids()) > limit) & (
                counts > (limit if last else target))
            pieces = pieces.with_flat_values(segmentation.cut_where(
                pieces.flat_values, too_long, cut)).merge_dims(1, 2)
        chunk = segmentation.pack(self.token_counts(pieces.flat_values), pieces.value_rowids(),
                                  target)
        count = tf.reduce_max(tf.concat([[-1], chunk], axis=0)) + 1
        return (tf.strings.unsorted_segment_join(pieces.flat_values, chunk, count),
                tf.math.unsorted_segment_max(pieces.value_rowids(), chunk, count),
                longest_clause)

    def translate(self, english: tf.Tensor, beam: bool = False) -> dict[str, tf.Tensor]:
        """[B] lines -> the signatures' outputs. With hparams.split_sentences, each sentence of a
        line is translated on its own (one batch for all of them), a long one in pieces cut at
        its clauses (`chunks`), and the line's outputs joined: its pieces' translations, their
        ids one after the other, their scores summed, the token count of its longest piece (a
        piece is cut at max_source_length) and of its longest clause (without split_sentences,
        a line is one piece and one clause)."""
        if not self.hparams.split_sentences:
            lines = tf.RaggedTensor.from_tensor(english[:, None])
            output = self.translate_sentences(english, beam)
            per_line = lines.with_flat_values
            longest_clause = output["source_tokens"]
        else:
            sentences = segmentation.split_sentences(english)
            pieces, longest_clause, piece_ids = self.chunks(sentences.flat_values)
            output = self.translate_ids(piece_ids, beam)
            nested = sentences.with_flat_values(pieces)  # [B, (sentences), (pieces)]

            def per_line(values):
                return nested.with_flat_values(values).merge_dims(1, 2)

            longest_clause = tf.reduce_max(sentences.with_flat_values(longest_clause), axis=1)
        return {TRANSLATION: segmentation.join_sentences(per_line(output[TRANSLATION])),
                "token_ids": per_line(output["token_ids"]).merge_dims(1, 2).to_tensor(PAD_ID),
                "score": tf.reduce_sum(per_line(output["score"]), axis=1),
                "source_tokens": tf.maximum(tf.reduce_max(per_line(output["source_tokens"]),
                                                          axis=1), 0),
                "clause_tokens": tf.maximum(longest_clause, 0),
                "max_source_tokens": tf.fill(tf.shape(english), self.hparams.max_source_length),
                "beam_width": tf.fill(tf.shape(english), self.hparams.beam_width if beam else 1)}

    def translate_sentences(self, english: tf.Tensor, beam: bool = False
                            ) -> dict[str, tf.Tensor]:
        """[B] sentences, each translated whole: translation [B], token_ids [B, (L)] (the
        translation's: before the first END_ID, PAD_ID dropped), score [B], source_tokens [B]."""
        return self.translate_ids(self.tokens(english), beam)

    def translate_ids(self, ids: tf.RaggedTensor, beam: bool = False) -> dict[str, tf.Tensor]:
        """`translate_sentences` of sentences already tokenized (`tokens`)."""
        source_ids, source_tokens = self.padded(ids)
        token_ids, score = self.decode_by_length(
            source_ids, self.beam_ids if beam else self.greedy_ids,
            max(DECODE_ROWS // self.hparams.beam_width, 1) if beam else DECODE_ROWS)
        # An input with no tokens (empty or whitespace) translates to the empty string.
        has_input = tf.reduce_any(tf.not_equal(source_ids, PAD_ID), axis=1)
        token_ids = tf.where(has_input[:, None], token_ids, PAD_ID)
        ended = tf.cumsum(tf.cast(tf.equal(token_ids, END_ID), tf.int32), axis=1)
        token_ids = tf.ragged.boolean_mask(token_ids,
                                           tf.equal(ended, 0) & tf.not_equal(token_ids, PAD_ID))
        return {TRANSLATION: detokenize(tf.gather(self.target_tokens, token_ids)),
                "token_ids": token_ids,
                "score": tf.where(has_input, score, 0.0), "source_tokens": source_tokens}

    def decode_by_length(self, source_ids: tf.Tensor, decode: Callable, sub_batch: int
                         ) -> tuple[tf.Tensor, tf.Tensor]:
        """`decode` (greedy_ids or beam_ids) over source ids [B, S] sorted by length, in
        sub-batches of `sub_batch` sentences with their own source length, the answers in the
        input's order: a sub-batch decodes until its longest translation ends and attends over its
        longest source, so sentences of like lengths together waste the least, whatever order
        a client sends (nmt translate, the Evaluator, TF Serving's clients).
        Returns token_ids [B, L] and scores [B], as `decode` does."""
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.int32), axis=1)
        order = tf.argsort(lengths, stable=True)
        ids, lengths = tf.gather(source_ids, order), tf.gather(lengths, order)
        longest = tf.reduce_max(tf.concat([[0], decoding.max_decode_length(source_ids,
                                                                            self.hparams)], 0))
        count = tf.maximum((tf.size(lengths) + sub_batch - 1) // sub_batch, 1)

        def decode_sub_batch(i, tokens, scores):
            rows = tf.range(i * sub_batch, tf.minimum((i + 1) * sub_batch, tf.size(lengths)))
            width = tf.reduce_max(tf.concat([[1], tf.gather(lengths, rows)], 0))
            token_ids, score = decode(tf.gather(ids, rows)[:, :width])
            token_ids = tf.pad(token_ids, [[0, 0], [0, longest - tf.shape(token_ids)[1]]])
            return i + 1, tokens.write(i, token_ids), scores.write(i, score)

        _, tokens, scores = tf.while_loop(
            lambda i, *_: i < count, decode_sub_batch,
            (tf.constant(0), tf.TensorArray(tf.int32, count, infer_shape=False,
                                            element_shape=tf.TensorShape([None, None])),
             tf.TensorArray(tf.float32, count, infer_shape=False,
                            element_shape=tf.TensorShape([None]))))
        inverse = tf.math.invert_permutation(order)
        return tf.gather(tokens.concat(), inverse), tf.gather(scores.concat(), inverse)

    @_traced(tf.TensorSpec([None, None], tf.int32))
    def beam_ids(self, source_ids):
        """decoding.beam_search_decode of source ids [B, S]: (token_ids [B, L], score [B]); a
        tf.function of its own, as greedy_ids."""
        return decoding.beam_search_decode(
            self.model, source_ids, decoding.max_decode_length(source_ids, self.hparams),
            self.hparams.beam_width, self.hparams.beam_alpha, self.hparams.decode_loop_ngram,
            self.hparams.decode_loop_repeats, self.spelling)

    @_traced(tf.TensorSpec([None, None], tf.int32))
    def greedy_ids(self, source_ids):
        """decoding.greedy_decode of source ids [B, S]: (token_ids [B, L], score [B]).

        A tf.function of its own so that tf.saved_model.save traces the greedy decoder once;
        each signature that called it directly traced a copy, and the decoders' traces are
        most of an export's time (docs/benchmarks-history.md, "Export")."""
        return decoding.greedy_decode(self.model, source_ids,
                                      decoding.max_decode_length(source_ids, self.hparams),
                                      self.hparams.decode_loop_ngram,
                                      self.hparams.decode_loop_repeats, self.spelling)

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
        token_ids, _ = self.greedy_ids(source_ids)
        target_in = tf.concat([tf.fill([tf.shape(token_ids)[0], 1], START_ID),
                               token_ids[:, :-1]], axis=1)
        weights = self.model.cross_attention_weights(source_ids, target_in)
        return {"attention": tf.reduce_mean(weights[:, -1], axis=1),  # [B, T, S]
                "source_tokens": tf.gather(self.source_tokens, source_ids),  # [B, S]
                "target_tokens": tf.gather(self.target_tokens, token_ids)}  # [B, T]

    def reference_token_stats(self, examples: tf.Tensor) -> dict[str, tf.Tensor]:
        """reference_token_sums over each serialized example's French references."""
        features = self.transform(tf.io.parse_example(examples, self._raw_spec))
        return reference_token_sums(self.model, features[SOURCE_IDS], features[TARGET_IDS],
                                    self.hparams)

    @_signature("examples")
    def serve_examples(self, examples):
        # serve_greedy's trace, not one of its own (see greedy_ids).
        return {TRANSLATION: self.serve_greedy(self.parse_english(examples))[TRANSLATION],
                **self.reference_token_stats(examples)}

    @_signature("examples")
    def serve_transform_features(self, examples):
        features = self.transform({ENGLISH: tf.reshape(self.parse_english(examples), [-1, 1])})
        return {LENGTH_BUCKET: features[LENGTH_BUCKET]}


def reference_token_sums(model: Transformer, source_ids: tf.RaggedTensor,
                         references: tf.RaggedTensor, hparams: HParams) -> dict[str, tf.Tensor]:
    """Teacher-forced on every French reference of each example: sums per example [B] of
    -log p(token), of argmax-correct tokens and of target tokens (with [end]), from which TFMA
    computes corpus token accuracy and perplexity.

    source_ids [B, (S)] and references [B, (R), (T)] are Transform's ids. The source is cut at
    max_source_length, as translate() cuts it. A reference longer than max_target_length (the
    longest target the model trains on) is scored on its first max_target_length tokens only,
    without [end]: the reference does not end there. The references go through the model
    REFERENCE_CHUNK at a time, shortest first, so memory is bounded whatever an example or a
    batch holds, and a chunk's references pad to lengths close to their own.
    """
    batch = references.nrows()
    # The sums go to their examples by `owner`, whatever the order.
    order = tf.argsort(references.values.row_lengths(), stable=True)
    owner = tf.gather(references.value_rowids(), order)  # example of each reference [N]
    sources = source_ids[:, :hparams.max_source_length]
    targets = tf.gather(references.values, order)  # [N, (T)]
    cut = targets.row_lengths() > hparams.max_target_length  # [N]
    targets = targets[:, :hparams.max_target_length]

    def chunk_sums(start: tf.Tensor, nll: tf.Tensor, correct: tf.Tensor, count: tf.Tensor
                   ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
        end = tf.minimum(start + REFERENCE_CHUNK, targets.nrows())
        rows = owner[start:end]
        target = targets[start:end]
        first = tf.RaggedTensor.from_tensor(
            tf.fill([end - start, 1], tf.constant(START_ID, target.dtype)))
        # A cut reference's last label is PAD_ID: weight 0, so no [end] is scored for it.
        last = tf.RaggedTensor.from_tensor(tf.cast(tf.where(cut[start:end], PAD_ID, END_ID),
                                                   target.dtype)[:, None])
        target_in = tf.cast(tf.concat([first, target], axis=1).to_tensor(PAD_ID), tf.int32)
        labels = tf.cast(tf.concat([target, last], axis=1).to_tensor(PAD_ID), tf.int32)
        source = tf.cast(tf.gather(sources, rows).to_tensor(PAD_ID), tf.int32)
        logits = model((source, target_in), training=False)
        weights = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)
        hits = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)

        def per_example(per_token: tf.Tensor) -> tf.Tensor:
            return tf.math.unsorted_segment_sum(tf.reduce_sum(per_token * weights, axis=1),
                                                rows, batch)

        return (end, nll + per_example(token_cross_entropy(labels, logits)),
                correct + per_example(hits), count + per_example(tf.ones_like(weights)))

    zeros = tf.zeros([batch])
    _, nll, correct, count = tf.while_loop(
        lambda start, *_: start < targets.nrows(), chunk_sums,
        (tf.constant(0, targets.row_splits.dtype), zeros, zeros, zeros),
        # One chunk at a time: by default a graph while_loop runs up to 10 iterations at once,
        # and nothing here but the running sums orders them, so the model would run on 10
        # chunks together.
        parallel_iterations=1)
    return {"token_nll": nll, "token_correct": correct, "token_count": count}


def _copy(model: Transformer, policy: str) -> Transformer:
    """A model of `model`'s hparams and weights, computing with Keras dtype policy `policy`."""
    copy = Transformer(dataclasses.replace(model.hparams, precision="float32"), policy=policy)
    copy((tf.ones([1, 1], tf.int32), tf.ones([1, 1], tf.int32)))
    copy.set_weights(model.get_weights())
    return copy


def float32_copy(model: Transformer) -> Transformer:
    """The trained weights in a float32 model built outside any distribution strategy.

    Mixed-precision training keeps float32 variables but computes in float16/bfloat16; serving
    and the Evaluator should not (float16 matmuls are emulated, slowly, on most CPUs). Plain
    variables also keep the export free of the strategy's collectives, so the chief alone can
    write it.
    """
    if tf.distribute.has_strategy():
        raise RuntimeError("float32_copy must be called outside the strategy's scope")
    return _copy(model, "float32")


def decoding_copy(model: Transformer, precision: str) -> Transformer:
    """The model that decodes in the export: `model` itself for float32, else a copy with
    bfloat16 weights (hparams.DECODE_PRECISIONS; "auto": devices.resolve_decode_precision, with
    decode_probe's measure of this model on this CPU)."""
    copies: list[Transformer] = []

    def speedup() -> float:
        copies.append(_copy(model, "bfloat16"))
        return decode_probe.bfloat16_speedup(model, copies[0])

    chosen, why = devices.resolve_decode_precision(precision, bfloat16_speedup=speedup)
    if precision == "auto":
        _LOG.info("The exported model decodes with %s weights (%s).", chosen, why)
    if chosen == "float32":
        return model
    return copies[0] if copies else _copy(model, "bfloat16")


def signatures(translator: Translator) -> dict[str, tf.types.experimental.GenericFunction]:
    """The SavedModel's signatures by name (the module docstring lists them)."""
    return {SERVING_SIGNATURE: translator.serve_greedy,
            BEAM_SIGNATURE: translator.serve_beam,
            EXAMPLES_SIGNATURE: translator.serve_examples,
            TRANSFORM_SIGNATURE: translator.serve_transform_features,
            ATTENTION_SIGNATURE: translator.serve_attention}


def export_translator(model: Transformer, tf_transform_output: tft.TFTransformOutput,
                      hparams: HParams, export_dir: str) -> str:
    """The SavedModel of `model` (float32: float32_copy) in export_dir, with TF Serving's
    warm-up requests for the signatures a client calls; returns the precision it decodes
    with (hparams.decode_precision, "auto" resolved)."""
    translator = Translator(model, tf_transform_output, hparams)
    tf.saved_model.save(translator, export_dir, signatures=signatures(translator))
    serving_warmup.write_warmup_requests(export_dir, (SERVING_SIGNATURE, BEAM_SIGNATURE))
    return translator.decode_precision

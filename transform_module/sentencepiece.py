"""Transform's SentencePiece analyzer: learns the unigram-LM model that preprocessing.py applies
in-graph with tensorflow-text's SentencepieceTokenizer (ops that TF Serving 2.12 links in).

The learner (the sentencepiece library's trainer) reads sentences, not counted words, so its
time grows with what it reads: it is fed a fixed-size sample of the distinct sentences, chosen
by a hash of each sentence (the same sample whatever the runner's bundles), and the sample is
drawn on the workers, each keeping its own `max_sentences` before the final merge.
"""
from __future__ import annotations

import hashlib
import io
import logging
import os
import time

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam

from transform_module.tokens import END_ID, PAD_ID, START_ID, UNK_ID
from transform_module.wordpiece import WORDPIECE_JOINER, learn_each

_LOG = logging.getLogger(__name__)

WORD_START = "▁"  # SentencePiece's mark for a piece that begins a word
MODEL_SUFFIX = ".model"  # the serialized model, an asset beside the vocabulary file


def sentencepiece_vocabularies(sentences: dict[str, tf.Tensor], vocab_size: int,
                               max_sentences: int, reserved_tokens: tuple[str, ...]
                               ) -> dict[str, tuple[tf.Tensor, tf.Tensor]]:
    """A custom Transform analyzer: for each vocabulary name, learns a unigram SentencePiece
    model of at most `vocab_size` pieces (plus the reserved tokens, which take ids 0-3) from a
    sample of at most `max_sentences` of its distinct [N] `sentences`. Returns, by name, the
    paths (assets) of the vocabulary file, which lists the pieces in id order after the
    reserved tokens, written as WordPiece writes them (see `wordpiece_form`), and of the
    serialized model. The models are learned in one Beam stage, one element each, so a runner
    with several workers learns them at once."""
    names = list(sentences)
    paths = tft.experimental.ptransform_analyzer(
        inputs=[sentences[name] for name in names],
        ptransform=_LearnSentencepiece(names, vocab_size, max_sentences, reserved_tokens),
        output_dtypes=[tf.string] * 2 * len(names), output_shapes=[[]] * 2 * len(names),
        output_asset_default_values=[b"[UNK]", b""] * len(names),
        name="_".join(names) + "_sentencepiece")
    return {name: (paths[2 * i], paths[2 * i + 1]) for i, name in enumerate(names)}


def served_assets(served: str) -> str | None:
    """The assets directory of a served version's directory, or of the newest complete version
    under a serving directory (TF Serving's layout, as components/serving_versions.py reads it:
    integer names, complete once saved_model.pb is there); None when nothing is served."""
    if tf.io.gfile.exists(os.path.join(served, "saved_model.pb")):
        return os.path.join(served, "assets")
    serving_dir = served
    versions = [os.path.basename(os.path.dirname(path)) for path in
                tf.io.gfile.glob(os.path.join(serving_dir, "*", "saved_model.pb"))]
    numbered = [int(version) for version in versions if version.isdigit()]
    return os.path.join(serving_dir, str(max(numbered)), "assets") if numbered else None


def kept_sentencepiece_vocabularies(sentences: dict[str, tf.Tensor], directory: str
                                    ) -> dict[str, tuple[tf.Tensor, tf.Tensor]]:
    """As `sentencepiece_vocabularies`, but each vocabulary and model is an existing one, the
    files `<directory>/<name>` and `<name>.model` (a served model's, for a warm start: its ids
    must keep meaning the same pieces), copied unchanged; nothing is learned. A ValueError
    names a missing file before anything runs (a served model of another tokenizer, or with
    separate vocabularies: on Kubeflow nothing checked it before Transform)."""
    names = list(sentences)
    for name in names:
        for suffix in ("", MODEL_SUFFIX):
            if not tf.io.gfile.exists(os.path.join(directory, name + suffix)):
                raise ValueError(
                    f"Cannot keep the served vocabulary: {directory} has no {name + suffix}, "
                    "so that model was not trained with this run's SentencePiece settings; "
                    "train one without --warm-start first.")
    paths = tft.experimental.ptransform_analyzer(
        inputs=[sentences[name] for name in names],
        ptransform=_KeepSentencepiece(names, directory),
        output_dtypes=[tf.string] * 2 * len(names), output_shapes=[[]] * 2 * len(names),
        output_asset_default_values=[b"[UNK]", b""] * len(names),
        name="_".join(names) + "_kept_sentencepiece")
    return {name: (paths[2 * i], paths[2 * i + 1]) for i, name in enumerate(names)}


class _KeepSentencepiece(tft_beam.experimental.PTransformAnalyzer):
    """Ignores the sentences: by vocabulary, two PCollections of one path each, of copies of
    the kept vocabulary file and model."""

    def __init__(self, names: list[str], directory: str) -> None:
        super().__init__()
        self.names, self.directory = names, directory

    def expand(self, batches: beam.PCollection) -> tuple[beam.PCollection, ...]:
        outputs = []
        for name in self.names:
            copied = (batches.pipeline
                      | f"Kept[{name}]" >> beam.Create([name])
                      | f"Copy[{name}]" >> beam.Map(self._copy))
            outputs.extend(copied | f"Path{j}[{name}]" >> beam.Map(
                lambda paths, k=j: np.array(paths[k])) for j in range(2))
        return tuple(outputs)

    def _copy(self, name: str) -> tuple[bytes, bytes]:
        tf.io.gfile.makedirs(self.base_temp_dir)
        path = os.path.join(self.base_temp_dir, name)
        for suffix in ("", MODEL_SUFFIX):  # kept_sentencepiece_vocabularies checked they exist
            tf.io.gfile.copy(os.path.join(self.directory, name + suffix), path + suffix,
                             overwrite=True)
        with tf.io.gfile.GFile(path) as f:
            pieces = sum(1 for _ in f)
        _LOG.info("Kept %s from %s: %d SentencePiece pieces, none learned.", name,
                  self.directory, pieces)
        return path.encode(), (path + MODEL_SUFFIX).encode()


class _LearnSentencepiece(tft_beam.experimental.PTransformAnalyzer):
    """PCollection of batches ([sentences] per vocabulary) -> two PCollections per vocabulary,
    of one element each: its vocabulary file's path, its model's path."""

    def __init__(self, names: list[str], vocab_size: int, max_sentences: int,
                 reserved_tokens: tuple[str, ...]) -> None:
        super().__init__()
        self.names, self.vocab_size = names, vocab_size
        self.max_sentences, self.reserved_tokens = max_sentences, reserved_tokens

    def expand(self, batches: beam.PCollection) -> tuple[beam.PCollection, ...]:
        bounded = {}
        for index, name in enumerate(self.names):
            distinct = (batches
                        | f"Sentences[{name}]" >> beam.FlatMap(
                            lambda batch, i=index: set(batch[i]))
                        | f"Distinct[{name}]" >> beam.Distinct())
            bounded[name] = (
                distinct | f"Sample[{name}]" >> beam.combiners.Top.Of(self.max_sentences,
                                                                      key=_sample_order),
                distinct | f"CountDistinct[{name}]" >> beam.combiners.Count.Globally())
        return learn_each(bounded, self._learn, paths=2)

    def _learn(self, name: str, sentences: list[bytes], total: int) -> tuple[bytes, bytes]:
        start = time.monotonic()
        model = learn_model([s.decode() for s in sentences if s], self.vocab_size,
                            self.reserved_tokens)
        pieces = pieces_of(model)[len(self.reserved_tokens):]
        sampled = (f" (a sample of {len(sentences):,} of {total:,}: sentencepiece_max_sentences)"
                   if total > len(sentences) else "")
        _LOG.info("Learned %s: %d SentencePiece pieces from %s distinct sentences%s in %.0f s.",
                  name, len(pieces), f"{len(sentences):,}", sampled, time.monotonic() - start)
        tf.io.gfile.makedirs(self.base_temp_dir)
        path = os.path.join(self.base_temp_dir, name)
        with tf.io.gfile.GFile(path, "w") as f:
            f.write("".join(wordpiece_form(p) + "\n" for p in pieces))
        with tf.io.gfile.GFile(path + MODEL_SUFFIX, "wb") as f:
            f.write(model)
        return path.encode(), (path + MODEL_SUFFIX).encode()


def _sample_order(sentence: bytes) -> bytes:
    """Top's order for the sample: a hash, so the kept sentences are spread over the corpus
    (fra.txt is sorted by length) and never depend on how the runner bundled the data."""
    return hashlib.md5(sentence).digest()


def learn_model(sentences: list[str], vocab_size: int, reserved_tokens: tuple[str, ...]
                ) -> bytes:
    """The serialized unigram model learned from `sentences` (already normalized and split by
    preprocessing.normalize: SentencePiece's own normalization is off). Its first ids are the
    reserved tokens, in their order; at most `vocab_size` pieces follow (fewer if the text
    does not support that many), every character seen among them."""
    import sentencepiece  # the learner: a Transform-time dependency, not a serving one

    pad, unk, start, end = (reserved_tokens[i] for i in (PAD_ID, UNK_ID, START_ID, END_ID))
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model, model_type="unigram",
        vocab_size=vocab_size + len(reserved_tokens), hard_vocab_limit=False,
        character_coverage=1.0, normalization_rule_name="identity",
        pad_id=PAD_ID, unk_id=UNK_ID, bos_id=START_ID, eos_id=END_ID, pad_piece=pad,
        unk_piece=unk, bos_piece=start, eos_piece=end, num_threads=os.cpu_count() or 1,
        minloglevel=2)
    return model.getvalue()


def pieces_of(model: bytes) -> list[str]:
    """The model's pieces in id order (the reserved tokens first)."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=model)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


def wordpiece_form(piece: str) -> str:
    """A SentencePiece piece as the vocabulary file writes it, so that one detokenizer serves
    both tokenizers: a word's first piece without its mark ("▁homme" -> "homme"), a piece
    inside a word with WordPiece's joiner ("ment" -> "##ment"). The bare mark, a word start
    whose letters follow as inner pieces, stays "▁" (preprocessing.detokenize drops it)."""
    if piece.startswith(WORD_START) and piece != WORD_START:
        return piece[len(WORD_START):]
    return piece if piece == WORD_START else WORDPIECE_JOINER + piece

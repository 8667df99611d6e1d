"""An Examples artifact's splits read back: one (English, all French references) per example.

TensorFlow only, no Beam or TFX, so that `nmt evaluate` reads its model's training sentences
(the training-overlap check) without loading them. The records are parsed a batch at a time in
TensorFlow's own parser: one by one in Python took most of `nmt evaluate`'s time on fra.txt's
train split (docs/benchmarks-history.md, "`nmt evaluate`'s overlap check").
"""
from __future__ import annotations

import os

import tensorflow as tf

# The features ExampleGen writes (executor.to_example).
ENGLISH_FEATURE, FRENCH_FEATURE = "english", "french"
# Records parsed at once: about a megabyte of fra.txt's sentences.
_BATCH = 4096


def split_files(examples_uri: str, split: str) -> list[str]:
    """The record files of one split, sorted (directories, such as a restarted job's
    `beam-temp-*`, left out)."""
    return sorted(path for path in tf.io.gfile.glob(
        os.path.join(examples_uri, f"Split-{split}", "*")) if not tf.io.gfile.isdir(path))


def _batches(examples_uri: str, split: str, features: dict) -> tf.data.Dataset:
    files = split_files(examples_uri, split)
    return tf.data.TFRecordDataset(files, compression_type="GZIP").batch(_BATCH).map(
        lambda records: tf.io.parse_example(records, features))


def read_english(examples_uri: str, split: str) -> list[str]:
    """The English sentence of every example of one split, in file order."""
    features = {ENGLISH_FEATURE: tf.io.FixedLenFeature([], tf.string)}
    return [english.decode("utf-8") for batch in _batches(examples_uri, split, features)
            for english in batch[ENGLISH_FEATURE].numpy()]


def read_split(examples_uri: str, split: str) -> list[tuple[str, list[str]]]:
    """(English, all French references) of every example of one split, in file order: the
    inverse of `executor.to_example`, for `nmt report`, the tests and the benchmarks."""
    features = {ENGLISH_FEATURE: tf.io.FixedLenFeature([], tf.string),
                FRENCH_FEATURE: tf.io.VarLenFeature(tf.string)}
    rows = []
    for batch in _batches(examples_uri, split, features):
        references = tf.RaggedTensor.from_sparse(batch[FRENCH_FEATURE]).to_list()
        rows += [(english.decode("utf-8"), [text.decode("utf-8") for text in texts])
                 for english, texts in zip(batch[ENGLISH_FEATURE].numpy(), references)]
    return rows

"""[UNK] rate of Transform's vocabularies on a split: how much the vocabulary loses.

Usage: python benchmarks/experiments/unk_rate.py --pipeline-root /work/runs/cpu [--split eval]
(the newest Transform run under the root).
"""
from __future__ import annotations

import argparse
import json
import os

import tensorflow as tf
import tensorflow_transform as tft

from benchmarks.pipeline_outputs import latest
from transform_module.preprocessing import SOURCE_IDS, SOURCE_VOCAB, TARGET_IDS, TARGET_VOCAB
from transform_module.tokens import UNK_ID


def transformed_examples_of(transform_graph: str) -> str:
    """A Transform execution's transformed_examples directory, beside its transform_graph."""
    execution = os.path.basename(transform_graph.rstrip("/"))
    return os.path.join(os.path.dirname(os.path.dirname(transform_graph.rstrip("/"))),
                        "transformed_examples", execution)


def unk_rates(transform_graph: str, split: str) -> dict:
    """Per side: vocabulary size, tokens, tokens per sentence, [UNK] token and sentence rates."""
    output = tft.TFTransformOutput(transform_graph)
    spec = {k: v for k, v in output.transformed_feature_spec().items()
            if k in (SOURCE_IDS, TARGET_IDS)}
    files = tf.io.gfile.glob(
        os.path.join(transformed_examples_of(transform_graph), f"Split-{split}", "*"))
    # tokens, unk, sentences, sentences with unk
    counts = {SOURCE_IDS: [0, 0, 0, 0], TARGET_IDS: [0, 0, 0, 0]}
    for batch in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(4096):
        features = tf.io.parse_example(batch, spec)
        for key in counts:
            ids = features[key]
            if key == TARGET_IDS:
                ids = ids.values  # one row per reference
            unk = tf.cast(tf.equal(ids, UNK_ID), tf.int64)
            counts[key][0] += int(tf.size(ids.flat_values))
            counts[key][1] += int(tf.reduce_sum(unk))
            counts[key][2] += int(ids.nrows())
            counts[key][3] += int(tf.math.count_nonzero(tf.reduce_sum(unk, axis=1)))
    sizes = {SOURCE_IDS: output.vocabulary_size_by_name(SOURCE_VOCAB),
             TARGET_IDS: output.vocabulary_size_by_name(TARGET_VOCAB)}
    return {("english" if key == SOURCE_IDS else "french"): {
        "vocabulary_size": sizes[key], "sentences": sentences, "tokens": tokens,
        "tokens_per_sentence": round(tokens / sentences, 2),
        "unk_token_rate": round(unk / tokens, 4),
        "sentences_with_unk_rate": round(with_unk / sentences, 4)}
        for key, (tokens, unk, sentences, with_unk) in counts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pipeline-root", required=True)
    parser.add_argument("--split", default="eval")
    args = parser.parse_args()
    transform_graph = latest(os.path.join(args.pipeline_root, "Transform", "transform_graph", "*"))
    print(json.dumps({"split": args.split, **unk_rates(transform_graph, args.split)}, indent=2))


if __name__ == "__main__":
    main()

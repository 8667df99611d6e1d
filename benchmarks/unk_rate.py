"""[UNK] rate of Transform's word vocabularies on a split: how much the vocabulary loses.

Usage: python benchmarks/unk_rate.py --pipeline-root /work/runs/cpu [--split eval]
"""
from __future__ import annotations

import argparse
import json
import os

import tensorflow as tf
import tensorflow_transform as tft

from benchmarks.train_throughput import latest
from trainer_module.hparams import UNK_ID
from trainer_module.preprocessing import SOURCE_IDS, TARGET_IDS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pipeline-root", required=True)
    parser.add_argument("--split", default="eval")
    args = parser.parse_args()
    output = tft.TFTransformOutput(
        latest(os.path.join(args.pipeline_root, "Transform", "transform_graph", "*")))
    examples = latest(os.path.join(args.pipeline_root, "Transform", "transformed_examples", "*"))
    spec = {k: v for k, v in output.transformed_feature_spec().items()
            if k in (SOURCE_IDS, TARGET_IDS)}
    files = tf.io.gfile.glob(os.path.join(examples, f"Split-{args.split}", "*"))
    counts = {SOURCE_IDS: [0, 0, 0, 0], TARGET_IDS: [0, 0, 0, 0]}  # tokens, unk, sentences, with unk
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
    sizes = {SOURCE_IDS: output.vocabulary_size_by_name("english_vocab"),
             TARGET_IDS: output.vocabulary_size_by_name("french_vocab")}
    print(json.dumps({
        "split": args.split,
        **{("english" if key == SOURCE_IDS else "french"): {
            "vocabulary_words": sizes[key], "tokens": tokens,
            "unk_token_rate": round(unk / tokens, 4),
            "sentences_with_unk_rate": round(with_unk / sentences, 4)}
           for key, (tokens, unk, sentences, with_unk) in counts.items()},
    }, indent=2))


if __name__ == "__main__":
    main()

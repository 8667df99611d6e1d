"""Word vs. WordPiece vocabularies side by side: coverage ([UNK] rates), sequence lengths and
training throughput of the same profile on both Transform outputs, in one process.

Usage: python benchmarks/experiments/tokenizers.py --word DIR --wordpiece DIR [--profile cpu]
           [--rounds 3]
DIR is a Transform execution's transform_graph directory (e.g. /work/runs/cpu/Transform/
transform_graph/7); its transformed_examples sibling is read. Throughput alternates between
the two in rounds, so machine noise hits both alike; pairs/s is the tokenizer-neutral number
(a subword token is less text than a word token).
"""
from __future__ import annotations

import argparse
import json

import tensorflow as tf
import tensorflow_transform as tft

from benchmarks.pipeline_outputs import profile_hparams
from benchmarks.experiments.train_throughput import measure
from benchmarks.experiments.unk_rate import transformed_examples_of, unk_rates
from trainer_module.input_pipeline import make_dataset
from trainer_module.task import build_keras_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--word", required=True)
    parser.add_argument("--wordpiece", required=True)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--split", default="eval", help="split for the coverage numbers")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round")
    args = parser.parse_args()
    results, trainers = {}, {}
    for name, graph in (("word", args.word), ("wordpiece", args.wordpiece)):
        results[name] = {"transform_graph": graph, **unk_rates(graph, args.split)}
        output = tft.TFTransformOutput(graph)
        hparams = profile_hparams(args.profile, output)
        tf.random.set_seed(0)
        model = build_keras_model(hparams)
        files = f"{transformed_examples_of(graph)}/Split-train/*"
        dataset = make_dataset(files, output, hparams, training=True, seed=0)
        trainers[name] = (model, iter(dataset))  # continues across rounds
        results[name]["rounds"] = []
    for round_ in range(args.rounds):
        for name, (model, batches) in trainers.items():
            warmup = 10 if round_ == 0 else 2
            results[name]["rounds"].append(measure(model, batches, args.steps, warmup))
    for name, (model, _) in trainers.items():
        results[name]["parameters"] = model.count_params()  # built by now
        rounds = results[name]["rounds"]
        seconds = sum(r["seconds"] for r in rounds)
        results[name]["pairs_per_s"] = round(
            sum(r["pairs_per_s"] * r["seconds"] for r in rounds) / seconds, 1)
        results[name]["target_tokens_per_s"] = round(
            sum(r["target_tokens_per_s"] * r["seconds"] for r in rounds) / seconds)
    results["wordpiece_vs_word_pairs_per_s"] = round(
        results["wordpiece"]["pairs_per_s"] / results["word"]["pairs_per_s"], 2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

"""Train-step time per training precision on this machine: float32, mixed_bfloat16, mixed_float16.

One process, one model per precision (same profile, same initial weights), the same real batches
(Transform's output of a pipeline run), rounds alternating the order of the precisions so that
machine noise hits them alike. Reports the median ms per step and the ratio to float32.

Usage: python benchmarks/precision.py --pipeline-root /work/runs/full [--profile cpu]
           [--rounds 5] [--steps 10]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time

import tensorflow as tf
import tensorflow_transform as tft

from train_throughput import latest
from trainer_module import devices, hparams as hparams_lib
from trainer_module.input_pipeline import make_dataset
from trainer_module.task import _build_keras_model, vocab_sizes

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pipeline-root", required=True)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per precision and round")
    args = parser.parse_args()
    transform_dir = latest(os.path.join(args.pipeline_root, "Transform", "transform_graph", "*"))
    examples = latest(os.path.join(args.pipeline_root, "Transform", "transformed_examples", "*"))
    output = tft.TFTransformOutput(transform_dir)
    base = hparams_lib.get_profile(args.profile).with_vocab_sizes(*vocab_sizes(output))
    batches = list(make_dataset(os.path.join(examples, "Split-train", "*"), output, base,
                                training=True, seed=0).take(args.steps))
    models = {}
    for precision in PRECISIONS:
        tf.random.set_seed(0)
        models[precision] = _build_keras_model(dataclasses.replace(base, precision=precision))
        for inputs, labels in batches:  # trace every batch shape before timing
            models[precision].train_on_batch(inputs, labels)
    times: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    for round_index in range(args.rounds):
        order = PRECISIONS[round_index % 3:] + PRECISIONS[:round_index % 3]
        for precision in order:
            start = time.perf_counter()
            for inputs, labels in batches:
                models[precision].train_on_batch(inputs, labels)
            times[precision].append((time.perf_counter() - start) / len(batches) * 1000)
    median = {p: round(statistics.median(t), 1) for p, t in times.items()}
    print(json.dumps({
        "profile": args.profile, "cpu_bfloat16_units": devices.cpu_has_bfloat16_units(),
        "rounds": args.rounds, "steps_per_round": len(batches),
        "ms_per_step_median": median,
        "ms_per_step_all_rounds": {p: [round(x, 1) for x in t] for p, t in times.items()},
        "speedup_vs_float32": {p: round(median["float32"] / median[p], 2) for p in PRECISIONS},
    }, indent=2))


if __name__ == "__main__":
    main()

"""Training throughput: length bucketing with dynamic padding vs. padding to a fixed length.

Same model (a profile), same data (Transform's output of a pipeline run), same process, the two
input pipelines one after the other; reports real (non-PAD) target tokens per second.

Usage: python benchmarks/experiments/train_throughput.py --pipeline-root /work/runs/cpu
           [--profile cpu] [--steps 40] [--warmup-steps 5]
"""
from __future__ import annotations

import argparse
import json
import time

import tensorflow as tf

from benchmarks import pipeline_outputs
from trainer_module.input_pipeline import make_dataset
from trainer_module.task import build_keras_model


def measure(model, dataset, steps: int, warmup_steps: int) -> dict:
    """Trains `steps` batches after `warmup_steps`; `dataset` may be an iterator to continue."""
    iterator = iter(dataset)
    for _ in range(warmup_steps):  # tracing for new shapes, cache filling
        model.train_on_batch(*next(iterator))
    tokens = padded = pairs = 0
    start = time.perf_counter()
    for _ in range(steps):
        inputs, labels = next(iterator)
        model.train_on_batch(inputs, labels)
        tokens += int(tf.math.count_nonzero(labels))
        padded += int(tf.size(labels))
        pairs += int(tf.shape(labels)[0])
    seconds = time.perf_counter() - start
    return {"target_tokens_per_s": round(tokens / seconds),
            "pairs_per_s": round(pairs / seconds, 1), "seconds": round(seconds, 1), "steps": steps,
            "padding_fraction": round(1 - tokens / padded, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup-steps", type=int, default=10)
    args, output, files, hparams = pipeline_outputs.parse_training_args(parser)
    tf.random.set_seed(0)
    model = build_keras_model(hparams)
    results = {"profile": args.profile, "pad_to": max(hparams.max_source_length,
                                                      hparams.max_target_length + 1)}
    for name, bucketing in (("bucketing", True), ("pad_to_fixed_length", False)):
        dataset = make_dataset(files, output, hparams, training=True, bucketing=bucketing, seed=0)
        results[name] = measure(model, dataset, args.steps, args.warmup_steps)
    results["parameters"] = model.count_params()
    results["speedup"] = round(results["bucketing"]["target_tokens_per_s"]
                               / results["pad_to_fixed_length"]["target_tokens_per_s"], 2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

"""Train-step time of profile variants on this machine, side by side in one process.

Each variant is the profile with some hyperparameters replaced (precision, XLA, model shape,
...). One model per variant, built from the same seed; each trains on the same first batches
of the training split (Transform's output of a pipeline run), as that variant batches them
(XLA pads to bucket boundaries). Steps are timed as the Trainer's probe times them
(`budget.seconds_per_step`: the compiled train function on an iterator, after an untimed pass;
before 94d0b9f this script called `train_on_batch`, which adds Python per step), and the rounds
rotate the order of the variants so that machine noise hits them alike. Reports median ms per
step, target tokens per second, and both against the first variant.

Usage: python benchmarks/step_time.py --pipeline-root /work/runs/full [--profile cpu]
           [--rounds 5] [--steps 10] [--variant NAME=FIELD=VALUE[,FIELD=VALUE...] ...]
Without --variant: float32, mixed_bfloat16 and mixed_float16 (the precision comparison).
"""
from __future__ import annotations

import argparse
import os
import statistics

import tensorflow as tf

from benchmarks import pipeline_outputs, results
from runners import tensorflow_env
from trainer_module import budget, devices, hparams as hparams_lib
from trainer_module.input_pipeline import make_dataset
from trainer_module.task import build_keras_model

PRECISIONS = [f"{p}=precision={p}" for p in ("float32", "mixed_bfloat16", "mixed_float16")]


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """'xla=use_xla=true,num_layers=2' -> ('xla', {'use_xla': 'true', 'num_layers': '2'})."""
    name, _, overrides = text.partition("=")
    return name, dict(item.split("=", 1) for item in overrides.split(",") if item)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per variant and round")
    parser.add_argument("--variant", action="append", help="NAME=FIELD=VALUE[,FIELD=VALUE...]")
    parser.add_argument("--output", help="also write a result file (a bare name: in "
                                         "benchmarks/results/)")
    args, output, train_files, base = pipeline_outputs.parse_training_args(parser)
    variants = dict(parse_variant(v) for v in args.variant or PRECISIONS)
    configs = {name: hparams_lib.with_overrides(base, o) for name, o in variants.items()}
    for name, hparams in configs.items():  # before any variant is built
        if hparams.precision == "auto":  # the Trainer's probe would decide; say which to time
            parser.error(f"variant {name!r} leaves the profile's precision 'auto': add "
                         "precision=float32 (or mixed_bfloat16, mixed_float16) to it")
    models, batches, tokens = {}, {}, {}
    for name, hparams in configs.items():
        batches[name] = list(make_dataset(train_files, output,
                                          hparams, training=True, seed=0).take(args.steps))
        tokens[name] = sum(int(tf.math.count_nonzero(labels)) for _, labels in batches[name])
        tf.random.set_seed(0)
        models[name] = build_keras_model(hparams)
        budget.seconds_per_step(models[name], batches[name])  # trace (or compile) first
        print(f"{name}: {variants[name] or 'the profile as is'}, traced", flush=True)
    names = list(variants)
    times: dict[str, list[float]] = {n: [] for n in names}
    for round_index in range(args.rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(budget.seconds_per_step(models[name], batches[name]) * 1000)
        print(f"round {round_index + 1}/{args.rounds}: " + ", ".join(
            f"{n} {times[n][-1]:.0f} ms" for n in names), flush=True)
    median = {n: round(statistics.median(t), 1) for n, t in times.items()}
    tokens_per_second = {n: round(tokens[n] / len(batches[n]) / median[n] * 1000)
                         for n in names}
    first = names[0]
    timed = {
        "profile": args.profile, "cpu_bfloat16_units": devices.cpu_has_bfloat16_units(),
        "onednn_kernels": devices.onednn_enabled(),
        "tensorflow_env": {name: os.environ.get(name) for name in tensorflow_env.DEFAULTS},
        "rounds": args.rounds, "steps_per_round": args.steps,
        "variants": variants,
        "ms_per_step_median": median,
        "ms_per_step_all_rounds": {n: [round(x, 1) for x in t] for n, t in times.items()},
        "target_tokens_per_second": tokens_per_second,
        "speedup_vs_first": {n: round(median[first] / median[n], 2) for n in names},
        "tokens_per_second_vs_first": {
            n: round(tokens_per_second[n] / tokens_per_second[first], 2) for n in names},
    }
    results.emit(args.output, "training step time per variant, alternating rounds in one "
                 "process", timed)


if __name__ == "__main__":
    main()

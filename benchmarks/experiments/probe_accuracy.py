"""How well the Trainer's probe predicts its training step time: `train_on_batch` (the probe
before 94d0b9f) against Keras' compiled train function on an iterator (`budget.seconds_per_step`,
as `fit` runs steps), on the probe's own batches, against `fit`'s rate on the batches after them.

Per precision (float32, mixed_bfloat16), one model of the profile; the rounds alternate the two
timings and rotate the precisions. Then `fit` trains --fit-steps more steps and its rate is
taken from the end of its 10th step to the end of the last (tracing left out). What the budget
uses is the probe's ratio to the real rate, so that is what is reported.

Usage: python -m benchmarks.experiments.probe_accuracy --pipeline-root nmt_runs [--profile cpu]
           [--rounds 3] [--fit-steps 100]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

import tf_keras as keras

from benchmarks import pipeline_outputs
from trainer_module import budget, devices
from trainer_module.input_pipeline import make_dataset
from trainer_module.task import build_keras_model

PRECISIONS = ("float32", "mixed_bfloat16")


def train_on_batch_seconds(model: keras.Model, batches: list) -> float:
    """The old probe: one traced pass, then the mean of a timed one."""
    for inputs, labels in batches:
        model.train_on_batch(inputs, labels)
    start = time.perf_counter()
    for inputs, labels in batches:
        model.train_on_batch(inputs, labels)
    return (time.perf_counter() - start) / len(batches)


class _StepClock(keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.ends: list[float] = []

    def on_train_batch_end(self, batch, logs=None) -> None:
        self.ends.append(time.perf_counter())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fit-steps", type=int, default=100)
    args, output, train_files, base = pipeline_outputs.parse_training_args(parser)
    hparams = {p: dataclasses.replace(base, precision=p) for p in PRECISIONS}
    # The probe's batches, as trainer_module.task._probe takes them.
    batches = {p: list(make_dataset(train_files, output, h, training=True)
                       .take(budget.PROBE_STEPS)) for p, h in hparams.items()}
    models = {p: build_keras_model(h) for p, h in hparams.items()}
    methods = {"train_on_batch": train_on_batch_seconds,
               "train_function": budget.seconds_per_step}
    times = {p: {m: [] for m in methods} for p in PRECISIONS}
    for round_index in range(args.rounds):
        order = PRECISIONS[round_index % 2:] + PRECISIONS[:round_index % 2]
        for precision in order:
            names = list(methods) if round_index % 2 == 0 else list(methods)[::-1]
            for name in names:
                times[precision][name].append(methods[name](models[precision],
                                                             batches[precision]))
        print(f"round {round_index + 1}: " + json.dumps(
            {p: {m: round(t[-1] * 1000) for m, t in times[p].items()} for p in PRECISIONS}),
            flush=True)
    fit_seconds = {}
    for precision in PRECISIONS:
        model, clock = build_keras_model(hparams[precision]), _StepClock()
        data = make_dataset(train_files, output, hparams[precision], training=True)
        model.fit(data.skip(budget.PROBE_STEPS), steps_per_epoch=args.fit_steps, epochs=1,
                  verbose=0, callbacks=[clock])
        fit_seconds[precision] = (clock.ends[-1] - clock.ends[9]) / (len(clock.ends) - 10)
        print(f"{precision}: fit {fit_seconds[precision] * 1000:.0f} ms per step", flush=True)
    median = {p: {m: statistics.median(t) for m, t in times[p].items()} for p in PRECISIONS}
    print(json.dumps({
        "profile": args.profile, "cpu_bfloat16_units": devices.cpu_has_bfloat16_units(),
        "rounds": args.rounds, "probe_steps": budget.PROBE_STEPS, "fit_steps": args.fit_steps,
        "ms_per_step_median": {p: {**{m: round(v * 1000, 1) for m, v in median[p].items()},
                                   "fit": round(fit_seconds[p] * 1000, 1)}
                               for p in PRECISIONS},
        "probe_over_fit": {p: {m: round(v / fit_seconds[p], 2) for m, v in median[p].items()}
                           for p in PRECISIONS},
        "bfloat16_speedup": {m: round(median["float32"][m] / median["mixed_bfloat16"][m], 2)
                             for m in methods} | {"fit": round(
                                 fit_seconds["float32"] / fit_seconds["mixed_bfloat16"], 2)},
        "ms_per_step_all_rounds": {p: {m: [round(x * 1000, 1) for x in t]
                                       for m, t in times[p].items()} for p in PRECISIONS},
    }, indent=2))


if __name__ == "__main__":
    main()

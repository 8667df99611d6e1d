"""The training time budget: how many steps this machine trains in it, and which recipe and
precision those steps afford, decided once per training and agreed by every worker.

The budget counts the Trainer's wall time from the start of `run_fn` (probes, tracing, training,
validation, checkpoints; not the export after it), summed over restarts: a resumed run starts
with the seconds its checkpoint recorded (the time after that checkpoint is lost work, redone).
The final step is fixed from the measured step rate just before the cooldown would begin, so
warm-up and cooldown both land inside the budget, the learning rates are exactly those of a run
told that step count from the start, and `--train-steps N` repeats the run.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import time
from typing import Any, Callable

import tensorflow as tf
import tf_keras as keras

from trainer_module import devices
from trainer_module.hparams import MODEL_SIZES, PRECISIONS, HParams, ModelSize
from trainer_module.optimization import cooldown_steps, peak_learning_rate

_LOG = logging.getLogger(__name__)
PLAN_FILE = "plan.json"
PROBE_STEPS = 8  # batches timed per probe, after one traced pass over them


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a training decided before its first step. Kept beside its checkpoints, so that a
    resumed run builds the same model whatever its own probes would say now."""

    precision: str
    recipe: dict[str, Any]  # HParams fields the budget changed (empty: the profile's recipe)

    def apply(self, hparams: HParams, overrides: dict[str, Any]) -> HParams:
        """The profile's hparams with the plan, then the user's overrides (which win)."""
        return sized(hparams, self.recipe, {**overrides, "precision": self.precision})

    def save(self, checkpoint_dir: str) -> None:
        tf.io.gfile.makedirs(checkpoint_dir)
        with tf.io.gfile.GFile(os.path.join(checkpoint_dir, PLAN_FILE), "w") as f:
            json.dump(dataclasses.asdict(self), f, indent=1)

    @classmethod
    def load(cls, checkpoint_dir: str) -> Plan | None:
        path = os.path.join(checkpoint_dir, PLAN_FILE)
        if not tf.io.gfile.exists(path):
            return None
        with tf.io.gfile.GFile(path) as f:
            return cls(**json.load(f))


def seconds_per_step(model: keras.Model, batches: list) -> float:
    """Mean seconds of one training step over `batches`, timed as `fit` runs its steps: Keras'
    compiled train function called once per step on a dataset iterator, after a first pass
    that traces it. (`train_on_batch` adds Python work to every call: its readings of the same
    steps varied by up to 1.5x, and one made a budget expect 30 % fewer steps than it trained;
    BENCHMARKS.md, "The precision probe".)"""
    dataset = functools.reduce(tf.data.Dataset.concatenate,
                               [tf.data.Dataset.from_tensors(batch) for batch in batches])
    iterator = iter(dataset.repeat())
    train_step = model.make_train_function()

    def one_pass() -> None:
        for _ in batches:
            logs = train_step(iterator)
        tf.nest.flatten(logs)[0].numpy()  # wait for the last step's result

    one_pass()
    start = time.perf_counter()
    one_pass()
    return (time.perf_counter() - start) / len(batches)


def describe(hparams: HParams) -> str:
    """'2+2 layers, d_model 256, dropout 0, peak learning rate 2.8e-03' (for logs)."""
    return (f"{hparams.num_layers}+{hparams.decoder_depth} layers, d_model {hparams.d_model}, "
            f"dropout {hparams.dropout_rate:g}, peak learning rate "
            f"{peak_learning_rate(hparams):.1e}")


@dataclasses.dataclass(frozen=True)
class Timing:
    """What the probe measured of one rung of MODEL_SIZES."""

    size: ModelSize
    hparams: HParams  # what would train: the profile, the rung's fields, then the overrides
    step_seconds: float
    expected_steps: int  # that the rest of the budget buys at that step time


def sized(hparams: HParams, fields: dict[str, Any], overrides: dict[str, Any]) -> HParams:
    """`hparams` with a size's or a plan's `fields`, the user's overrides winning."""
    return dataclasses.replace(dataclasses.replace(hparams, **fields), **overrides)


def choose_size(hparams: HParams, probe: Callable[[HParams], float],
                seconds_left: Callable[[], float], overrides: dict[str, Any],
                first_step_seconds: float | None = None) -> tuple[int, list[Timing]]:
    """The highest rung of MODEL_SIZES of which the rest of the budget buys at least its
    `min_steps` (each rung: `hparams`, its fields, then `overrides`), and the timings taken.
    Rungs are timed upward (`probe(hparams)`: seconds per step) while the last one timed could
    still afford the next: each rung is slower than the one below, so the next would afford
    fewer steps than it. `first_step_seconds`: the smallest rung's time, if already measured
    (the precision probe)."""
    chosen, timings = 0, []
    for index, size in enumerate(MODEL_SIZES):
        if timings and timings[-1].expected_steps < size.min_steps:
            break
        candidate = sized(hparams, size.fields, overrides)
        step_seconds = first_step_seconds if index == 0 and first_step_seconds else \
            probe(candidate)
        timings.append(Timing(size, candidate, step_seconds,
                              max(int(seconds_left() / step_seconds), 1)))
        if timings[-1].expected_steps >= size.min_steps:
            chosen = index
    return chosen, timings


def size_sentence(profile: HParams, chosen: int, timings: list[Timing],
                  overrides: dict[str, Any]) -> str:
    """The one log sentence that says which size trains and why, and what --hparam changed."""
    mine = next(t for t in timings if t.size is MODEL_SIZES[chosen])
    shape = describe(sized(profile, mine.size.fields, {}))
    sized_fields = {name for size in MODEL_SIZES for name in size.fields}
    overridden = {name: value for name, value in overrides.items() if name in sized_fields}
    sentence = (f"Model size: {mine.size.name} ({shape}). The "
                f"{profile.train_minutes:g}-minute budget buys about {mine.expected_steps:,} of "
                f"its steps here ({mine.step_seconds:.2f} s per step"
                f"{', timed with the --hparam changes' if overridden else ''})")
    if chosen + 1 < len(MODEL_SIZES):
        bigger = MODEL_SIZES[chosen + 1]
        timed = [t for t in timings if t.size is bigger]
        sentence += (f"; the next size, {bigger.name}, needs {bigger.min_steps:,} of its own "
                     + (f"and would train {timed[0].expected_steps:,} "
                        f"({timed[0].step_seconds:.2f} s per step)" if timed else
                        "and is slower per step, so it was not timed"))
    elif chosen:
        sentence += f", at least the {mine.size.min_steps:,} it needs"
    if overridden:
        sentence += ("; --hparam " + " ".join(f"{k}={v}" for k, v in sorted(overridden.items()))
                     + f" overrides it: training {describe(mine.hparams)}")
    return sentence + ' (docs/model-and-training.md, "A model sized for the device").'


def make_plan(hparams: HParams, probe: Callable[[HParams], float],
              strategy: tf.distribute.Strategy, seconds_left: Callable[[], float],
              overrides: dict[str, Any] | None = None, gpus: int | None = None,
              known_precision: str | None = None) -> Plan:
    """The precision (auto: measured where it may pay, see devices.resolve_precision) and, under
    a budget with adapt_recipe, the model size and recipe the budget buys on this device
    (`choose_size`). `hparams`: the profile's, for this budget or step count; the user's
    `overrides` win over them and over the size's fields. `probe(hparams)` gives seconds per
    step; `gpus`: the GPUs (default: those visible). `known_precision`: an auto precision
    already decided on this kind of machine (a warm start's base's, warm_start.known_precision),
    taken without a probe. Only the chief probes, and every worker takes the chief's choice."""
    profile, hparams = hparams, dataclasses.replace(hparams, **(overrides or {}))
    overrides = {k: v for k, v in (overrides or {}).items() if k != "precision"}
    chief = devices.writes_results(strategy)
    precision, chosen = hparams.precision, 0
    if chief:
        timed: dict[str, float] = {}

        def bfloat16_speedup() -> float:
            for name in ("float32", "mixed_bfloat16"):
                timed[name] = probe(dataclasses.replace(hparams, precision=name))
            return timed["float32"] / timed["mixed_bfloat16"]

        if known_precision and hparams.precision == "auto":
            precision, reason = known_precision, ("auto: the base model's, which trained on "
                                                  "this kind of machine, so no probe")
        else:
            precision, reason = devices.resolve_precision(hparams.precision, gpus=gpus,
                                                          bfloat16_speedup=bfloat16_speedup)
        _LOG.info("Training precision: %s (%s).", precision, reason)
        if hparams.train_minutes and hparams.adapt_recipe:
            profile = dataclasses.replace(profile, precision=precision)
            chosen, timings = choose_size(profile, probe, seconds_left, overrides,
                                          timed.get(precision))
            _LOG.info("%s", size_sentence(profile, chosen, timings, overrides))
    precision = PRECISIONS[int(devices.chief_value(strategy, PRECISIONS.index(precision)))]
    chosen = int(devices.chief_value(strategy, chosen))
    if not chief:
        _LOG.info("Training precision %s and model size %s: the chief's choice.", precision,
                  MODEL_SIZES[chosen].name)
    return Plan(precision=precision, recipe=dict(MODEL_SIZES[chosen].fields))


class TimeBudget:
    """Decides the final step: the one at which training has used `seconds`, at the step rate
    measured so far (after the first step, which traces), fixed just before the cooldown of that
    many steps, or the weight average over its last `average_fraction`, would begin. Time before
    `started` counts as `spent_before` (a resumed run). `observe` records the steps as they end
    (StopTraining calls it); `estimate` and `decide` only read what was observed."""

    def __init__(self, seconds: float, started: float, spent_before: float = 0.0,
                 cooldown_fraction: float = 0.0, average_fraction: float = 0.0,
                 tail_before: int = 0) -> None:
        self.seconds, self.started, self.spent_before = seconds, started, spent_before
        self.cooldown_fraction = cooldown_fraction
        self.tail_before = tail_before  # the steps behind that size the tail (cooldown_steps)
        # The steps whose learning rate or averaging depends on the final step.
        self._tail_fraction = max(cooldown_fraction, average_fraction)
        self._rate_start: tuple[int, float] | None = None

    def _tail(self, final: int) -> int:
        """The last steps of `final` whose learning rate or average depends on it."""
        return cooldown_steps(self._tail_fraction, final, self.tail_before)

    def elapsed(self, now: float) -> float:
        return self.spent_before + now - self.started

    def observe(self, step: int, now: float) -> None:
        """Records that `step` ended at `now`: the first observation starts the step rate."""
        if self._rate_start is None:
            self._rate_start = (step, now)

    def estimate(self, step: int, now: float) -> int | None:
        """The step at which the budget runs out at the rate observed so far (None: not
        measured yet, i.e. no observation before `step`)."""
        if self._rate_start is None:
            return None
        first_step, first_time = self._rate_start
        if step <= first_step:
            return None
        seconds_per_step = (now - first_time) / (step - first_step)
        return step + max(int((self.seconds - self.elapsed(now)) / seconds_per_step), 0)

    def decide(self, step: int, now: float, every: int = 1) -> int:
        """The final step once it must be fixed (the cooldown would begin before the next
        decision, `every` steps on, or the budget is used up), else 0. Never a step whose
        cooldown would already have begun."""
        estimate = self.estimate(step, now)
        used_up = self.elapsed(now) >= self.seconds
        if estimate is None and not used_up:
            return 0
        final = max(estimate or step, step)
        if not used_up and step + every < final - self._tail(final):
            return 0
        while final - self._tail(final) < step:
            final += 1  # the steps so far had no cooldown or average: it must start after this
        return final

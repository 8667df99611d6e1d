"""The training time budget: budget -> steps on a stand-in clock, the learning rates of a
budgeted run against a run told its step count, a resumed run's spent time, the recipe and the
precision the budget plans, and the flags that repeat a budgeted run."""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import types

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from trainer_module import budget, callbacks, devices, hparams as hparams_lib, optimization, task
from trainer_module.hparams import MODEL_SIZES, get_profile


def _stand_in_clock(monkeypatch, first_step: float, per_step: float) -> tuple:
    """A clock in `callbacks` that ticks `first_step` s on the first step (tracing) and
    `per_step` s on each later one, and the Keras callback that ticks it."""
    clock = types.SimpleNamespace(now=0.0, steps=0)
    monkeypatch.setattr(callbacks, "time", types.SimpleNamespace(time=lambda: clock.now))

    def tick(*_):
        clock.now += first_step if clock.steps == 0 else per_step
        clock.steps += 1

    # Keras calls callbacks in list order: the tick must come before StopTraining reads it.
    return clock, keras.callbacks.LambdaCallback(on_train_batch_end=tick)


def _train(tmp_path, time_budget: budget.TimeBudget, final_step: tf.Variable, tick,
           cooldown_fraction: float = 0.2, lr_seen: list | None = None,
           model: keras.Model | None = None) -> keras.Model:
    """A tiny model trained under `time_budget` as run_fn trains (checkpoints every 20 steps)."""
    schedule = optimization.TransformerSchedule(32, 20, 1.0, final_step, cooldown_fraction)
    if model is None:
        model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
        model.compile(optimizer=keras.optimizers.Adam(schedule), loss="mse")
    record = keras.callbacks.LambdaCallback(on_train_batch_begin=lambda *_: lr_seen.append(
        float(schedule(model.optimizer.iterations)))) if lr_seen is not None else None
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=model, optimizer=model.optimizer, final_step=final_step),
        str(tmp_path), None)
    data = tf.data.Dataset.from_tensors((np.ones([4, 2]), np.ones([4, 1]))).repeat()
    step = int(model.optimizer.iterations.numpy())
    model.fit(data, epochs=1000, initial_epoch=step // 20, steps_per_epoch=20, verbose=0,
              callbacks=[cb for cb in (record, tick) if cb] + [
                  callbacks.CheckpointAndHistory(manager, os.path.join(tmp_path, "history.json"),
                                                 started=time_budget.started),
                  callbacks.StopTraining(final_step, time_budget)])
    return model


def test_the_budget_decides_the_steps_that_fit_from_the_measured_rate(tmp_path, monkeypatch):
    """100 s: the first step (tracing) takes 10 s, each next one 1 s, so 91 steps fit. The
    budget fixes step 91 while the rate is still the peak one: the cooldown (the last 18
    steps, 20 %) begins after step 73."""
    clock, tick = _stand_in_clock(monkeypatch, first_step=10.0, per_step=1.0)
    final_step = tf.Variable(0, dtype=tf.int64)
    time_budget = budget.TimeBudget(100.0, started=0.0, cooldown_fraction=0.2)
    rates: list[float] = []
    model = _train(tmp_path, time_budget, final_step, tick, lr_seen=rates)
    assert int(final_step.numpy()) == int(model.optimizer.iterations.numpy()) == 91
    assert clock.now == pytest.approx(100.0)  # training took the budget, cooldown included
    # The rates of every step are those of a run told "91 steps" from the start.
    told = optimization.TransformerSchedule(32, 20, 1.0, 91, 0.2)
    np.testing.assert_allclose(rates, told(np.arange(91)).numpy(), rtol=1e-6)
    assert rates[-1] > 0.0 and told(91).numpy() == 0.0
    with open(os.path.join(tmp_path, "history.json")) as f:
        last = json.load(f)[-1]
    assert (last["step"], last["train_seconds"]) == (91, 100.0)


def test_a_slower_machine_gets_fewer_steps_and_a_complete_cooldown(tmp_path, monkeypatch):
    clock, tick = _stand_in_clock(monkeypatch, first_step=10.0, per_step=2.0)
    final_step = tf.Variable(0, dtype=tf.int64)
    model = _train(tmp_path, budget.TimeBudget(100.0, 0.0, cooldown_fraction=0.2), final_step,
                   tick)
    assert int(model.optimizer.iterations.numpy()) == int(final_step.numpy()) == 46
    assert clock.now == pytest.approx(100.0)


def test_a_resumed_run_counts_the_time_already_spent(tmp_path, monkeypatch):
    """Killed after its checkpoint at step 40 (49 s in), the run resumes: tracing again costs
    10 s of the same 100 s budget, so it ends at step 82, not at 91 nor at 40 + 91."""
    clock, tick = _stand_in_clock(monkeypatch, first_step=10.0, per_step=1.0)
    final_step = tf.Variable(0, dtype=tf.int64)
    killed = budget.TimeBudget(100.0, 0.0, cooldown_fraction=0.2)
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    model.compile(optimizer=keras.optimizers.Adam(
        optimization.TransformerSchedule(32, 20, 1.0, final_step, 0.2)), loss="mse")

    class Kill(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) >= 40:
                self.model.stop_training = True

    # Run until the checkpoint at step 40, as a Trainer killed just after it would have.
    history = os.path.join(tmp_path, "history.json")
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=model, optimizer=model.optimizer, final_step=final_step),
        str(tmp_path), None)
    data = tf.data.Dataset.from_tensors((np.ones([4, 2]), np.ones([4, 1]))).repeat()
    model.fit(data, epochs=1000, steps_per_epoch=20, verbose=0, callbacks=[
        tick, callbacks.CheckpointAndHistory(manager, history, started=0.0),
        callbacks.StopTraining(final_step, killed), Kill()])  # after the checkpoint
    assert int(model.optimizer.iterations.numpy()) == 40 and not int(final_step.numpy())
    assert callbacks.seconds_trained(history, 40) == pytest.approx(49.0)

    clock.now, clock.steps = 500.0, 0  # down for a while: that time does not count
    resumed_model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    resumed_step = tf.Variable(0, dtype=tf.int64)
    resumed_model.compile(optimizer=keras.optimizers.Adam(
        optimization.TransformerSchedule(32, 20, 1.0, resumed_step, 0.2)), loss="mse")
    tf.train.Checkpoint(model=resumed_model, optimizer=resumed_model.optimizer,
                        final_step=resumed_step).restore(manager.latest_checkpoint)
    assert int(resumed_model.optimizer.iterations.numpy()) == 40
    resumed = budget.TimeBudget(100.0, started=500.0,
                                spent_before=callbacks.seconds_trained(history, 40),
                                cooldown_fraction=0.2)
    _train(tmp_path, resumed, resumed_step, tick, model=resumed_model)
    assert int(resumed_model.optimizer.iterations.numpy()) == int(resumed_step.numpy()) == 82
    assert resumed.elapsed(clock.now) == pytest.approx(100.0)
    with open(history) as f:
        assert [(e["step"], e["train_seconds"]) for e in json.load(f)][-1] == (82, 100.0)


def test_the_exported_weights_average_the_last_fraction_of_the_budgeted_steps(monkeypatch):
    """100 s at 1 s per step after a 10 s first step: 91 steps. With average_fraction 0.3 the
    budget fixes step 91 before the last 27 steps begin, and the weights exported are the mean
    of those 27 steps' weights (a 0.2 cooldown alone would have been fixed later).

    Nothing random: zero initial weights and plain SGD at a small rate, so the weights are
    still moving at step 91 whatever ran before in this process (an Adam-trained model from a
    random start could converge first, and its average then equal its last step)."""
    clock, tick = _stand_in_clock(monkeypatch, first_step=10.0, per_step=1.0)
    time_budget = budget.TimeBudget(100.0, started=0.0, cooldown_fraction=0.2,
                                    average_fraction=0.3)
    final_step = tf.Variable(0, dtype=tf.int64)
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,), kernel_initializer="zeros",
                                                 bias_initializer="zeros")])
    model.compile(optimizer=keras.optimizers.SGD(0.001), loss="mse")
    average = callbacks.WeightAverage(model.trainable_variables, final_step, 0.3)
    seen, decided_at = {}, []

    def record(*_):
        step = int(model.optimizer.iterations.numpy())
        seen[step] = [w.numpy().copy() for w in model.trainable_variables]
        if int(final_step.numpy()) and not decided_at:
            decided_at.append(step)

    data = tf.data.Dataset.from_tensors((np.ones([4, 2]), np.full([4, 1], 3.0))).repeat()
    model.fit(data, epochs=1000, steps_per_epoch=20, verbose=0, callbacks=[
        tick, callbacks.StopTraining(final_step, time_budget), average,
        keras.callbacks.LambdaCallback(on_train_batch_end=record)])
    assert int(final_step.numpy()) == 91 and decided_at[0] <= 91 - 27
    assert average.apply() == 27
    for i, weight in enumerate(model.trainable_variables):
        np.testing.assert_allclose(weight.numpy(), np.mean([seen[s][i] for s in range(65, 92)],
                                                           axis=0), rtol=1e-5, atol=1e-6)
    # the average lags the last step by a good part of the averaged steps' movement: far above
    # float rounding (the weights moved by about 0.1 over those 27 steps)
    moved = np.abs(seen[91][0] - seen[65][0]).min()
    assert moved > 0.05
    assert np.abs(seen[91][0] - model.trainable_variables[0].numpy()).min() > moved / 4


def test_a_resumed_training_goes_on_with_its_checkpointed_average(tmp_path):
    """Killed at step 15 of 20 while averaging steps 11-20 and resumed from that checkpoint
    (checkpointed as run_fn does), the exported average is the uninterrupted run's."""
    def run(directory: str, stop_at: int | None) -> tuple[keras.Model, callbacks.WeightAverage]:
        final_step = tf.Variable(20, dtype=tf.int64)
        model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,),
                                                     kernel_initializer="ones")])
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        model.optimizer.build(model.trainable_variables)
        average = callbacks.WeightAverage(model.trainable_variables, final_step, 0.5)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer,
                                         final_step=final_step, weight_average=tf.train.Checkpoint(
                                             **average.variables))
        manager = tf.train.CheckpointManager(checkpoint, directory, None)
        if manager.latest_checkpoint:
            checkpoint.restore(manager.latest_checkpoint)
        step = int(model.optimizer.iterations.numpy())
        data = tf.data.Dataset.from_tensors((np.ones([4, 2]), np.full([4, 1], 3.0))).repeat()
        model.fit(data, epochs=(stop_at or 20) // 5, initial_epoch=step // 5, steps_per_epoch=5,
                  verbose=0, callbacks=[average, keras.callbacks.LambdaCallback(
                      on_epoch_end=lambda *_: manager.save())])
        return model, average

    whole, whole_average = run(str(tmp_path / "whole"), None)
    run(str(tmp_path / "resumed"), stop_at=15)
    resumed, resumed_average = run(str(tmp_path / "resumed"), None)
    assert int(resumed_average.count.numpy()) == 10
    assert whole_average.apply() == resumed_average.apply() == 10
    for a, b in zip(whole.trainable_variables, resumed.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


def test_profiles_average_the_last_quarter_unless_a_moving_average_is_asked_for():
    for name in ("cpu", "cpu_2h", "base", "smoke"):
        assert get_profile(name).averaged_fraction == 0.25
    assert dataclasses.replace(get_profile("cpu"), ema_momentum=0.99).averaged_fraction == 0.0


def test_the_decided_step_is_never_inside_a_cooldown_already_begun():
    """A budget already used up (a resumed run with nothing left) still ends with a whole
    cooldown: the final step is the first whose cooldown starts after the current one."""
    used_up = budget.TimeBudget(100.0, started=0.0, spent_before=150.0, cooldown_fraction=0.2)
    final = used_up.decide(400, now=1.0)
    assert final - optimization.cooldown_steps(0.2, final) >= 400
    assert final - 1 - optimization.cooldown_steps(0.2, final - 1) < 400
    # Without a cooldown it stops where it is.
    assert budget.TimeBudget(100.0, 0.0, spent_before=150.0).decide(400, now=1.0) == 400
    # Early on, nothing is decided yet: the rate is not known after one step.
    assert budget.TimeBudget(100.0, 0.0, cooldown_fraction=0.2).decide(1, now=10.0) == 0


def test_estimating_records_nothing_observing_does():
    """The rate starts at the first observed step, whoever asks for an estimate before."""
    time_budget = budget.TimeBudget(100.0, started=0.0)
    assert time_budget.estimate(1, now=10.0) is None  # nothing observed: not measured yet
    assert time_budget.estimate(5, now=14.0) is None  # ...and asking did not start the rate
    time_budget.observe(1, now=10.0)
    time_budget.observe(5, now=14.0)  # the rate starts at the first observation only
    assert time_budget.estimate(1, now=10.0) is None
    assert time_budget.estimate(5, now=14.0) == 5 + 86  # 1 s per step, 86 s left
    assert time_budget.estimate(5, now=14.0) == 5 + 86  # the same answer when asked again


def _stand_in_probe(small: float, deeper: float, base: float, probed: list):
    """Seconds per step by model size, as a device would measure them; records each probe."""
    def probe(h: hparams_lib.HParams) -> float:
        probed.append(h)
        return {(2, 256): small, (3, 256): deeper, (6, 512): base}[(h.num_layers, h.d_model)]
    return probe


DEEPER, BASE = (size.fields for size in MODEL_SIZES[1:])


@pytest.mark.parametrize("small, minutes, timed, chosen", [
    (0.79, 30, 1, {}),  # AVX2 EPYC: 2,278 steps, too few for deeper to be worth timing
    (0.275, 30, 1, {}),  # AVX-512 EPYC: 6,545 small steps, too few for deeper to be timed
    (0.2, 30, 2, {}),  # a faster CPU: deeper timed, 6,164 of its steps < its 7,000
    (0.275, 60, 2, DEEPER),  # the same in an hour: deeper 8,966 steps, < base's 9,000
    (0.275, 120, 3, DEEPER),  # cpu_2h there: deeper 17,933 steps, base timed: 2,618
])
def test_a_cpu_budget_buys_the_largest_size_it_affords(caplog, small, minutes, timed, chosen):
    """Sizes are timed upward (a deeper step is 1.46x a small one, a base step 10x on a CPU)
    while the last could afford the next; one log sentence says which size and why."""
    hparams = dataclasses.replace(get_profile("cpu"), train_minutes=minutes, precision="float32")
    probed: list[hparams_lib.HParams] = []
    with caplog.at_level(logging.INFO, logger="trainer_module.budget"):
        plan = budget.make_plan(hparams, _stand_in_probe(small, small * 1.46, small * 10, probed),
                                tf.distribute.get_strategy(), lambda: minutes * 60.0, gpus=0)
    assert len(probed) == timed and plan.recipe == chosen and plan.precision == "float32"
    [sentence] = [r.getMessage() for r in caplog.records if "Model size" in r.getMessage()]
    name, seconds = ("deeper", small * 1.46) if chosen else ("small", small)
    assert sentence.startswith(f"Model size: {name} (")
    assert f"about {int(minutes * 60 / seconds):,} of its steps" in sentence
    assert ("3+3 layers, d_model 256, dropout 0.1, peak learning rate 1.4e-03" if chosen else
            "2+2 layers, d_model 256, dropout 0, peak learning rate 2.8e-03") in sentence
    assert ("was not timed" in sentence) is (timed == (2 if chosen else 1))  # next size
    assert "overrides" not in sentence


def test_a_gpu_budget_trains_the_base_model_in_mixed_precision_with_xla(caplog):
    """On a stand-in GPU (sizes 0.02, 0.03 and 0.08 s per step) 30 minutes buy 22,500 base
    steps: the base model, mixed_float16 without a precision probe, and XLA kept."""
    probed: list[hparams_lib.HParams] = []
    hparams = dataclasses.replace(get_profile("cpu"), train_minutes=30.0)
    with caplog.at_level(logging.INFO, logger="trainer_module.budget"):
        plan = budget.make_plan(hparams, _stand_in_probe(0.02, 0.03, 0.08, probed),
                                tf.distribute.get_strategy(), lambda: 1800.0, gpus=1)
    assert [h.num_layers for h in probed] == [2, 3, 6]
    assert plan.precision == "mixed_float16" and plan.recipe == BASE
    trained = devices.fit_to_devices(plan.apply(hparams, {}), gpus=1)
    assert (trained.num_layers, trained.d_model, trained.batch_tokens, trained.use_xla) == (
        6, 512, 8192, True)
    assert "Training precision: mixed_float16 (auto: 1 GPU(s))" in caplog.text
    assert ("Model size: base (6+6 layers, d_model 512, dropout 0.3, peak learning rate "
            "1.0e-03). The 30-minute budget buys about 22,500 of its steps here (0.08 s per "
            "step), at least the 9,000 it needs") in caplog.text


def test_the_size_sentence_says_when_hparam_overrides_the_choice(caplog):
    """--hparam num_layers=3 on the AVX2 CPU: small is chosen and timed with 3 layers, and the
    sentence says what trains instead of the size's own 2+2."""
    probed: list[hparams_lib.HParams] = []
    overrides = {"num_layers": 3}
    hparams = dataclasses.replace(get_profile("cpu"), train_minutes=30.0, precision="float32")
    with caplog.at_level(logging.INFO, logger="trainer_module.budget"):
        plan = budget.make_plan(hparams, lambda h: probed.append(h) or 1.15,
                                tf.distribute.get_strategy(), lambda: 1800.0,
                                overrides=overrides, gpus=0)
    assert plan.recipe == {} and [h.num_layers for h in probed] == [3]
    assert plan.apply(get_profile("cpu"), overrides).num_layers == 3
    assert ("Model size: small (2+2 layers, d_model 256, dropout 0, peak learning rate 2.8e-03)."
            " The 30-minute budget buys about 1,565 of its steps here (1.15 s per step, timed "
            "with the --hparam changes)" in caplog.text)
    assert ("--hparam num_layers=3 overrides it: training 3+3 layers, d_model 256, dropout 0, "
            "peak learning rate 2.8e-03") in caplog.text


def test_explicit_overrides_win_over_the_recipe():
    plan = budget.Plan(precision="float32", recipe=dict(DEEPER))
    hparams = plan.apply(get_profile("cpu"), {"num_layers": 4, "precision": "auto"})
    assert (hparams.num_layers, hparams.dropout_rate, hparams.precision) == (4, 0.1, "float32")


def test_fixed_steps_plan_no_recipe_and_probe_nothing_without_bfloat16_units(monkeypatch):
    """--train-steps: the profile's recipe; on a CPU without bfloat16 units, float32 without
    a probe (emulated bfloat16 is several times slower)."""
    monkeypatch.setattr(devices, "cpu_has_bfloat16_units", lambda: False)  # an AVX2-only CPU
    hparams = dataclasses.replace(get_profile("cpu"), train_minutes=0.0, train_steps=3097)
    probe = lambda h: pytest.fail("probed")  # noqa: E731
    plan = budget.make_plan(hparams, probe, tf.distribute.get_strategy(), lambda: 0.0)
    assert plan == budget.Plan(precision="float32", recipe={})


@pytest.mark.parametrize("speedup, chosen", [(1.35, "mixed_bfloat16"), (0.25, "float32"),
                                             (1.02, "float32")])
def test_the_precision_probe_decides_on_a_cpu_with_bfloat16_units(speedup, chosen):
    precision, reason = devices.resolve_precision("auto", gpus=0, cpu_bfloat16=True,
                                                  bfloat16_speedup=lambda: speedup)
    assert precision == chosen
    assert f"{speedup:.2f}x" in reason and "probe" in reason


def test_the_plan_probes_both_precisions_and_logs_its_choice(monkeypatch, caplog):
    """Where the CPU has bfloat16 units, `auto` times float32 and mixed_bfloat16 on the real
    model shape and takes the faster; the size choice reuses that probe's step time and times
    the deeper model in the chosen precision."""
    monkeypatch.setattr(devices, "cpu_has_bfloat16_units", lambda: True)  # this CPU's flags
    step_seconds = {("float32", 2): 0.289, ("mixed_bfloat16", 2): 0.215,  # avx512_bf16
                    ("mixed_bfloat16", 3): 0.314}
    probed = []
    hparams = dataclasses.replace(get_profile("cpu"), train_minutes=40.0)
    with caplog.at_level(logging.INFO, logger="trainer_module.budget"):
        plan = budget.make_plan(
            hparams, lambda h: probed.append(h.precision) or step_seconds[h.precision,
                                                                           h.num_layers],
            tf.distribute.get_strategy(), lambda: 2400.0, gpus=0)
    assert probed == ["float32", "mixed_bfloat16", "mixed_bfloat16"]
    assert plan.precision == "mixed_bfloat16" and plan.recipe == DEEPER
    assert "Training precision: mixed_bfloat16 (auto: the CPU has bfloat16 units" in caplog.text
    assert "1.34x faster" in caplog.text
    assert "about 7,643 of its steps here (0.31 s per step)" in caplog.text  # 2400 / 0.314


def test_the_probe_times_training_steps_as_fit_runs_them():
    """One compiled train function over an iterator, as `fit` runs it: batches of different
    lengths share one trace (train_on_batch would trace per shape and add Python per step)."""
    model = keras.Sequential([keras.layers.Embedding(16, 8), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    model.build([None, None])
    model.optimizer.build(model.trainable_variables)  # as build_keras_model: no variable to
    # create inside the traced step (which would trace it twice)
    batches = [(np.ones([8, length]), np.ones([8, length, 1])) for length in (3, 5, 9)]
    seconds = budget.seconds_per_step(model, batches)
    assert 0.0 < seconds < 5.0
    assert int(model.optimizer.iterations.numpy()) == 6  # a traced pass, then a timed one
    assert model.train_function.experimental_get_tracing_count() == 1


def test_the_plan_is_kept_beside_the_checkpoints(tmp_path):
    plan = budget.Plan(precision="mixed_bfloat16", recipe=dict(DEEPER))
    assert budget.Plan.load(str(tmp_path)) is None
    plan.save(str(tmp_path))
    assert budget.Plan.load(str(tmp_path)) == plan


def test_the_repeat_flags_reproduce_the_budgeted_run():
    """The flags printed at the end of a budgeted run give `nmt run` the same steps, recipe and
    precision, with no budget."""
    from cli import main as cli

    plan = budget.Plan(precision="float32", recipe=dict(DEEPER))
    trained = dataclasses.replace(plan.apply(get_profile("cpu"), {"ema_momentum": 0.99}),
                                  train_steps=4712)
    flags = task.repeat_flags(trained, plan, {"ema_momentum": 0.99})
    args = cli.build_parser().parse_args(["run", *flags.split()])
    assert (args.train_steps, args.train_minutes, args.precision) == (4712, None, "float32")
    assert dict(args.hparams) == {**DEEPER, "ema_momentum": 0.99}

"""Training-loop settings: precision choice, exact step counts, checkpoints, progress ETA,
the order of training batches and the pairs joined into one example."""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from scipy import stats

from helpers import REPO
from trainer_module import callbacks, devices, input_pipeline, optimization, task
from trainer_module.hparams import PRECISIONS, HParams, get_profile
from trainer_module.settings import TrainerSettings


@pytest.mark.parametrize("precision, gpus, cpu_bfloat16, chosen", [
    ("auto", 1, False, "mixed_float16"),
    ("auto", 0, True, "mixed_bfloat16"),
    ("auto", 0, False, "float32"),
    ("float32", 4, True, "float32"),
    ("mixed_bfloat16", 0, False, "mixed_bfloat16"),
])
def test_precision_resolution(precision, gpus, cpu_bfloat16, chosen):
    assert devices.resolve_precision(precision, gpus, cpu_bfloat16)[0] == chosen


@pytest.mark.parametrize("precision, cpu_bfloat16, chosen", [
    ("auto", True, "bfloat16"), ("auto", False, "float32"),
    ("float32", True, "float32"), ("bfloat16", False, "bfloat16")])
def test_decode_precision_resolution(precision, cpu_bfloat16, chosen):
    faster = lambda: 2.0  # noqa: E731  (a probe that finds bfloat16 twice as fast)
    assert devices.resolve_decode_precision(precision, faster, cpu_bfloat16)[0] == chosen


@pytest.mark.parametrize("cpu_bfloat16, speedup, chosen, probed", [
    (True, 1.4, "bfloat16", True), (True, 1.01, "float32", True),
    (False, 1.4, "float32", False)])
def test_auto_decode_precision_takes_bfloat16_only_where_a_probe_says_it_pays(
        cpu_bfloat16, speedup, chosen, probed):
    """As the training precision: bfloat16 units are not enough (a bfloat16 Xeon without AMX
    trained 0.62x as fast with them), and without units no probe runs."""
    calls: list[float] = []

    def probe() -> float:
        calls.append(speedup)
        return speedup

    precision, why = devices.resolve_decode_precision("auto", probe, cpu_bfloat16)
    assert precision == chosen and bool(calls) is probed
    assert (f"{speedup:.2f}x" in why) is probed
    assert ("decode_precision=float32" in why) is (chosen == "bfloat16")


def test_float16_on_a_cpu_is_allowed_with_a_reason():
    precision, reason = devices.resolve_precision("mixed_float16", 0, True)
    assert precision == "mixed_float16" and "emulated" in reason


@pytest.mark.parametrize("flags, expected", [
    ("fpu sse avx512f amx_bf16 amx_tile", True),
    ("fpu avx512f avx512_bf16", True),
    ("fpu avx2 avx512f amx_tile", False),
])
def test_cpu_bfloat16_units_are_read_from_cpuinfo(tmp_path, flags, expected):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    assert devices.cpu_has_bfloat16_units(str(cpuinfo)) is expected
    assert devices.cpu_has_bfloat16_units(str(tmp_path / "missing")) is False


def test_fit_to_devices_keeps_xla_for_gpus_only(caplog):
    with caplog.at_level(logging.INFO, logger="trainer_module.devices"):
        hparams = devices.fit_to_devices(get_profile("base"))
    assert not hparams.use_xla  # no GPU here
    assert "No GPU: training without XLA" in caplog.text


@pytest.mark.parametrize("entry, setting, enabled", [
    ("cli.main", None, True), ("cli.main", "0", False), ("benchmarks.step_time", None, True)])
def test_nmt_and_its_benchmarks_run_tensorflow_with_onednn_kernels_unless_told_not_to(
        entry, setting, enabled):
    """oneDNN is what `nmt` trains and decodes with on this AVX2-only CPU, where TF leaves it
    off; the benchmarks, which time it, must start TensorFlow the same way."""
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    if setting is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = setting
    out = subprocess.run(
        [sys.executable, "-c", f"import {entry}; from trainer_module import devices; "
         "print(devices.onednn_enabled())"],
        cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(enabled)


def test_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="precision must be one of float32, mixed_float16"):
        HParams(precision="fp8")


def test_only_float16_scales_the_loss():
    hparams = get_profile("smoke")
    for precision, scaled in (("mixed_float16", True), ("mixed_bfloat16", False),
                              ("float32", False)):
        optimizer = optimization.make_optimizer(dataclasses.replace(hparams, precision=precision))
        assert isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer) is scaled


def test_training_stops_at_exactly_the_requested_steps(tmp_path):
    """700 steps with checkpoints every 500 used to train 1,000 (epochs rounded up)."""
    train_steps, checkpoint_every = 30, 20
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    model.compile(optimizer="sgd", loss="mse")
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=model, optimizer=model.optimizer), str(tmp_path), 5)
    history = os.path.join(tmp_path, "history.json")
    data = tf.data.Dataset.from_tensors((np.ones([4, 2]), np.ones([4, 1]))).repeat()
    model.fit(data, epochs=-(-train_steps // checkpoint_every), steps_per_epoch=checkpoint_every,
              verbose=0, callbacks=[callbacks.CheckpointAndHistory(manager, history),
                                    callbacks.StopTraining(tf.Variable(train_steps))])
    assert int(model.optimizer.iterations.numpy()) == train_steps
    with open(history) as f:
        assert [entry["step"] for entry in json.load(f)] == [20, 30]
    assert [os.path.basename(p) for p in manager.checkpoints] == ["ckpt-20", "ckpt-30"]


def test_history_counts_training_seconds_across_a_restart(tmp_path, monkeypatch):
    """Each checkpoint records the training seconds so far, and a resumed run counts on from
    the checkpoint it resumed, leaving out the time it was down: the time axis of
    benchmarks/time_curve.py. The clock ticks 1 s per step."""
    clock = types.SimpleNamespace(now=1000.0)
    monkeypatch.setattr(callbacks, "time", types.SimpleNamespace(time=lambda: clock.now))
    tick = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda *_: setattr(clock, "now", clock.now + 1.0))
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    model.compile(optimizer="sgd", loss="mse")
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(tmp_path), None)
    history = os.path.join(tmp_path, "history.json")
    data = tf.data.Dataset.from_tensors((np.ones([4, 2]), np.ones([4, 1]))).repeat()
    # 20 steps, down for 500 s, then 10 more with a new callback, as a restarted Trainer has.
    for initial_epoch, epochs in ((0, 2), (2, 3)):
        model.fit(data, epochs=epochs, initial_epoch=initial_epoch, steps_per_epoch=10, verbose=0,
                  callbacks=[callbacks.CheckpointAndHistory(manager, history), tick])
        clock.now += 500.0
    with open(history) as f:
        assert [(e["step"], e["train_seconds"]) for e in json.load(f)] == [
            (10, 10.0), (20, 20.0), (30, 30.0)]
    assert len(manager.checkpoints) == 3  # max_to_keep None (keep_checkpoints=0): all kept


def test_a_rerun_resumes_the_same_trainings_checkpoints_and_new_code_starts_anew():
    """The checkpoint directory (and the budget's plan kept in it) belongs to one training:
    same data, hparams, base model and Trainer code. A code fix must not resume the old
    training."""
    fn_args = types.SimpleNamespace(model_run_dir="/run/1", train_files=["/t/b", "/t/a"],
                                    transform_output="/transform/7", base_model=None)
    hparams = get_profile("smoke")
    settings = TrainerSettings(profile="smoke", checkpoint_root="/root/checkpoints",
                               code_version="c0de")
    first = task.checkpoint_dir_for(fn_args, settings, hparams)
    assert first.startswith("/root/checkpoints/")
    rerun = types.SimpleNamespace(**{**vars(fn_args), "model_run_dir": "/run/2",
                                     "train_files": ["/t/a", "/t/b"]})
    assert task.checkpoint_dir_for(rerun, settings, hparams) == first
    assert task.checkpoint_dir_for(
        fn_args, dataclasses.replace(settings, code_version="f1x"), hparams) != first
    assert task.checkpoint_dir_for(
        fn_args, settings, dataclasses.replace(hparams, dropout_rate=0.2)) != first
    # a warm start from a served model is another training than a fresh one
    warm = types.SimpleNamespace(**{**vars(fn_args), "base_model": "/served/1/Format-Serving"})
    assert task.checkpoint_dir_for(warm, settings, hparams) != first


def test_non_chief_checkpoints_are_written_then_deleted(tmp_path):
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    model.compile(optimizer="sgd", loss="mse")
    temp = os.path.join(tmp_path, ".worker-1-temp")
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), temp, 1)
    history = os.path.join(tmp_path, "history.json")
    model.fit(np.ones([4, 2]), np.ones([4, 1]), epochs=2, verbose=0,
              callbacks=[callbacks.CheckpointAndHistory(manager, history, keep=False)])
    assert os.listdir(tmp_path) == []  # nothing kept, no history


def test_progress_eta_leaves_out_the_slow_first_step(monkeypatch, caplog):
    """The first step (tracing, filling the shuffle buffer) took 100 s, the next ones 1 s."""
    clock = iter([0.0, 100.0] + [100.0 + i for i in range(1, 11)])
    monkeypatch.setattr(callbacks, "time", types.SimpleNamespace(time=lambda: next(clock)))
    iterations = tf.Variable(0, dtype=tf.int64)
    logger = callbacks.ProgressLogger(100, every_s=5.0)
    logger.set_model(types.SimpleNamespace(optimizer=types.SimpleNamespace(
        iterations=iterations)))
    with caplog.at_level(logging.INFO, logger="trainer_module.callbacks"):
        logger.on_train_begin()
        logger.on_epoch_begin(0)
        for step in range(1, 12):
            iterations.assign(step)
            logger.on_train_batch_end(step - 1, {"loss": 1.0})
    assert "Training step 1/" not in caplog.text  # no ETA from the first step alone
    assert "Training step 2/100 (2%)" in caplog.text
    assert "ETA 1m38s" in caplog.text  # 98 steps left at 1 s each, not at ~50 s each


def test_the_exported_weights_are_the_moving_average():
    """With ema_momentum the model that gets exported holds the average of the weights over
    the steps (Keras' optimizer EMA), not the last step's weights."""
    from trainer_module import export
    from trainer_module.task import build_keras_model

    momentum = 0.6
    hparams = dataclasses.replace(get_profile("smoke"), dropout_rate=0.0, ema_momentum=momentum,
                                  warmup_steps=2).with_vocab_sizes(30, 40)
    tf.random.set_seed(3)
    model = build_keras_model(hparams)
    rng = np.random.default_rng(3)
    source, target = rng.integers(4, 30, [8, 6]), rng.integers(4, 40, [8, 7])
    data = tf.data.Dataset.from_tensors(((source, target), target)).repeat()
    expected = [v.numpy() for v in model.trainable_variables]
    raw = []

    def average(batch, logs) -> None:
        raw[:] = [v.numpy() for v in model.trainable_variables]
        expected[:] = [momentum * e + (1 - momentum) * r for e, r in zip(expected, raw)]

    model.fit(data, steps_per_epoch=6, verbose=0,
              callbacks=[keras.callbacks.LambdaCallback(on_train_batch_end=average)])
    exported = export.float32_copy(model).trainable_variables
    for got, want in zip(exported, expected):
        np.testing.assert_allclose(got.numpy(), want, atol=1e-6)
    assert not all(np.allclose(g.numpy(), r) for g, r in zip(exported, raw))


def test_hparam_overrides_are_typed_and_checked():
    from trainer_module.hparams import parse_override, with_overrides

    assert parse_override("shuffle_pairs=200000") == ("shuffle_pairs", 200000)
    assert parse_override(" use_xla = false ") == ("use_xla", False)
    changed = with_overrides(get_profile("cpu"), {"ema_momentum": "0.995", "precision": "auto"})
    assert changed.ema_momentum == 0.995 and changed.precision == "auto"
    with pytest.raises(ValueError, match="NAME one of num_layers, .*; got 'source_vocab_size=9'"):
        parse_override("source_vocab_size=9")  # derived from the vocabularies, not settable
    with pytest.raises(ValueError, match="--hparam d_model takes an integer, got '2.5'"):
        parse_override("d_model=2.5")
    with pytest.raises(ValueError, match="ema_momentum must be in"):
        with_overrides(get_profile("cpu"), {"ema_momentum": 1.5})


# fra.txt's train split as ExampleGen writes it: ~133,000 (English, reference) pairs, in the
# file's order, which is sorted by length.
# A third of fra.txt's ~133,000 training pairs: what matters is the buffer's share of the
# split, and the whole split took 36 s to shuffle and batch here.
TRAIN_PAIRS = 133_000 // 3


def _epoch_of_batch_lengths(hparams: HParams) -> list[int]:
    """Padded length of each training batch, in order, over one epoch's worth of pairs of a
    length-sorted split."""
    lengths = tf.constant(np.sort(np.random.default_rng(0).integers(2, 30, TRAIN_PAIRS)),
                          tf.int32)
    pairs = tf.data.Dataset.range(TRAIN_PAIRS).map(
        lambda i: (tf.fill([lengths[i]], 5), tf.fill([lengths[i]], 6)))
    batches = input_pipeline.batch_pairs(input_pipeline.training_order(pairs, hparams), hparams)
    out, seen = [], 0
    for _, labels in batches:
        out.append(int(labels.shape[1]))
        seen += int(labels.shape[0])
        if seen >= TRAIN_PAIRS:
            return out


def test_a_shuffle_buffer_covering_the_split_removes_the_length_trend():
    """shuffle_pairs >= the split: batches do not trend in length over an epoch. With a
    buffer of a third of the split (the `cpu` profile's 50,000 of fra.txt's ~133,000 pairs)
    each epoch runs from short to long sentences, and the check sees it."""
    cpu = get_profile("cpu")
    full = _epoch_of_batch_lengths(dataclasses.replace(cpu, shuffle_pairs=TRAIN_PAIRS))
    assert abs(stats.spearmanr(range(len(full)), full).statistic) < 0.1
    partial = _epoch_of_batch_lengths(dataclasses.replace(cpu, shuffle_pairs=TRAIN_PAIRS // 3))
    assert stats.spearmanr(range(len(partial)), partial).statistic > 0.5


def _joined(fraction: float, lengths: list[int], max_length: int = 8, window: int = 2
            ) -> list[tuple[list, list]]:
    """`join_pairs` over pairs of these source lengths (target: the source + 100, then 99)."""
    sources = [list(range(1, n + 1)) for n in lengths]
    pairs = tf.data.Dataset.from_generator(
        lambda: ((s, [100 + x for x in s] + [99]) for s in sources),
        output_signature=(tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int32)))
    hparams = HParams(joined_pairs=fraction, max_source_length=max_length,
                      max_target_length=max_length + 1, max_pairs_joined=window)
    return [(s.tolist(), t.tolist())
            for s, t in input_pipeline.join_pairs(pairs, hparams, seed=0).as_numpy_iterator()]


def test_joined_pairs_put_the_second_pair_after_the_first_on_both_sides():
    lengths = [3, 2, 5, 1, 4, 2, 3]
    alone = _joined(0.0, lengths)
    assert [len(s) for s, _ in alone] == lengths
    every = _joined(1.0, lengths)
    # Windows of two: (3, 2), (5, 1) and (4, 2) fit 8 source tokens and 9 target tokens
    # joined; the last pair has no partner.
    assert every == [(alone[0][0] + alone[1][0], alone[0][1] + alone[1][1]),
                     (alone[2][0] + alone[3][0], alone[2][1] + alone[3][1]),
                     (alone[4][0] + alone[5][0], alone[4][1] + alone[5][1]),
                     alone[6]]


def test_a_join_too_long_for_the_model_is_not_made_and_no_pair_is_lost():
    alone = _joined(0.0, [6, 5, 1, 2])
    assert _joined(1.0, [6, 5, 1, 2]) == [
        alone[0], alone[1], (alone[2][0] + alone[3][0], alone[2][1] + alone[3][1])]


def test_about_the_asked_fraction_of_pairs_is_joined():
    windows = 2_000
    joined = _joined(0.25, [1] * 2 * windows)
    made = sum(len(s) == 2 for s, _ in joined)
    assert sum(len(s) for s, _ in joined) == 2 * windows  # no pair lost
    assert abs(made / windows - 0.25) < 0.04


def test_windows_of_more_pairs_join_two_to_all_of_them_as_far_as_they_fit():
    lengths = [1] * 4_000
    joined = _joined(1.0, lengths, max_length=100, window=4)
    assert sum(len(s) for s, _ in joined) == len(lengths)  # no pair lost
    sizes = [len(s) for s, _ in joined]
    # Every window of 4 gives one example of 2, 3 or 4 pairs (drawn evenly), then the rest.
    assert set(sizes) == {1, 2, 3, 4}
    joins = [n for n in sizes if n > 1]
    assert len(joins) == len(lengths) // 4
    for n in (2, 3, 4):
        assert abs(joins.count(n) / len(joins) - 1 / 3) < 0.05
    # A window whose first pairs pass the limits together joins only those that fit: 3 + 4
    # source tokens fit 8, 3 + 4 + 5 do not; a first pair that fits with none stays alone.
    alone = _joined(0.0, [3, 4, 5, 1])
    assert _joined(1.0, [3, 4, 5, 1], window=4) == [
        (alone[0][0] + alone[1][0], alone[0][1] + alone[1][1]), alone[2], alone[3]]
    assert _joined(1.0, [6, 5, 1, 2], window=4) == _joined(0.0, [6, 5, 1, 2])
    # The targets' limit too: 4 + 4 source tokens fit 8, their 5 + 5 target tokens not 9.
    assert _joined(1.0, [4, 4, 1], window=4) == _joined(0.0, [4, 4, 1])
    # In about the asked fraction of the windows.
    sizes = [len(s) for s, _ in _joined(0.25, lengths, max_length=100, window=4)]
    assert abs(sum(n > 1 for n in sizes) / (len(lengths) // 4) - 0.25) < 0.05


def test_max_pairs_joined_below_two_is_refused():
    with pytest.raises(ValueError, match="max_pairs_joined must be >= 2, got 1"):
        HParams(max_pairs_joined=1)

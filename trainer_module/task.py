"""TFX Trainer entry point: `run_fn` trains the Transformer and exports the translator.

Referenced by module path (`trainer_module.task`), so the same code runs locally and in the
Kubeflow container. custom_config: a `settings.TrainerSettings` (profile, time budget,
precision, hyperparameter overrides, ...). TrainArgs.num_steps > 0 trains exactly that many
steps instead of the profile's time budget.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import time
from typing import Any

import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras
from tfx.components.trainer.fn_args_utils import FnArgs
from tfx.utils import io_utils

from trainer_module import (budget, callbacks, devices, export, hparams as hparams_lib,
                            warm_start)
from trainer_module.input_pipeline import make_dataset, validation_dataset
from trainer_module.model import Transformer
from trainer_module.settings import (HISTORY_FILE, HPARAMS_FILE, TRAINING_STATE,
                                     TrainerSettings)
from trainer_module.optimization import (GlobalTokenMeanLoss, MaskedAccuracy, Perplexity,
                                         make_optimizer, rewarm_steps)
from transform_module.preprocessing import (RESERVED_TOKENS, SOURCE_VOCAB, TARGET_VOCAB,
                                            shares_vocabulary)

_LOG = logging.getLogger(__name__)
_UNBOUNDED_STEPS = 10**9
STATE_DIR = "training_state"  # in the checkpoint directory: callbacks.TrainingState's


def _hparams(settings: TrainerSettings, train_steps: int,
             tf_transform_output: tft.TFTransformOutput,
             overridden: bool = True) -> hparams_lib.HParams:
    """The settings' hparams (exactly `train_steps`, or 0: the time budget; with the
    overrides, or the profile's own) with the real vocabulary sizes."""
    return with_vocabularies(settings.hparams_for(train_steps, overridden), tf_transform_output)


def with_vocabularies(hparams: hparams_lib.HParams,
                      tf_transform_output: tft.TFTransformOutput) -> hparams_lib.HParams:
    """`hparams` sized to a Transform output's vocabularies (and whether they are one)."""
    return hparams.with_vocab_sizes(*vocab_sizes(tf_transform_output),
                                    shared=shares_vocabulary(tf_transform_output))


def vocab_sizes(tf_transform_output: tft.TFTransformOutput) -> tuple[int, int]:
    """(source, target) vocabulary sizes: Transform's vocab files plus the reserved tokens."""
    return tuple(tf_transform_output.vocabulary_size_by_name(name) + len(RESERVED_TOKENS)
                 for name in (SOURCE_VOCAB, TARGET_VOCAB))


def checkpoint_dir_for(fn_args: FnArgs, settings: TrainerSettings,
                    hparams: hparams_lib.HParams) -> str:
    """Stable across re-runs of the same training (same data, hparams, base model and Trainer
    code), so a killed Trainer resumes where it stopped instead of starting over; new code
    trains anew (the time budget's plan is kept here too, so it would otherwise outlive a
    fix)."""
    root = settings.checkpoint_root or os.path.join(fn_args.model_run_dir, "checkpoints")
    key = json.dumps([dataclasses.asdict(hparams), sorted(fn_args.train_files),
                      fn_args.transform_output, settings.code_version,
                      *([fn_args.base_model] if fn_args.base_model else [])], sort_keys=True)
    return os.path.join(root, hashlib.sha256(key.encode()).hexdigest()[:16])


def build_keras_model(hparams: hparams_lib.HParams, final_step: tf.Variable | None = None,
                      steps_before: int = 0, moments: bool = False) -> Transformer:
    """The compiled model, its and the optimizer's variables created (so a checkpoint restores
    into them at once, even when no training step follows). The learning-rate schedule ends at
    `final_step` (default: hparams.train_steps), continuing `steps_before` steps of a base
    model's schedule (with its optimizer's `moments`: optimization.learning_rate_schedule)."""
    model = Transformer(hparams)
    model((tf.ones([1, 1], tf.int32), tf.ones([1, 1], tf.int32)))
    model.compile(
        optimizer=make_optimizer(hparams, final_step, steps_before, moments),
        loss=GlobalTokenMeanLoss(hparams.label_smoothing),
        metrics=[MaskedAccuracy(), Perplexity(), callbacks.TargetTokens()],
        jit_compile=hparams.use_xla)
    model.optimizer.build(model.trainable_variables)  # slots (and the average) restore at once
    return model


def exportable_model(hparams: hparams_lib.HParams, tf_transform_output: tft.TFTransformOutput
                     ) -> tuple[hparams_lib.HParams, Transformer]:
    """The float32 model the Trainer exports, for `hparams` sized to a Transform output, and
    those sized hparams: for exporting (or timing the export of) weights trained elsewhere."""
    sized = with_vocabularies(dataclasses.replace(hparams, precision="float32"),
                              tf_transform_output)
    return sized, export.float32_copy(build_keras_model(sized))


def _train_data(fn_args: FnArgs, tf_transform_output: tft.TFTransformOutput,
                hparams: hparams_lib.HParams) -> keras.utils.experimental.DatasetCreator:
    """One dataset per worker (its own shard of the examples), whose batches of batch_tokens
    go one per replica: N replicas train N x batch_tokens tokens per step."""

    def per_worker(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return make_dataset(fn_args.train_files, tf_transform_output, hparams, training=True,
                            shard=(context.num_input_pipelines, context.input_pipeline_id))

    return keras.utils.experimental.DatasetCreator(per_worker)


def _probe(fn_args: FnArgs, tf_transform_output: tft.TFTransformOutput,
           hparams: hparams_lib.HParams) -> float:
    """Seconds per training step of a throwaway model of `hparams` on real batches."""
    batches = list(make_dataset(fn_args.train_files, tf_transform_output, hparams,
                                training=True).take(budget.PROBE_STEPS))
    return budget.seconds_per_step(build_keras_model(hparams), batches)


def _read(path: str) -> bytes:
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def _base(model_dir: str, tf_transform_output: tft.TFTransformOutput,
          transform: dict[str, Any]) -> warm_start.TrainingRecord:
    """The base model's record, once its tokenization is known to be this run's and its
    vocabulary this Transform's (the same files, so that every id means the same piece:
    Transform keeps it, see served_vocabulary)."""
    base = warm_start.base_record(model_dir)
    changed = warm_start.tokenization_changes(base.transform, transform)
    if changed:
        raise warm_start.WarmStartError(
            "Cannot continue the served model: this run's " + ", ".join(changed)
            + " would give other pieces; compile or run with the base's settings.")
    for name in (SOURCE_VOCAB, TARGET_VOCAB):
        mine = tf_transform_output.vocabulary_file_by_name(name)
        theirs = os.path.join(model_dir, "assets", os.path.basename(mine))
        if not tf.io.gfile.exists(theirs) or _read(theirs) != _read(mine):
            raise warm_start.WarmStartError(
                f"Transform's vocabulary {os.path.basename(mine)} is not the served model's "
                f"({theirs}), so its ids would mean other pieces: that version was pushed "
                "after Transform took the newest one's (a run pushed meanwhile?); run again, "
                "or without --warm-start.")
    return base


def run_fn(fn_args: FnArgs) -> None:
    """Trains with checkpoints every `checkpoint_every` steps, then exports for serving.

    Under MultiWorkerMirroredStrategy every worker runs this; only the chief keeps
    checkpoints and writes the history, hparams and the SavedModel (see `devices`).
    """
    started = time.time()  # the time budget counts from here
    settings = TrainerSettings.from_config(fn_args.custom_config)
    overrides = settings.overrides()  # they win over the time budget's plan
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
    hparams = _hparams(settings, fn_args.train_steps or 0, tf_transform_output)
    profile = _hparams(settings, fn_args.train_steps or 0, tf_transform_output, overridden=False)
    # A warm start's base: none when nothing was served yet (ServedModel left it empty).
    served = fn_args.base_model and tf.io.gfile.exists(
        os.path.join(fn_args.base_model, "saved_model.pb"))
    base = _base(fn_args.base_model, tf_transform_output, settings.transform) if served \
        else None
    if base:
        hparams = warm_start.continued_hparams(base, hparams, overrides)
        profile = warm_start.continued_hparams(base, profile, {})
    steps_before = base.total_train_steps if base else 0
    # The base's training state, if it has one and the recipe goes on from it; otherwise the
    # served weights, whose schedule continues from all the steps behind them, or starts anew
    # (continued_schedule "restart").
    continued = bool(base) and hparams.continued_schedule == "continue"
    from_state = continued and hparams.continued_from == "state" and \
        warm_start.has_training_state(base, fn_args.base_model)
    schedule_before = 0 if not continued else \
        base.schedule_steps if from_state else steps_before
    strategy = devices.choose_strategy()
    chief = devices.writes_results(strategy)
    # Keyed before the plan, so that a re-run finds it and the plan kept there.
    checkpoint_dir = checkpoint_dir_for(fn_args, settings, hparams)
    history_path = os.path.join(checkpoint_dir, HISTORY_FILE)
    machine = devices.machine_kind()  # decides `auto` with the base's record, and is recorded
    plan = budget.Plan.load(checkpoint_dir)
    if plan is None:
        plan = budget.make_plan(
            profile, functools.partial(_probe, fn_args, tf_transform_output), strategy,
            seconds_left=lambda: hparams.train_minutes * 60 - (time.time() - started),
            overrides=overrides, known_precision=warm_start.known_precision(
                base, machine) if base else None)
        if chief:
            plan.save(checkpoint_dir)
    hparams = devices.fit_to_devices(plan.apply(hparams, overrides))
    _LOG.info("Training the Transformer: %s", json.dumps(dataclasses.asdict(hparams)))
    with strategy.scope():
        # The last step: known, or 0 until the time budget decides it (checkpointed with it).
        final_step = tf.Variable(0 if hparams.train_minutes else hparams.train_steps,
                                 trainable=False, dtype=tf.int64, name="final_step")
        model = build_keras_model(hparams, final_step, schedule_before, moments=from_state)
        # The uniform average of the last weights, if asked for (checkpointed with them).
        average = callbacks.WeightAverage(model.trainable_variables, final_step,
                                          hparams.averaged_fraction,
                                          hparams.tail_steps_before(schedule_before)) \
            if hparams.averaged_fraction else None
        checkpoint = tf.train.Checkpoint(
            model=model, optimizer=model.optimizer, final_step=final_step,
            **({"weight_average": tf.train.Checkpoint(**average.variables)} if average else {}))
        latest = tf.train.latest_checkpoint(checkpoint_dir)
        if latest:
            checkpoint.restore(latest)
            step = int(model.optimizer.iterations.numpy())
            _LOG.info("Resuming from %s (step %d of %s).", latest, step,
                      f"{int(final_step.numpy()):,}" if int(final_step.numpy()) else
                      f"a {hparams.train_minutes:g}-minute budget, "
                      f"{callbacks.seconds_trained(history_path, step):.1f} s of it spent")
        elif from_state:
            warm_start.restore_training_state(model, fn_args.base_model)
            _LOG.info("Starting from the base model's training state before its cooldown, its "
                      "weights and optimizer (%s steps of the learning-rate schedule behind "
                      "it): the schedule goes on from there.", f"{schedule_before:,}")
        elif base:
            warm_start.restore_weights(model, fn_args.base_model)
            _LOG.info("Starting from the base model's weights (%s training steps behind it): "
                      "the learning rate continues its schedule from there, rising over the "
                      "first %d steps.", f"{steps_before:,}",
                      rewarm_steps(hparams))
        write_dir = checkpoint_dir if chief else os.path.join(
            checkpoint_dir, f".{devices.worker_name(strategy)}-temp")
        manager = tf.train.CheckpointManager(
            checkpoint, write_dir, max_to_keep=(hparams.keep_checkpoints or None) if chief else 1)
        state_dir = os.path.join(write_dir, STATE_DIR)
        training_state = callbacks.TrainingState(
            warm_start.training_state(model), state_dir, final_step,
            hparams.cooldown_fraction, hparams.tail_steps_before(schedule_before), keep=chief)
    step = int(model.optimizer.iterations.numpy())
    time_budget = budget.TimeBudget(
        hparams.train_minutes * 60, started, callbacks.seconds_trained(history_path, step),
        hparams.cooldown_fraction, hparams.averaged_fraction,
        hparams.tail_steps_before(schedule_before)) if hparams.train_minutes else None
    if not int(final_step.numpy()) or step < int(final_step.numpy()):
        feedback = [callbacks.ProgressLogger(final_step, budget=time_budget),
                    callbacks.CheckpointAndHistory(manager, history_path, keep=chief,
                                                   started=started),
                    callbacks.StopTraining(final_step, time_budget, strategy),
                    training_state,  # after StopTraining: the step it fixes decides the fork
                    *([average] if average else [])]
        if chief:
            feedback.append(keras.callbacks.TensorBoard(fn_args.model_run_dir, update_freq=50))
        # Under a budget the epochs are counted to a step no budget reaches; StopTraining ends it.
        epochs = -(-(int(final_step.numpy()) or _UNBOUNDED_STEPS) // hparams.checkpoint_every)
        model.fit(_train_data(fn_args, tf_transform_output, hparams),
                  epochs=epochs, initial_epoch=step // hparams.checkpoint_every,
                  steps_per_epoch=hparams.checkpoint_every,
                  validation_data=validation_dataset(fn_args.eval_files, tf_transform_output,
                                                     hparams),
                  verbose=0, callbacks=feedback)
    hparams = dataclasses.replace(hparams, train_steps=int(model.optimizer.iterations.numpy()))
    # The moving average of the weights, if kept (fit does this too, but not when a re-run
    # finds training already complete), or the uniform average of the last steps: on every
    # worker, so that all keep the same weights.
    model.optimizer.finalize_variable_values(model.trainable_variables)
    averaged_steps = average.apply() if average else 0
    if not chief:
        _LOG.info("Worker %s finished; the chief exports the model.",
                  devices.worker_name(strategy))
        return
    if time_budget:
        _LOG.info("Trained %s steps in %s of the %g-minute budget. To repeat this training "
                  "exactly: %s", f"{hparams.train_steps:,}",
                  callbacks.duration(time_budget.elapsed(time.time())), hparams.train_minutes,
                  repeat_flags(hparams, plan, overrides))
    if averaged_steps:
        _LOG.info("Exporting the average of the weights over the last %d training steps.",
                  averaged_steps)
    # The record says what the export decodes with ("auto" resolved).
    hparams = dataclasses.replace(hparams, decode_precision=export.export_translator(
        export.float32_copy(model), tf_transform_output, hparams, fn_args.serving_model_dir))
    state_step = callbacks.saved_state_step(state_dir)
    if state_step:  # shipped with the export, for a warm start from it
        io_utils.copy_dir(state_dir, os.path.join(fn_args.serving_model_dir, TRAINING_STATE))
    warm_start.write_record(fn_args.serving_model_dir, warm_start.TrainingRecord(
        hparams=dataclasses.asdict(hparams), train_steps=hparams.train_steps,
        total_train_steps=steps_before + hparams.train_steps, transform=settings.transform,
        machine=machine, auto_precision=hparams.precision
        if overrides.get("precision", profile.precision) == "auto" else "",
        schedule_steps=schedule_before + state_step if state_step else 0))
    for name, payload in ((HISTORY_FILE, callbacks.load_history(history_path)),
                          (HPARAMS_FILE, dataclasses.asdict(hparams))):
        with tf.io.gfile.GFile(os.path.join(fn_args.model_run_dir, name), "w") as f:
            json.dump(payload, f, indent=1)
    _LOG.info("Exported the translator to %s.", fn_args.serving_model_dir)


def repeat_flags(hparams: hparams_lib.HParams, plan: budget.Plan,
                 overrides: dict[str, object]) -> str:
    """`nmt run` flags that train exactly as this budgeted run did: its step count, with the
    recipe and precision its plan chose."""
    fields = {**plan.recipe, **overrides}
    return " ".join([f"--train-steps {hparams.train_steps}", f"--precision {hparams.precision}",
                     *(f"--hparam {name}={getattr(hparams, name)}" for name in sorted(fields)
                       if name != "precision")])

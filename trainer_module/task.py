"""TFX Trainer entry point: `run_fn` trains the Transformer and exports the translator.

Referenced by module path (`trainer_module.task`), so the same code runs locally and in the
Kubeflow container. custom_config: {"profile": name, "checkpoint_root": dir, "max_train_seconds":
s, "precision": one of hparams.PRECISIONS, "hparams": {field: value}} (all but the profile
optional).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os

import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras
from tfx.components.trainer.fn_args_utils import FnArgs

from trainer_module import callbacks, devices, export, hparams as hparams_lib
from trainer_module.input_pipeline import make_dataset, validation_dataset
from trainer_module.model import Transformer
from trainer_module.optimization import (GlobalTokenMeanLoss, MaskedAccuracy, Perplexity,
                                         cooldown_steps, make_optimizer)
from trainer_module.preprocessing import (RESERVED_TOKENS, SOURCE_VOCAB, TARGET_VOCAB,
                                          shares_vocabulary)

_LOG = logging.getLogger(__name__)
HISTORY_FILE = "history.json"
HPARAMS_FILE = "hparams.json"


def _hparams(fn_args: FnArgs,
             tf_transform_output: tft.TFTransformOutput) -> hparams_lib.HParams:
    """The profile with the Trainer's overrides (steps, time budget, precision, any field by
    name), the real vocabulary sizes, and the precision resolved for this machine."""
    config = fn_args.custom_config or {}
    hparams = hparams_lib.get_profile(config.get("profile", "smoke"))
    if fn_args.train_steps:
        hparams = dataclasses.replace(
            hparams, train_steps=fn_args.train_steps,
            checkpoint_every=min(hparams.checkpoint_every, fn_args.train_steps))
    overrides = {key: config[key] for key in ("max_train_seconds", "precision")
                 if config.get(key)}
    hparams = hparams_lib.with_overrides(hparams, {**overrides, **(config.get("hparams") or {})})
    return devices.fit_to_devices(hparams.with_vocab_sizes(
        *vocab_sizes(tf_transform_output), shared=shares_vocabulary(tf_transform_output)))


def vocab_sizes(tf_transform_output: tft.TFTransformOutput) -> tuple[int, int]:
    """(source, target) vocabulary sizes: Transform's vocab files plus the reserved tokens."""
    return tuple(tf_transform_output.vocabulary_size_by_name(name) + len(RESERVED_TOKENS)
                 for name in (SOURCE_VOCAB, TARGET_VOCAB))


def _checkpoint_dir(fn_args: FnArgs, hparams: hparams_lib.HParams) -> str:
    """Stable across re-runs of the same training (same data, same hparams), so a killed
    Trainer resumes where it stopped instead of starting over."""
    root = (fn_args.custom_config or {}).get("checkpoint_root") or os.path.join(
        fn_args.model_run_dir, "checkpoints")
    key = json.dumps([dataclasses.asdict(hparams), sorted(fn_args.train_files),
                      fn_args.transform_output], sort_keys=True)
    return os.path.join(root, hashlib.sha256(key.encode()).hexdigest()[:16])


def _build_keras_model(hparams: hparams_lib.HParams) -> Transformer:
    """The compiled model, its and the optimizer's variables created (so a checkpoint restores
    into them at once, even when no training step follows)."""
    model = Transformer(hparams)
    model((tf.ones([1, 1], tf.int32), tf.ones([1, 1], tf.int32)))
    model.compile(
        optimizer=make_optimizer(hparams),
        loss=GlobalTokenMeanLoss(hparams.label_smoothing),
        metrics=[MaskedAccuracy(), Perplexity(), callbacks.TargetTokens()],
        jit_compile=hparams.use_xla)
    model.optimizer.build(model.trainable_variables)  # slots (and the average) restore at once
    return model


def _train_data(fn_args: FnArgs, tf_transform_output: tft.TFTransformOutput,
                hparams: hparams_lib.HParams) -> keras.utils.experimental.DatasetCreator:
    """One dataset per worker (its own shard of the examples), whose batches of batch_tokens
    go one per replica: N replicas train N x batch_tokens tokens per step."""

    def per_worker(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return make_dataset(fn_args.train_files, tf_transform_output, hparams, training=True,
                            shard=(context.num_input_pipelines, context.input_pipeline_id))

    return keras.utils.experimental.DatasetCreator(per_worker)


def run_fn(fn_args: FnArgs) -> None:
    """Trains with checkpoints every `checkpoint_every` steps, then exports for serving.

    Under MultiWorkerMirroredStrategy every worker runs this; only the chief keeps
    checkpoints and writes the history, hparams and the SavedModel (see `devices`).
    """
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
    hparams = _hparams(fn_args, tf_transform_output)
    strategy = devices.choose_strategy()
    chief = devices.writes_results(strategy)
    _LOG.info("Training the Transformer: %s", json.dumps(dataclasses.asdict(hparams)))
    if hparams.cooldown_fraction and hparams.max_train_seconds:
        _LOG.info("The learning rate decays to zero over steps %d-%d; if the %.0f s budget "
                  "stops training first, that cooldown is cut short.",
                  hparams.train_steps - cooldown_steps(hparams) + 1, hparams.train_steps,
                  hparams.max_train_seconds)
    checkpoint_dir = _checkpoint_dir(fn_args, hparams)
    with strategy.scope():
        model = _build_keras_model(hparams)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
        latest = tf.train.latest_checkpoint(checkpoint_dir)
        if latest:
            checkpoint.restore(latest)
            _LOG.info("Resuming from %s (step %d of %d).", latest,
                      int(model.optimizer.iterations.numpy()), hparams.train_steps)
        write_dir = checkpoint_dir if chief else os.path.join(
            checkpoint_dir, f".{devices.worker_name(strategy)}-temp")
        manager = tf.train.CheckpointManager(
            checkpoint, write_dir, max_to_keep=(hparams.keep_checkpoints or None) if chief else 1)
    history_path = os.path.join(checkpoint_dir, HISTORY_FILE)
    step = int(model.optimizer.iterations.numpy())
    if step < hparams.train_steps:
        feedback = [callbacks.ProgressLogger(hparams.train_steps,
                                             max_seconds=hparams.max_train_seconds),
                    callbacks.CheckpointAndHistory(manager, history_path, keep=chief),
                    callbacks.StopTraining(hparams.train_steps, hparams.max_train_seconds,
                                           strategy)]
        if chief:
            feedback.append(keras.callbacks.TensorBoard(fn_args.model_run_dir, update_freq=50))
        model.fit(_train_data(fn_args, tf_transform_output, hparams),
                  epochs=-(-hparams.train_steps // hparams.checkpoint_every),
                  initial_epoch=step // hparams.checkpoint_every,
                  steps_per_epoch=hparams.checkpoint_every,
                  validation_data=validation_dataset(fn_args.eval_files, tf_transform_output,
                                                     hparams),
                  verbose=0, callbacks=feedback)
    if not chief:
        _LOG.info("Worker %s finished; the chief exports the model.",
                  devices.worker_name(strategy))
        return
    # The moving average of the weights, if kept (fit does this too, but not when a re-run
    # finds training already complete).
    model.optimizer.finalize_variable_values(model.trainable_variables)
    export.export_translator(export.float32_copy(model), tf_transform_output, hparams,
                             fn_args.serving_model_dir)
    for name, payload in ((HISTORY_FILE, callbacks.load_history(history_path)),
                          (HPARAMS_FILE, dataclasses.asdict(hparams))):
        with tf.io.gfile.GFile(os.path.join(fn_args.model_run_dir, name), "w") as f:
            json.dump(payload, f, indent=1)
    _LOG.info("Exported the translator to %s.", fn_args.serving_model_dir)

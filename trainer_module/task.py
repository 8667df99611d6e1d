"""TFX Trainer entry point: `run_fn` trains the Transformer and exports the translator.

Referenced by module path (`trainer_module.task`), so the same code runs locally and in the
Kubeflow container. custom_config: {"profile": name, "checkpoint_root": dir (optional)}.
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
from tfx import v1 as tfx

from trainer_module import callbacks, devices, export, hparams as hparams_lib
from trainer_module.input_pipeline import make_dataset
from trainer_module.model import Transformer
from trainer_module.optimization import (MaskedAccuracy, Perplexity, make_optimizer,
                                         masked_cross_entropy)
from trainer_module.preprocessing import RESERVED_TOKENS, SOURCE_VOCAB, TARGET_VOCAB

_LOG = logging.getLogger(__name__)
HISTORY_FILE = "history.json"
HPARAMS_FILE = "hparams.json"
_VALIDATION_BATCHES = 50


def _hparams(fn_args: tfx.components.FnArgs,
             tf_transform_output: tft.TFTransformOutput) -> hparams_lib.HParams:
    """The profile, with the Trainer's step count and the real vocabulary sizes."""
    config = fn_args.custom_config or {}
    hparams = hparams_lib.get_profile(config.get("profile", "smoke"))
    if fn_args.train_steps:
        hparams = dataclasses.replace(
            hparams, train_steps=fn_args.train_steps,
            checkpoint_every=min(hparams.checkpoint_every, fn_args.train_steps))
    if config.get("max_train_seconds"):
        hparams = dataclasses.replace(hparams, max_train_seconds=config["max_train_seconds"])
    return devices.fit_to_devices(hparams.with_vocab_sizes(*vocab_sizes(tf_transform_output)))


def vocab_sizes(tf_transform_output: tft.TFTransformOutput) -> tuple[int, int]:
    """(source, target) vocabulary sizes: Transform's vocab files plus the reserved tokens."""
    return tuple(tf_transform_output.vocabulary_size_by_name(name) + len(RESERVED_TOKENS)
                 for name in (SOURCE_VOCAB, TARGET_VOCAB))


def _checkpoint_dir(fn_args: tfx.components.FnArgs, hparams: hparams_lib.HParams) -> str:
    """Stable across re-runs of the same training (same data, same hparams), so a killed
    Trainer resumes where it stopped instead of starting over."""
    root = (fn_args.custom_config or {}).get("checkpoint_root") or os.path.join(
        fn_args.model_run_dir, "checkpoints")
    key = json.dumps([dataclasses.asdict(hparams), sorted(fn_args.train_files),
                      fn_args.transform_output], sort_keys=True)
    return os.path.join(root, hashlib.sha256(key.encode()).hexdigest()[:16])


def _build_keras_model(hparams: hparams_lib.HParams) -> Transformer:
    model = Transformer(hparams)
    model.compile(
        optimizer=make_optimizer(hparams),
        loss=lambda labels, logits: masked_cross_entropy(labels, logits, hparams.label_smoothing),
        metrics=[MaskedAccuracy(), Perplexity(), callbacks.TargetTokens()],
        jit_compile=hparams.use_xla)
    return model


def run_fn(fn_args: tfx.components.FnArgs) -> None:
    """Trains with checkpoints every `checkpoint_every` steps, then exports for serving."""
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
    hparams = _hparams(fn_args, tf_transform_output)
    _LOG.info("Training the Transformer: %s", json.dumps(dataclasses.asdict(hparams)))
    strategy = devices.choose_strategy()
    train_data = make_dataset(fn_args.train_files, tf_transform_output, hparams, training=True)
    eval_data = make_dataset(fn_args.eval_files, tf_transform_output, hparams,
                             training=False).take(_VALIDATION_BATCHES)
    with strategy.scope():
        model = _build_keras_model(hparams)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
        manager = tf.train.CheckpointManager(checkpoint, _checkpoint_dir(fn_args, hparams),
                                             max_to_keep=2)
        if manager.latest_checkpoint:
            checkpoint.restore(manager.latest_checkpoint)
            _LOG.info("Resuming from %s (step %d of %d).", manager.latest_checkpoint,
                      int(model.optimizer.iterations.numpy()), hparams.train_steps)
    history_path = os.path.join(manager.directory, HISTORY_FILE)
    start_epoch = int(model.optimizer.iterations.numpy()) // hparams.checkpoint_every
    epochs = -(-hparams.train_steps // hparams.checkpoint_every)
    feedback = [callbacks.ProgressLogger(epochs * hparams.checkpoint_every,
                                         max_seconds=hparams.max_train_seconds),
                callbacks.CheckpointAndHistory(manager, history_path),
                keras.callbacks.TensorBoard(fn_args.model_run_dir, update_freq=50)]
    if hparams.max_train_seconds:
        feedback.append(callbacks.TimeBudget(hparams.max_train_seconds))
    model.fit(train_data, epochs=epochs, initial_epoch=start_epoch,
              steps_per_epoch=hparams.checkpoint_every, validation_data=eval_data, verbose=0,
              callbacks=feedback)

    export.export_translator(model, tf_transform_output, hparams, fn_args.serving_model_dir)
    for name, payload in ((HISTORY_FILE, callbacks.load_history(history_path)),
                          (HPARAMS_FILE, dataclasses.asdict(hparams))):
        with tf.io.gfile.GFile(os.path.join(fn_args.model_run_dir, name), "w") as f:
            json.dump(payload, f, indent=1)
    _LOG.info("Exported the translator to %s.", fn_args.serving_model_dir)

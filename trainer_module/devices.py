"""Which devices train the model: every GPU, several machines via TF_CONFIG, or the CPU."""
from __future__ import annotations

import dataclasses
import json
import logging
import os

import tensorflow as tf

from trainer_module.hparams import HParams

_LOG = logging.getLogger(__name__)


def choose_strategy() -> tf.distribute.Strategy:
    """MultiWorkerMirrored when TF_CONFIG names several workers, Mirrored over all GPUs, else CPU."""
    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    workers = len(cluster.get("worker", [])) + len(cluster.get("chief", []))
    gpus = tf.config.list_physical_devices("GPU")
    if workers > 1:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        _LOG.info("Training on %d workers (TF_CONFIG) with %d GPU(s) each: "
                  "MultiWorkerMirroredStrategy, %d replicas.", workers, len(gpus),
                  strategy.num_replicas_in_sync)
    elif gpus:
        strategy = tf.distribute.MirroredStrategy()
        _LOG.info("Training on %d GPU(s): %s.", len(gpus), ", ".join(g.name for g in gpus))
    else:
        strategy = tf.distribute.get_strategy()
        _LOG.info("No GPU visible: training on the CPU (%d threads).", os.cpu_count() or 1)
    return strategy


def fit_to_devices(hparams: HParams) -> HParams:
    """float16 and XLA only where they pay (a GPU); on the CPU both would slow training down."""
    if tf.config.list_physical_devices("GPU") or not (hparams.mixed_precision or hparams.use_xla):
        return hparams
    _LOG.info("No GPU: training in float32 without XLA (the profile asks for "
              "mixed_precision=%s, use_xla=%s).", hparams.mixed_precision, hparams.use_xla)
    return dataclasses.replace(hparams, mixed_precision=False, use_xla=False)

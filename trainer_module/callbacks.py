"""Training feedback and resumability: progress with ETA, checkpoints, loss history."""
from __future__ import annotations

import json
import logging
import time
from typing import Any

import tensorflow as tf
import tf_keras as keras

from trainer_module.hparams import PAD_ID

_LOG = logging.getLogger(__name__)


class TargetTokens(keras.metrics.Sum):
    """Non-PAD target tokens seen (per epoch), so progress can report tokens/s."""

    def __init__(self, name: str = "target_tokens", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)

    def update_state(self, labels: tf.Tensor, logits: tf.Tensor, sample_weight=None):
        return super().update_state(tf.reduce_sum(tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)))


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s"


class ProgressLogger(keras.callbacks.Callback):
    """'step 300/2000 (15%) loss 4.21 acc 0.31 | 1,650 tok/s | ETA 14m02s' every `every_s` s."""

    def __init__(self, total_steps: int, every_s: float = 30.0,
                 max_seconds: float = 0.0) -> None:
        super().__init__()
        self.total_steps, self.every_s, self.max_seconds = total_steps, every_s, max_seconds
        self._start = self._last = 0.0
        self._start_step = 0
        self._tokens_before_epoch = self._epoch_tokens = 0.0

    def on_train_begin(self, logs=None) -> None:
        self._start = self._last = time.time()
        self._start_step = int(self.model.optimizer.iterations.numpy())

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self._epoch_tokens = 0.0

    def on_train_batch_end(self, batch, logs=None) -> None:
        logs = logs or {}
        self._epoch_tokens = float(logs.get("target_tokens", 0.0))
        now = time.time()
        step = int(self.model.optimizer.iterations.numpy())
        if now - self._last < self.every_s and step < self.total_steps:
            return
        self._last = now
        elapsed = now - self._start
        done = max(step - self._start_step, 1)
        eta = elapsed / done * (self.total_steps - step)
        if self.max_seconds:  # a time budget (TimeBudget) ends training first
            eta = min(eta, max(self.max_seconds - elapsed, 0.0))
        tokens = self._tokens_before_epoch + self._epoch_tokens
        _LOG.info("Training step %d/%d (%d%%): loss %.3f, token accuracy %.3f | %s target "
                  "tokens/s | elapsed %s, ETA %s", step, self.total_steps,
                  100 * step // self.total_steps, logs.get("loss", float("nan")),
                  logs.get("masked_accuracy", float("nan")), f"{tokens / elapsed:,.0f}",
                  _duration(elapsed), _duration(eta))

    def on_epoch_end(self, epoch, logs=None) -> None:
        self._tokens_before_epoch += self._epoch_tokens


class CheckpointAndHistory(keras.callbacks.Callback):
    """Saves model + optimizer at the end of every epoch (= `checkpoint_every` steps), and
    appends the epoch's train/validation metrics to a JSON history that survives restarts."""

    def __init__(self, manager: tf.train.CheckpointManager, history_path: str) -> None:
        super().__init__()
        self.manager, self.history_path = manager, history_path

    def on_epoch_end(self, epoch, logs=None) -> None:
        step = int(self.model.optimizer.iterations.numpy())
        path = self.manager.save(checkpoint_number=step)
        history = load_history(self.history_path)
        history = [h for h in history if h["step"] < step]
        history.append({"step": step, **{k: float(v) for k, v in (logs or {}).items()}})
        with tf.io.gfile.GFile(self.history_path, "w") as f:
            json.dump(history, f, indent=1)
        _LOG.info("Checkpoint at step %d: %s (validation loss %.3f).", step, path,
                  (logs or {}).get("val_loss", float("nan")))


def load_history(path: str) -> list[dict[str, float]]:
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


class TimeBudget(keras.callbacks.Callback):
    """Stops training once it has run `seconds` (for same-wall-time comparisons)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self._start = 0.0

    def on_train_begin(self, logs=None) -> None:
        self._start = time.time()

    def on_train_batch_end(self, batch, logs=None) -> None:
        if time.time() - self._start >= self.seconds:
            _LOG.info("Training time budget of %.0f s used up at step %d: stopping.",
                      self.seconds, int(self.model.optimizer.iterations.numpy()))
            self.model.stop_training = True

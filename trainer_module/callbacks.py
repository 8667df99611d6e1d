"""Training feedback and resumability: progress with ETA, checkpoints, loss history."""
from __future__ import annotations

import json
import logging
import time
from typing import Any

import tensorflow as tf
import tf_keras as keras

from trainer_module import devices
from trainer_module.tokens import PAD_ID

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
    """'step 300/2000 (15%) loss 4.21 acc 0.31 | 1,650 tok/s | ETA 14m02s' every `every_s` s.

    The ETA extrapolates from the steps after the first one: the first step also traces the
    model and fills the shuffle buffer, and would make the first ETA hours too long.
    """

    def __init__(self, total_steps: int, every_s: float = 30.0,
                 max_seconds: float = 0.0) -> None:
        super().__init__()
        self.total_steps, self.every_s, self.max_seconds = total_steps, every_s, max_seconds
        self._start = self._last = self._rate_start = 0.0
        self._rate_step: int | None = None
        self._tokens_before_epoch = self._epoch_tokens = 0.0

    def on_train_begin(self, logs=None) -> None:
        self._start = self._last = time.time()
        self._rate_step = None

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self._epoch_tokens = 0.0

    def on_train_batch_end(self, batch, logs=None) -> None:
        logs = logs or {}
        self._epoch_tokens = float(logs.get("target_tokens", 0.0))
        now = time.time()
        step = int(self.model.optimizer.iterations.numpy())
        if self._rate_step is None:  # the first step: the rate is measured from here on
            self._rate_start, self._rate_step = now, step
        if (now - self._last < self.every_s or step == self._rate_step) and \
                step < self.total_steps:
            return
        self._last = now
        elapsed = now - self._start
        seconds_per_step = (now - self._rate_start) / max(step - self._rate_step, 1)
        eta = seconds_per_step * max(self.total_steps - step, 0)
        if self.max_seconds:  # a time budget (StopTraining) ends training first
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
    """Saves model + optimizer at the end of every epoch (= `checkpoint_every` steps, or where
    training stopped), and appends the epoch's train/validation metrics and the training
    seconds so far (summed over restarts) to a JSON history that survives restarts.

    Under MultiWorkerMirroredStrategy every worker must save (saving distributed variables is a
    collective operation), but only the chief keeps its checkpoints (`keep`): the others save
    into a temporary directory of their own and delete it (TensorFlow's multi-worker rule), and
    write no history.
    """

    def __init__(self, manager: tf.train.CheckpointManager, history_path: str,
                 keep: bool = True) -> None:
        super().__init__()
        self.manager, self.history_path, self.keep = manager, history_path, keep
        self._start, self._seconds_before = time.time(), 0.0

    def on_train_begin(self, logs=None) -> None:
        """A resumed run counts on from the training seconds of the checkpoint it resumed."""
        step = int(self.model.optimizer.iterations.numpy())
        self._start = time.time()
        self._seconds_before = max((h.get("train_seconds", 0.0) for h in
                                    load_history(self.history_path) if h["step"] <= step),
                                   default=0.0)

    def on_epoch_end(self, epoch, logs=None) -> None:
        step = int(self.model.optimizer.iterations.numpy())
        path = self.manager.save(checkpoint_number=step)
        if not self.keep:
            tf.io.gfile.rmtree(self.manager.directory)
            return
        history = load_history(self.history_path)
        history = [h for h in history if h["step"] < step]
        history.append({"step": step, **{k: float(v) for k, v in (logs or {}).items()},
                        "train_seconds": round(self._seconds_before + time.time() - self._start,
                                               1)})
        with tf.io.gfile.GFile(self.history_path, "w") as f:
            json.dump(history, f, indent=1)
        _LOG.info("Checkpoint at step %d: %s (validation loss %.3f).", step, path,
                  (logs or {}).get("val_loss", float("nan")))


def load_history(path: str) -> list[dict[str, float]]:
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


class StopTraining(keras.callbacks.Callback):
    """Stops at exactly `train_steps`, or once training has run `max_seconds` (0: no budget).

    Every worker of a MultiWorkerMirroredStrategy run must stop at the same step, or the others
    wait forever in the next collective. Steps are the same everywhere; for the time budget the
    chief's clock decides: every `agree_every` steps the workers sum "the chief says stop" (1 on
    the chief when out of time, else 0) in an all-reduce, so they all stop after the same step.
    """

    def __init__(self, train_steps: int, max_seconds: float = 0.0,
                 strategy: tf.distribute.Strategy | None = None, agree_every: int = 10) -> None:
        super().__init__()
        self.train_steps, self.max_seconds, self.agree_every = train_steps, max_seconds, agree_every
        self.strategy = strategy or tf.distribute.get_strategy()
        self._multi_worker = devices.num_workers() > 1
        self._chief = devices.writes_results(self.strategy)
        self._start = 0.0

    def on_train_begin(self, logs=None) -> None:
        self._start = time.time()

    def on_train_batch_end(self, batch, logs=None) -> None:
        step = int(self.model.optimizer.iterations.numpy())
        if step >= self.train_steps:
            self.model.stop_training = True
        elif self.max_seconds and self._out_of_time(step):
            _LOG.info("Training time budget of %.0f s used up at step %d: stopping.",
                      self.max_seconds, step)
            self.model.stop_training = True

    def _out_of_time(self, step: int) -> bool:
        out_of_time = time.time() - self._start >= self.max_seconds
        if not self._multi_worker:
            return out_of_time
        if step % self.agree_every:
            return False
        return bool(self._chief_says(tf.constant(float(self._chief and out_of_time))) > 0)

    @tf.function
    def _chief_says(self, flag: tf.Tensor) -> tf.Tensor:
        per_replica = self.strategy.run(tf.identity, args=(flag,))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

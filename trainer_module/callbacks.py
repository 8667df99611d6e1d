"""Training feedback and resumability: progress with ETA, checkpoints, loss history."""
from __future__ import annotations

import json
import logging
import time
from typing import Any

import tensorflow as tf
import tf_keras as keras

from trainer_module import devices
from trainer_module.budget import TimeBudget
from trainer_module.optimization import cooldown_steps, step_count
from transform_module.tokens import PAD_ID

_LOG = logging.getLogger(__name__)


class TargetTokens(keras.metrics.Sum):
    """Non-PAD target tokens seen (per epoch), so progress can report tokens/s."""

    def __init__(self, name: str = "target_tokens", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)

    def update_state(self, labels: tf.Tensor, logits: tf.Tensor, sample_weight=None):
        return super().update_state(
            tf.reduce_sum(tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)))


def duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s"


class ProgressLogger(keras.callbacks.Callback):
    """'step 300/3,097 (9%) loss 4.21 acc 0.31 | 1,650 tok/s | ETA 14m02s' every `every_s` s.

    The ETA extrapolates from the steps after the first one: the first step also traces the
    model and fills the shuffle buffer, and would make the first ETA hours too long. Under a
    time budget whose final step is not fixed yet, the total is the budget's estimate ("~").
    """

    def __init__(self, final_step: int | tf.Variable, every_s: float = 30.0,
                 budget: TimeBudget | None = None) -> None:
        super().__init__()
        self.final_step, self.every_s, self.budget = final_step, every_s, budget
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
        total = step_count(self.final_step)
        if (now - self._last < self.every_s or step == self._rate_step) and \
                (not total or step < total):
            return
        self._last = now
        elapsed = now - self._start
        seconds_per_step = (now - self._rate_start) / max(step - self._rate_step, 1)
        if total:
            shown, eta = f"{total:,}", seconds_per_step * max(total - step, 0)
        else:  # a budget still measuring: it ends when the budget does
            expected = self.budget.estimate(step, now) if self.budget else None
            shown = f"~{expected or step:,}"
            eta = max(self.budget.seconds - self.budget.elapsed(now), 0.0) if self.budget else 0
        tokens = self._tokens_before_epoch + self._epoch_tokens
        _LOG.info("Training step %d/%s (%d%%): loss %.3f, token accuracy %.3f | %s target "
                  "tokens/s | elapsed %s, ETA %s", step, shown,
                  100 * step // max(int(shown.lstrip("~").replace(",", "")), 1),
                  logs.get("loss", float("nan")), logs.get("masked_accuracy", float("nan")),
                  f"{tokens / elapsed:,.0f}", duration(elapsed), duration(eta))

    def on_epoch_end(self, epoch, logs=None) -> None:
        self._tokens_before_epoch += self._epoch_tokens


class CheckpointAndHistory(keras.callbacks.Callback):
    """Saves model + optimizer at the end of every epoch (= `checkpoint_every` steps, or where
    training stopped), and appends the epoch's train/validation metrics and the training
    seconds so far (summed over restarts) to a JSON history that survives restarts.

    Under MultiWorkerMirroredStrategy every worker must save (saving distributed variables is a
    collective operation), but only the chief keeps its checkpoints (`keep`): the others save
    into a temporary directory of their own and delete it (TensorFlow's multi-worker rule), and
    write no history. Training seconds count from `started` (default: when fit begins).
    """

    def __init__(self, manager: tf.train.CheckpointManager, history_path: str,
                 keep: bool = True, started: float | None = None) -> None:
        super().__init__()
        self.manager, self.history_path, self.keep = manager, history_path, keep
        self.started = started
        self._start, self._seconds_before = time.time(), 0.0

    def on_train_begin(self, logs=None) -> None:
        """A resumed run counts on from the training seconds of the checkpoint it resumed."""
        self._start = self.started or time.time()
        self._seconds_before = seconds_trained(
            self.history_path, int(self.model.optimizer.iterations.numpy()))

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


def seconds_trained(history_path: str, step: int) -> float:
    """Training seconds recorded up to the checkpoint at `step` (0 for a fresh training)."""
    return max((h.get("train_seconds", 0.0) for h in load_history(history_path)
                if h["step"] <= step), default=0.0)


def load_history(path: str) -> list[dict[str, float]]:
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


class StopTraining(keras.callbacks.Callback):
    """Stops after exactly `final_step` steps. Under a time budget that step is 0 (unknown) at
    first, and the budget fixes it while training runs (trainer_module/budget.py); the variable
    is checkpointed, so a resumed run keeps it.

    Every worker of a MultiWorkerMirroredStrategy run must stop at the same step, or the others
    wait forever in the next collective. The chief's clock decides: every `agree_every` steps
    the workers take the chief's decision in an all-reduce (devices.chief_value), so they all
    set the same final step at the same step.
    """

    def __init__(self, final_step: tf.Variable, budget: TimeBudget | None = None,
                 strategy: tf.distribute.Strategy | None = None, agree_every: int = 10) -> None:
        super().__init__()
        self.final_step, self.budget = final_step, budget
        self.strategy = strategy or tf.distribute.get_strategy()
        self._chief = devices.writes_results(self.strategy)
        # Alone, the budget can decide after any step; together, only at agreed ones.
        self.agree_every = agree_every if devices.num_workers() > 1 else 1

    def on_train_batch_end(self, batch, logs=None) -> None:
        step = int(self.model.optimizer.iterations.numpy())
        final = int(self.final_step.numpy())
        if not final and self.budget is not None and step % self.agree_every == 0:
            now = time.time()
            self.budget.observe(step, now)
            decided = self.budget.decide(step, now, self.agree_every) if self._chief else 0
            final = int(devices.chief_value(self.strategy, decided))
            if final:
                self.final_step.assign(final)
                cooldown = cooldown_steps(self.budget.cooldown_fraction, final,
                                          self.budget.tail_before)
                _LOG.info("The %.0f s training budget ends training at step %d (decided at "
                          "step %d, %.0f s in%s).", self.budget.seconds, final, step,
                          self.budget.elapsed(time.time()),
                          f"; the learning rate cools down over its last {cooldown} steps"
                          if cooldown else "")
        if final and step >= final:
            self.model.stop_training = True


class TrainingState(keras.callbacks.Callback):
    """Saves `checkpoint` (the weights and the optimizer) once, at the step where the cooldown
    begins (`fork_step`; the last step without one), into `directory`: the state a warm start
    goes on from (warm_start.restore_training_state). The served model is cooled down and
    averaged; a run that went on from it would climb back to a high learning rate from settled
    weights with empty moments, where from here a chain of runs follows one long run's
    schedule, and only each run's cooldown is its own.

    Every worker of a MultiWorkerMirroredStrategy run saves (a collective); only the chief's
    copy is kept (`keep`), as CheckpointAndHistory does.
    """

    def __init__(self, checkpoint: tf.train.Checkpoint, directory: str,
                 final_step: tf.Variable, cooldown_fraction: float, tail_before: int = 0,
                 keep: bool = True) -> None:
        super().__init__()
        self.final_step, self.cooldown_fraction = final_step, cooldown_fraction
        self.tail_before, self.keep = tail_before, keep
        self.manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1)

    def fork_step(self) -> int:
        """The step whose state is saved (0 while the last step is undecided)."""
        final = int(self.final_step.numpy())
        if not final:
            return 0
        return max(final - cooldown_steps(self.cooldown_fraction, final, self.tail_before), 1)

    def on_train_batch_end(self, batch, logs=None) -> None:
        step = int(self.model.optimizer.iterations.numpy())
        if step != self.fork_step():
            return
        path = self.manager.save(checkpoint_number=step)
        if not self.keep:
            tf.io.gfile.rmtree(self.manager.directory)
            return
        _LOG.info("Saved the training state at step %d, before the cooldown, for a later warm "
                  "start: %s.", step, path)


def saved_state_step(directory: str) -> int:
    """The step of the state TrainingState saved in `directory` (0: none)."""
    latest = tf.train.latest_checkpoint(directory)
    return int(latest.rsplit("-", 1)[1]) if latest else 0


class WeightAverage(keras.callbacks.Callback):
    """The uniform average of the trainable weights over the last `fraction` of the steps up to
    `final_step` (a variable: a time budget fixes it while training runs, before the averaged
    steps begin; budget.TimeBudget). `variables` go into the checkpoint, so a resumed run goes
    on with its average; `apply` puts the average into the model, for the export.

    Create it inside the strategy's scope: its variables are mirrored as the model's are.
    """

    def __init__(self, weights: list[tf.Variable], final_step: tf.Variable,
                 fraction: float, tail_before: int = 0) -> None:
        super().__init__()
        self.final_step, self.fraction, self.tail_before = final_step, fraction, tail_before
        self._weights = list(weights)
        self.averaged = [tf.Variable(tf.zeros(w.shape, w.dtype), trainable=False,
                                     name=f"average_{i}") for i, w in enumerate(self._weights)]
        self.count = tf.Variable(0, trainable=False, dtype=tf.int64, name="averaged_steps")

    @property
    def variables(self) -> dict[str, Any]:
        return {"averaged": self.averaged, "count": self.count}

    @tf.function
    def _add_weights(self) -> None:
        self.count.assign_add(1)
        share = 1.0 / tf.cast(self.count, tf.float32)
        for average, weight in zip(self.averaged, self._weights):
            average.assign_add((tf.convert_to_tensor(weight) - average) * share)

    def on_train_batch_end(self, batch, logs=None) -> None:
        final = int(self.final_step.numpy())
        step = int(self.model.optimizer.iterations.numpy())
        if final and step > final - cooldown_steps(self.fraction, final, self.tail_before):
            self._add_weights()

    def apply(self) -> int:
        """Sets the weights to their average; the number of steps averaged (0: none, and the
        weights stay as they are)."""
        steps = int(self.count.numpy())
        if steps:
            for weight, average in zip(self._weights, self.averaged):
                weight.assign(average)
        return steps


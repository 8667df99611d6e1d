"""Loss, metrics and optimizer of the paper (§5.3-5.4), all ignoring PAD_ID target positions.

labels are target-output ids [B, T] (the target shifted left, ending in END_ID, PAD_ID after);
logits are the model's [B, T, V] float32.
"""
from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras as keras

from trainer_module.hparams import HParams
from transform_module.tokens import PAD_ID


def _token_weights(labels: tf.Tensor) -> tf.Tensor:
    """[B, T] float32: 1 for real target tokens, 0 for PAD_ID."""
    return tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)


def token_cross_entropy(labels: tf.Tensor, logits: tf.Tensor,
                        label_smoothing: float = 0.0) -> tf.Tensor:
    """Per-token cross-entropy [B, T] (PAD positions included; weight them out).

    With smoothing eps the target is (1 - eps) * one_hot(label) + eps / V everywhere (as Keras'
    CategoricalCrossentropy), i.e. (1 - eps) * NLL + eps * mean over the vocabulary of -log p.

    Its gradient is written out, softmax minus the target: TensorFlow's own gradient of the
    label's gather is a dense UnsortedSegmentSum over [B, T, V], the costliest op of a CPU
    training step (BENCHMARKS.md, "Training time per step"). The forward ops are
    those of plain TensorFlow, so a graph that also asks for the unsmoothed loss (the
    perplexity metric) computes the shared part once.
    """
    labels = tf.cast(labels, tf.int32)
    return _cross_entropy(labels, label_smoothing)(tf.cast(logits, tf.float32))


def _shifted_logits(logits: tf.Tensor) -> tf.Tensor:
    """logits minus each position's largest logit [B, T, V] (<= 0; 0 at the argmax)."""
    return logits - tf.reduce_max(logits, axis=-1, keepdims=True)


def _cross_entropy(labels: tf.Tensor, label_smoothing: float):
    """logits [B, T, V] float32 -> `token_cross_entropy` [B, T], with its gradient."""

    @tf.custom_gradient
    def cross_entropy(logits: tf.Tensor):
        shifted = _shifted_logits(logits)  # exp cannot overflow
        exp = tf.exp(shifted)
        normalizer = tf.reduce_sum(exp, axis=-1)
        log_normalizer = tf.math.log(normalizer)
        loss = log_normalizer - tf.gather(shifted, labels, batch_dims=2)
        if label_smoothing:
            uniform = log_normalizer - tf.reduce_mean(shifted, axis=-1)
            loss = (1.0 - label_smoothing) * loss + label_smoothing * uniform

        def gradient(upstream: tf.Tensor) -> tf.Tensor:
            """upstream [B, T] -> upstream * (softmax - target) [B, T, V]."""
            with tf.name_scope("cross_entropy_gradient"):  # else its ops have no scope
                grad = exp * (upstream / normalizer)[..., None]
                if label_smoothing:
                    vocab_size = tf.cast(tf.shape(logits)[-1], tf.float32)
                    grad -= (upstream * (label_smoothing / vocab_size))[..., None]
                rows = tf.reshape(grad, [-1, tf.shape(grad)[-1]])  # one per (b, t)
                at_labels = tf.stack([tf.range(tf.shape(rows)[0]), tf.reshape(labels, [-1])],
                                     axis=1)
                rows = tf.tensor_scatter_nd_sub(
                    rows, at_labels, tf.reshape(upstream, [-1]) * (1.0 - label_smoothing))
                return tf.reshape(rows, tf.shape(grad))

        return loss, gradient

    return cross_entropy


def masked_cross_entropy(labels: tf.Tensor, logits: tf.Tensor, label_smoothing: float = 0.0,
                         num_tokens: tf.Tensor | None = None) -> tf.Tensor:
    """Scalar: label-smoothed cross-entropy summed over the non-PAD tokens of the batch, divided
    by num_tokens (default: the batch's own non-PAD tokens, i.e. their mean)."""
    weights = _token_weights(labels)
    total = tf.reduce_sum(token_cross_entropy(labels, logits, label_smoothing) * weights)
    if num_tokens is None:
        num_tokens = tf.reduce_sum(weights)
    return total / tf.maximum(num_tokens, 1.0)


class GlobalTokenMeanLoss(keras.losses.Loss):
    """`masked_cross_entropy` of a replica's batch divided by the target tokens of the global
    batch (every replica of every worker).

    Distribution strategies sum the replicas' gradients, which then is exactly the gradient of
    the mean over all the step's tokens, however unevenly the replicas' batches were filled.
    Reduction SUM, so Keras does not also divide by the number of replicas.
    """

    def __init__(self, label_smoothing: float = 0.0,
                 name: str = "global_token_mean_cross_entropy", **kwargs: Any) -> None:
        kwargs.setdefault("reduction", keras.losses.Reduction.SUM)
        super().__init__(name=name, **kwargs)
        self.label_smoothing = label_smoothing

    def call(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        tokens = tf.reduce_sum(_token_weights(labels))
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            tokens = context.all_reduce(tf.distribute.ReduceOp.SUM, tokens)
        return masked_cross_entropy(labels, logits, self.label_smoothing, tokens)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "label_smoothing": self.label_smoothing}


class MaskedAccuracy(keras.metrics.Mean):
    """Fraction of non-PAD target tokens whose label has the largest logit. A label tied with
    the largest counts as right (bfloat16 logits do tie; an argmax would pick the tied id
    with the lowest number, no better a choice)."""

    def __init__(self, name: str = "masked_accuracy", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)

    def update_state(self, labels: tf.Tensor, logits: tf.Tensor,
                     sample_weight: None = None) -> tf.Operation:
        # The label's logit is the largest. The same ops as the loss's, which the graph
        # computes once: an argmax would be another pass over [B, T, V].
        correct = tf.gather(_shifted_logits(tf.cast(logits, tf.float32)),
                            tf.cast(labels, tf.int32), batch_dims=2) >= 0.0
        return super().update_state(tf.cast(correct, tf.float32),
                                    sample_weight=_token_weights(labels))


class Perplexity(keras.metrics.Mean):
    """exp(mean cross-entropy without smoothing) over all non-PAD tokens seen."""

    def __init__(self, name: str = "perplexity", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)

    def update_state(self, labels: tf.Tensor, logits: tf.Tensor,
                     sample_weight: None = None) -> tf.Operation:
        return super().update_state(token_cross_entropy(labels, logits),
                                    sample_weight=_token_weights(labels))

    def result(self) -> tf.Tensor:
        return tf.exp(super().result())


class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) (paper eq. 3), times a
    linear cooldown to zero over the last `cooldown_fraction` of `train_steps` (0: none).

    The paper's rate never anneals, so the last weights of a short run are noisy; decaying to
    zero at the end of the budget (a "warmup-stable-decay" schedule, Hägele et al. 2024) settles
    them. `train_steps` may be a variable that a time budget sets while training runs
    (trainer_module/budget.py): while it is 0 the rate has no cooldown, and the budget fixes it
    before the cooldown would have begun, so the rates are those of a run told that step count
    from the start. The optimizer counts iterations from 0; the paper's step numbers start at 1,
    so the first update already has a non-zero rate, and so does the last one
    (step == train_steps). Peak: scale * (d_model * warmup_steps)^-0.5.

    A run that continues a trained model (`step_offset`: the steps behind it) takes the paper's
    rate where that model's training left it, past the peak, instead of warming up to the peak
    again: the weights are already past the phase the warm-up protects. Its optimizer starts
    with empty moments (a served model carries none), so the rate rises linearly from zero over
    `rewarm_steps` first, as Adam's first steps are otherwise full-size. `tail_before`: the
    steps behind such a run that size its cooldown too (hparams.continued_tail "total"): it
    spans cooldown_fraction of those and train_steps, at most train_steps.
    """

    def __init__(self, d_model: int, warmup_steps: int, scale: float = 1.0,
                 train_steps: int | tf.Variable = 0, cooldown_fraction: float = 0.0,
                 step_offset: int = 0, rewarm_steps: int = 0, tail_before: int = 0) -> None:
        super().__init__()
        if not 0.0 <= cooldown_fraction <= 1.0:
            raise ValueError(f"cooldown_fraction must be in [0, 1], got {cooldown_fraction}")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale
        self.train_steps = train_steps
        self.cooldown_fraction = cooldown_fraction
        self.step_offset = step_offset
        self.rewarm_steps = rewarm_steps
        self.tail_before = tail_before

    @property
    def cooldown_steps(self) -> int:
        """The cooldown's length for the train_steps known now (0 while undecided)."""
        return cooldown_steps(self.cooldown_fraction, step_count(self.train_steps),
                              self.tail_before)

    def __call__(self, step: tf.Tensor) -> tf.Tensor:
        step = tf.cast(step, tf.float32) + 1.0
        total = step + self.step_offset
        rate = (self.scale * self.d_model ** -0.5
                * tf.minimum(tf.math.rsqrt(total), total * self.warmup_steps ** -1.5))
        if self.rewarm_steps:
            rate *= tf.minimum(step / self.rewarm_steps, 1.0)
        if not self.cooldown_fraction:
            return rate
        # float64 and round-half-to-even, as Python's round() in `cooldown_steps`.
        train_steps = tf.cast(self.train_steps, tf.float64)
        cooldown = tf.cast(tf.minimum(
            tf.round((train_steps + self.tail_before) * self.cooldown_fraction), train_steps),
            tf.float32)
        factor = tf.clip_by_value(
            (tf.cast(train_steps, tf.float32) + 1.0 - step) / tf.maximum(cooldown, 1.0), 0.0, 1.0)
        return rate * tf.where(cooldown > 0, factor, 1.0)

    def get_config(self) -> dict[str, Any]:
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale,
                "train_steps": step_count(self.train_steps),
                "cooldown_fraction": self.cooldown_fraction, "step_offset": self.step_offset,
                "rewarm_steps": self.rewarm_steps, "tail_before": self.tail_before}


def step_count(steps: int | tf.Variable) -> int:
    """A step count given as a number or as a (possibly distributed) variable."""
    return int(steps.numpy()) if hasattr(steps, "numpy") else int(steps)


def cooldown_steps(fraction: float, train_steps: int, tail_before: int = 0) -> int:
    """The last steps of `train_steps` over which the learning rate decays to zero (or whose
    weights are averaged): `fraction` of them, or of them and `tail_before` steps behind them
    (HParams.tail_steps_before), at most all of them."""
    return min(round(fraction * (train_steps + tail_before)), train_steps)


def peak_learning_rate(hparams: HParams) -> float:
    """The schedule's highest rate, reached at the end of the warm-up."""
    return hparams.learning_rate_scale * (hparams.d_model * hparams.warmup_steps) ** -0.5


def rewarm_steps(hparams: HParams) -> int:
    """A continued run's linear rise to its rate: a tenth of the first run's warm-up."""
    return max(hparams.warmup_steps // 10, 1)


def learning_rate_schedule(hparams: HParams, train_steps: int | tf.Variable | None = None,
                           steps_before: int = 0, moments: bool = False) -> TransformerSchedule:
    """The warm-up schedule scaled for the profile, with its cooldown if any, ending at
    `train_steps` (default: the profile's; a variable when a time budget decides it); for a
    model with `steps_before` steps of the schedule behind it, continued where they left it
    (hparams.continued_schedule "continue"; "restart": as a fresh run's). `moments`: the
    optimizer starts with the base's moments (warm_start.restore_training_state), so the rate
    needs no rise from zero."""
    continued = steps_before if hparams.continued_schedule == "continue" else 0
    return TransformerSchedule(hparams.d_model, hparams.warmup_steps, hparams.learning_rate_scale,
                               hparams.train_steps if train_steps is None else train_steps,
                               hparams.cooldown_fraction, step_offset=continued,
                               rewarm_steps=rewarm_steps(hparams) if continued and not moments
                               else 0,
                               tail_before=hparams.tail_steps_before(continued))


def make_optimizer(hparams: HParams, train_steps: int | tf.Variable | None = None,
                   steps_before: int = 0, moments: bool = False) -> keras.optimizers.Optimizer:
    """Adam(0.9, 0.98, 1e-9 by default) on the warm-up schedule ending at `train_steps`;
    loss-scaled under float16; with a moving average of the weights if hparams.ema_momentum > 0.

    Keras' fit scales the loss itself; a custom train step under mixed precision must call
    get_scaled_loss / get_unscaled_gradients.
    """
    averaging = dict(use_ema=hparams.ema_momentum > 0,
                     ema_momentum=hparams.ema_momentum or 0.99)  # Keras wants a valid value
    if hparams.optimizer == "rmsprop":  # the seeds' recipe: Keras defaults, no schedule
        optimizer = keras.optimizers.RMSprop(**averaging)
    else:
        optimizer = keras.optimizers.Adam(
            learning_rate=learning_rate_schedule(hparams, train_steps, steps_before, moments),
            beta_1=hparams.adam_beta_1, beta_2=hparams.adam_beta_2, epsilon=hparams.adam_epsilon,
            **averaging)
    if hparams.precision == "mixed_float16":  # bfloat16 has float32's range: no scaling
        optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
    return optimizer

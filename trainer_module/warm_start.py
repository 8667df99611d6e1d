"""Training that continues from a served model (`nmt run --warm-start`): what an exported model
records about its training, and how a new Trainer takes its weights and recipe.

Every export carries `assets.extra/nmt_training.json` (TF Serving ignores assets.extra): the
HParams it trained with, its own steps and the total behind it (its base's total plus its own),
and Transform's settings, so a later run can tell whether it can reuse the vocabulary, and
the kind of machine it trained on and the precision `auto` chose there, which a run on the
same kind reuses. Beside it, `assets.extra/nmt_training_state/`: the weights and the
optimizer's moments where the cooldown began (callbacks.TrainingState), which a warm start
goes on from (hparams.continued_from "state"). Without it (a model exported before, or
"served") the weights come from the SavedModel's own variables
(`export.Translator.model_variables`), exactly what a model server serves.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import tensorflow as tf
import tf_keras as keras

from trainer_module import hparams as hparams_lib
from trainer_module.settings import TRAINING_RECORD, TRAINING_STATE

_VARIABLE_KEY = "model_variables/{}/.ATTRIBUTES/VARIABLE_VALUE"  # export.Translator's list
# The fields that make the network's shape (and its vocabulary's): a warm start keeps them.
ARCHITECTURE = ("num_layers", "num_decoder_layers", "d_model", "num_heads", "dff",
                "tie_output_to_embedding", "positions", "source_vocab_size",
                "target_vocab_size", "shared_embeddings")
# What a warm-started run decides anew: its own length, and what depends on the machine it
# runs on (precision, XLA, memory for the cache, checkpoints).
_DECIDED_PER_RUN = ("train_steps", "train_minutes", "adapt_recipe", "precision",
                    "checkpoint_every", "use_xla", "cache_megabytes", "keep_checkpoints",
                    "decode_precision")


# Transform's settings that decide a SentencePiece vocabulary's pieces and what its ids mean.
TOKENIZATION = ("tokenizer", "vocab_size", "joint_vocabulary", "whole_numbers",
                "split_elisions")


class WarmStartError(ValueError):
    """The base model cannot be continued; the message says why, in one sentence."""


@dataclasses.dataclass(frozen=True)
class TrainingRecord:
    """What `assets.extra/nmt_training.json` says about one exported model."""
    hparams: dict[str, Any]
    train_steps: int  # this model's own training
    total_train_steps: int  # its base's total plus its own
    transform: dict[str, Any]  # Transform's settings (its vocabulary)
    # devices.machine_kind of the machine it trained on (empty in records from before)
    machine: dict[str, Any] = dataclasses.field(default_factory=dict)
    # The precision `auto` chose for it on that machine; empty when the user set its precision
    # (a choice the probe might not make) or in records from before.
    auto_precision: str = ""
    # The learning-rate schedule's steps behind the training state saved beside the model
    # (TRAINING_STATE): its base's and its own up to its cooldown. 0: none saved.
    schedule_steps: int = 0

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True)


def write_record(export_dir: str, record: TrainingRecord) -> None:
    path = os.path.join(export_dir, TRAINING_RECORD)
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(record.to_json())


def read_record(model_dir: str) -> TrainingRecord | None:
    """The record of the SavedModel in `model_dir`, or None for one exported before records
    existed."""
    path = os.path.join(model_dir, TRAINING_RECORD)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        return TrainingRecord(**json.load(f))


def base_record(model_dir: str) -> TrainingRecord:
    """The record of a base model, or a WarmStartError saying what is missing."""
    record = read_record(model_dir)
    if record is None:
        raise WarmStartError(
            f"The served model {model_dir} has no {TRAINING_RECORD} (it was exported before "
            "warm starts existed), so its recipe is unknown: train one without --warm-start "
            "first.")
    return record


def tokenization_changes(theirs: dict[str, Any], mine: dict[str, Any]) -> list[str]:
    """The tokenization settings in which `mine` differs from a base's `theirs`, in words."""
    return [f"{name} {mine.get(name)} (the base's: {theirs.get(name)})" for name in TOKENIZATION
            if theirs.get(name) != mine.get(name)]


def shape_changes(base: TrainingRecord, overrides: dict[str, Any]) -> str | None:
    """What the `--hparam` overrides would change of the base's shape, in words, or None."""
    changed = {name: (base.hparams[name], value) for name, value in overrides.items()
               if name in ARCHITECTURE and base.hparams.get(name) != value}
    if not changed:
        return None
    return "--hparam cannot change the warm-started model's shape: " + ", ".join(
        f"{name}={value} (the base has {old})" for name, (old, value) in sorted(changed.items()))


def continued_hparams(base: TrainingRecord, run: hparams_lib.HParams,
                      overrides: dict[str, Any]) -> hparams_lib.HParams:
    """The base's recipe with this run's length and what depends on its machine
    (`_DECIDED_PER_RUN`), the user's overrides winning, except over the architecture, which
    the base's weights fix.

    The shuffling seed moves on by the steps behind the base: with the base's seed the run
    would replay the base's order of the training pairs from its first batch, where a run
    from scratch as long as the chain goes on to new orders."""
    changed = shape_changes(base, overrides)
    if changed:
        raise WarmStartError(f"{changed}; drop it, or train without --warm-start.")
    known = {field.name for field in dataclasses.fields(hparams_lib.HParams)}
    kept = {name: value for name, value in base.hparams.items()
            if name in known and name not in _DECIDED_PER_RUN}
    continued = dataclasses.replace(dataclasses.replace(run, **kept), adapt_recipe=False,
                                    **{k: v for k, v in overrides.items() if k != "precision"})
    return dataclasses.replace(continued, seed=continued.seed + base.total_train_steps)


def known_precision(base: TrainingRecord, machine: dict[str, Any]) -> str | None:
    """The precision `auto` chose for the base, if this run's precision probe would only repeat
    it: the base trained on this kind of machine (`machine`, devices.machine_kind). None:
    decide anew (another machine, a precision the user set for the base, or a record from
    before records named them). A precision the user sets for this run wins over it
    (budget.make_plan takes it for `auto` only)."""
    if not base.machine or base.machine != machine or \
            base.auto_precision not in hparams_lib.TRAINING_PRECISIONS:
        return None
    return base.auto_precision


def restore_weights(model: keras.Model, model_dir: str) -> None:
    """Sets `model`'s variables to those of the SavedModel in `model_dir` (same architecture:
    the same variables in the same order)."""
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "variables", "variables"))
    shapes = reader.get_variable_to_shape_map()
    saved = sum(1 for key in shapes if key.startswith("model_variables/"))
    if saved != len(model.weights):
        raise WarmStartError(f"The base model in {model_dir} has {saved} weight tensors, this "
                             f"model {len(model.weights)}: not the same architecture.")
    values = []
    for index, variable in enumerate(model.weights):
        key = _VARIABLE_KEY.format(index)
        if list(shapes[key]) != variable.shape.as_list():
            raise WarmStartError(f"The base model's weight {index} has shape {shapes[key]}, "
                                 f"this model's {variable.name} {variable.shape.as_list()}.")
        values.append(reader.get_tensor(key))
    model.set_weights(values)
    # A moving average of the weights (hparams.ema_momentum) starts from them, not from the
    # random weights the optimizer saw when it was built.
    optimizer = getattr(model.optimizer, "inner_optimizer", model.optimizer)
    for average, weight in zip(getattr(optimizer, "_model_variables_moving_average", ()),
                               model.trainable_variables):
        average.assign(weight)


def has_training_state(base: TrainingRecord, model_dir: str) -> bool:
    """Whether `model_dir` holds the training state its record names."""
    return bool(base.schedule_steps) and tf.train.latest_checkpoint(
        os.path.join(model_dir, TRAINING_STATE)) is not None


def training_state(model: keras.Model) -> tf.train.Checkpoint:
    """What a training state holds, saved (callbacks.TrainingState) and restored alike: the
    model's weights and its optimizer (moments, step count, moving average if any)."""
    return tf.train.Checkpoint(model=model, optimizer=model.optimizer)


def restore_training_state(model: keras.Model, model_dir: str) -> None:
    """Sets `model`'s weights and its optimizer's moments to the training state saved in
    `model_dir` (same architecture and optimizer), and the optimizer's step count to 0: this
    run's steps count from there, and the schedule knows the steps behind them
    (TrainingRecord.schedule_steps). Adam's bias correction restarts with the count: over
    its first ~200 steps it scales the updates by 0.66-1.41 (beta_1 0.9, beta_2 0.98), where a
    run with empty moments rises from zero."""
    path = tf.train.latest_checkpoint(os.path.join(model_dir, TRAINING_STATE))
    try:
        training_state(model).restore(path).assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as error:
        raise WarmStartError(f"The training state saved with {model_dir} does not fit this "
                             f"model ({str(error).splitlines()[0]}); train with --hparam "
                             "continued_from=served, or without --warm-start.") from error
    model.optimizer.iterations.assign(0)

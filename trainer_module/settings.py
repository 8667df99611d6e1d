"""The Trainer's settings: its custom_config as one checked object, built by `nmt run`, by the
Kubeflow compile and by a run's `--param trainer_config`, and read by `run_fn`.

The profile (hparams.PROFILES) implies everything else, the Evaluator's BLEU threshold
included; the other fields override it. The Evaluator's threshold is compiled into the pipeline,
so a run may not switch the Trainer to another profile than the one that threshold came from.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from trainer_module import hparams as hparams_lib


# The files run_fn writes into its ModelRun artifact (`nmt metadata` and `nmt report` read them).
HISTORY_FILE = "history.json"  # metrics and training seconds at each checkpoint
HPARAMS_FILE = "hparams.json"  # the HParams trained, train_steps the realized count
# Inside the exported SavedModel (TF Serving ignores assets.extra): what trained it, for a
# later warm start and `nmt metadata models` (trainer_module/warm_start.py).
TRAINING_RECORD = "assets.extra/nmt_training.json"
# Beside it: the training state a warm start goes on from, a checkpoint of the weights and the
# optimizer's moments taken where the cooldown began (callbacks.TrainingState).
TRAINING_STATE = "assets.extra/nmt_training_state"


class SettingsError(ValueError):
    """A Trainer setting is unknown or out of range; the message says which, in one line."""


@dataclasses.dataclass(frozen=True)
class TrainerSettings:
    """The Trainer's custom_config (same keys). None: the profile's value."""

    profile: str = "cpu"
    train_minutes: float | None = None  # time budget; TrainArgs.num_steps > 0 trains exactly
    precision: str | None = None  # one of hparams.PRECISIONS
    hparams: dict[str, Any] = dataclasses.field(default_factory=dict)  # field -> value
    min_bleu: float | None = None  # the Evaluator blesses a model with at least this BLEU
    # The profile whose threshold the Evaluator was built with (set when compiling).
    gate_profile: str | None = None
    checkpoint_root: str | None = None  # default: inside the Trainer's own output
    code_version: str | None = None  # the Trainer code's fingerprint: new code, new execution
    # Transform's settings, recorded with the exported model so that a warm start can tell
    # whether it may keep that model's vocabulary (trainer_module/warm_start.py).
    transform: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            hparams_lib.get_profile(self.profile)
            for name, value in self.hparams.items():
                hparams_lib.parse_override(f"{name}={value}")
        except ValueError as err:
            raise SettingsError(str(err)) from None
        if self.precision is not None and self.precision not in hparams_lib.PRECISIONS:
            raise SettingsError(f"precision must be one of {', '.join(hparams_lib.PRECISIONS)}, "
                                f"got {self.precision!r}")
        if self.train_minutes is not None and self.train_minutes <= 0:
            raise SettingsError(f"train_minutes must be > 0, got {self.train_minutes}")
        gate = self.gate_profile
        if gate is not None and gate != self.profile and self.min_bleu is None:
            raise SettingsError(
                f"trainer_config asks for profile {self.profile!r}, but this pipeline's "
                f"Evaluator was built to bless by profile {gate!r}'s threshold (BLEU >= "
                f"{hparams_lib.get_profile(gate).min_bleu:g}); compile it again with "
                f"--profile {self.profile} (or give min_bleu too)")

    @classmethod
    def from_config(cls, custom_config: dict[str, Any] | None) -> TrainerSettings:
        """Known keys of a custom_config (others, e.g. Vertex AI's, are not settings)."""
        names = {field.name for field in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in (custom_config or {}).items() if k in names})

    def to_config(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def bleu_threshold(self) -> float:
        """The Evaluator's threshold: min_bleu, else the profile's."""
        return hparams_lib.get_profile(self.profile).min_bleu if self.min_bleu is None \
            else self.min_bleu

    def overrides(self) -> dict[str, Any]:
        """The HParams fields set here, typed (precision included), which win over the plan
        a time budget makes."""
        given = {**({"precision": self.precision} if self.precision else {}), **self.hparams}
        return dict(hparams_lib.parse_override(f"{name}={value}")
                    for name, value in given.items())

    def hparams_for(self, train_steps: int = 0, overridden: bool = True) -> hparams_lib.HParams:
        """The profile with exactly `train_steps` (0: its or this time budget) and, if
        `overridden`, the overrides; vocabulary sizes still unset."""
        hparams = hparams_lib.get_profile(self.profile)
        if train_steps:
            hparams = dataclasses.replace(
                hparams, train_steps=train_steps, train_minutes=0.0,
                checkpoint_every=min(hparams.checkpoint_every, train_steps))
        elif self.train_minutes:
            hparams = dataclasses.replace(hparams, train_minutes=float(self.train_minutes))
        return dataclasses.replace(hparams, **self.overrides()) if overridden else hparams

"""`nmt run --warm-start`: which served model a run builds on, decided before anything runs.

The newest version under the serving directory (only blessed models get there) is the base.
It can be continued only if this run would tokenize as it did (the same SentencePiece
settings: Transform keeps its vocabulary, so every id keeps meaning the same piece) and build
the same shape of model. The version is fixed here, so that ServedModel's execution is a cache
hit exactly while nothing new is served.
"""
from __future__ import annotations

import dataclasses
import logging
import os

from components.serving_versions import pushed_versions
from pipeline.config import PipelineConfig
from trainer_module import warm_start as training

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Base:
    version: int
    record: training.TrainingRecord | None  # None: exported before records existed


def newest_base(serving_dir: str) -> Base | None:
    """The newest served version and its training record (None: nothing served yet)."""
    versions = pushed_versions(serving_dir)
    if not versions:
        return None
    return Base(versions[-1], training.read_record(os.path.join(serving_dir, str(versions[-1]))))


def why_not(base: Base, config: PipelineConfig) -> str | None:
    """Why this run cannot continue `base`, in words, or None if it can."""
    if base.record is None:
        return (f"it has no {training.TRAINING_RECORD} (exported before warm starts existed), "
                "so its recipe is unknown")
    if config.tokenizer != "sentencepiece":
        return (f"this run's tokenizer is {config.tokenizer}, and only a SentencePiece "
                "vocabulary is kept")
    changed = training.tokenization_changes(base.record.transform, config.vocabulary_settings)
    if changed:
        return "this run's " + ", ".join(changed) + " would give other pieces"
    return training.shape_changes(base.record, config.trainer_settings.overrides())


def plan(config: PipelineConfig, fresh_if_incompatible: bool) -> PipelineConfig:
    """`config` set to continue the newest served model (with nothing served, to continue
    none: the first model of a chain), or unchanged (a fresh start without warm start),
    saying which in one line; a base this run cannot continue is an error unless
    `fresh_if_incompatible`."""
    base = newest_base(config.serving_dir)
    if base is None:
        _LOG.info("Warm start: nothing is served under %s yet, so this run trains from "
                  "scratch.", config.serving_dir)
        return dataclasses.replace(config, warm_start=True, warm_start_version=0)
    reason = why_not(base, config)
    if reason and not fresh_if_incompatible:
        raise training.WarmStartError(
            f"Cannot warm-start from served version {base.version}: {reason}; run with the "
            "base's settings, or add --fresh-if-incompatible to train from scratch.")
    if reason:
        _LOG.info("Warm start: served version %d cannot be continued (%s), so this run trains "
                  "from scratch (--fresh-if-incompatible).", base.version, reason)
        return config
    _LOG.info("Warm start: training continues from served version %d (%s training steps "
              "behind it), its vocabulary kept.", base.version,
              f"{base.record.total_train_steps:,}")
    return dataclasses.replace(config, warm_start=True, warm_start_version=base.version)

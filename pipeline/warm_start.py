"""`nmt run --warm-start`: which served model a run builds on, decided before anything runs.

The newest version under the serving directory (only blessed models get there) is the base.
It can be continued only if this run would tokenize as it did: the same SentencePiece
settings, so that Transform can keep its vocabulary and every id keeps meaning the same piece.
The vocabulary is copied to `<pipeline root>/vocabularies/<content hash>/`: the same path for
every model of a chain (they all keep it), so Transform's execution on unchanged data is a cache
hit, and it stays readable after the serving directory drops old versions.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import uuid

from tfx.dsl.io import fileio

from components.serving_versions import pushed_versions
from pipeline.config import PipelineConfig
from trainer_module import hparams as hparams_lib
from trainer_module import warm_start as training

_LOG = logging.getLogger(__name__)

# Transform's settings that decide a SentencePiece vocabulary's pieces and what its ids mean.
_TOKENIZATION = ("tokenizer", "vocab_size", "joint_vocabulary", "whole_numbers",
                 "split_elisions")


@dataclasses.dataclass(frozen=True)
class Base:
    version: int
    path: str
    record: training.TrainingRecord | None  # None: exported before records existed


def newest_base(serving_dir: str) -> Base | None:
    """The newest served version and its training record (None: nothing served yet)."""
    versions = pushed_versions(serving_dir)
    if not versions:
        return None
    path = os.path.join(serving_dir, str(versions[-1]))
    return Base(versions[-1], path, training.read_record(path))


def why_not(base: Base, config: PipelineConfig) -> str | None:
    """Why this run cannot continue `base`, in words, or None if it can."""
    if base.record is None:
        return (f"it has no {training.TRAINING_RECORD} (exported before warm starts existed), "
                "so its recipe is unknown")
    if config.tokenizer != "sentencepiece":
        return (f"this run's tokenizer is {config.tokenizer}, and only a SentencePiece "
                "vocabulary is kept")
    theirs, mine = base.record.transform, config.vocabulary_settings
    changed = [f"{name} {mine[name]} (the base's: {theirs.get(name)})" for name in _TOKENIZATION
               if theirs.get(name) != mine[name]]
    if changed:
        return "this run's " + ", ".join(changed) + " would give other pieces"
    try:
        training.continued_hparams(base.record, hparams_lib.get_profile(config.profile),
                                   config.trainer_settings.overrides())
    except training.WarmStartError as err:
        return str(err).rstrip(".")
    return None


def keep_vocabulary(base: Base, pipeline_root: str) -> str:
    """A copy of the base's vocabulary files (its SavedModel's assets) under the pipeline
    root, named by their content."""
    assets = os.path.join(base.path, "assets")
    names = sorted(fileio.listdir(assets))
    digest = hashlib.sha256()
    for name in names:
        with fileio.open(os.path.join(assets, name), "rb") as f:
            digest.update(name.encode() + b"\0" + f.read())
    kept = os.path.join(pipeline_root, "vocabularies", digest.hexdigest()[:16])
    if not fileio.exists(kept):
        staging = f"{kept}.partial-{uuid.uuid4().hex[:8]}"  # concurrent runs copy apart
        fileio.makedirs(staging)
        for name in names:
            fileio.copy(os.path.join(assets, name), os.path.join(staging, name), overwrite=True)
        try:
            fileio.rename(staging, kept)
        except OSError:  # another run kept the same files first
            fileio.rmtree(staging)
    return kept


def plan(config: PipelineConfig, fresh_if_incompatible: bool) -> PipelineConfig:
    """`config` set to continue the newest served model, or unchanged (a fresh start), saying
    which in one line; a base this run cannot continue is an error unless
    `fresh_if_incompatible`."""
    base = newest_base(config.serving_dir)
    if base is None:
        _LOG.info("Warm start: nothing is served under %s yet, so this run trains from "
                  "scratch.", config.serving_dir)
        return config
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
    return dataclasses.replace(config, warm_start_version=base.version,
                               base_vocabulary=keep_vocabulary(base, config.pipeline_root))

"""Where the benchmarks find a pipeline run's outputs (the newest execution's of each
component under a pipeline root), and the profile sized to its vocabularies."""
from __future__ import annotations

import argparse
import glob
import os
from typing import NamedTuple

import tensorflow_transform as tft

from trainer_module import hparams as hparams_lib
from trainer_module.task import with_vocabularies


def latest(pattern: str) -> str:
    """The match of `pattern` whose last path part (an execution id) is the largest."""
    return max(glob.glob(pattern), key=lambda p: int(p.rstrip("/").split("/")[-1]))


def latest_transform(pipeline_root: str) -> tuple[tft.TFTransformOutput, str]:
    """The newest Transform output under `pipeline_root`, and its training files' pattern."""
    transform_dir = latest(os.path.join(pipeline_root, "Transform", "transform_graph", "*"))
    examples = latest(os.path.join(pipeline_root, "Transform", "transformed_examples", "*"))
    return tft.TFTransformOutput(transform_dir), os.path.join(examples, "Split-train", "*")


def profile_hparams(profile: str, output: tft.TFTransformOutput) -> hparams_lib.HParams:
    """A profile's hyperparameters with the vocabulary sizes of a Transform output."""
    return with_vocabularies(hparams_lib.get_profile(profile), output)


class TrainingSetup(NamedTuple):
    args: argparse.Namespace
    output: tft.TFTransformOutput
    train_files: str  # a file pattern
    hparams: hparams_lib.HParams


def parse_training_args(parser: argparse.ArgumentParser) -> TrainingSetup:
    """Adds --pipeline-root and --profile to a training benchmark's own arguments, parses
    them, and finds what it trains on: the newest Transform output and the sized profile."""
    parser.add_argument("--pipeline-root", required=True,
                        help="a pipeline root whose newest Transform output is trained on")
    parser.add_argument("--profile", default="cpu", help="the hparams profile (default: cpu)")
    args = parser.parse_args()
    output, train_files = latest_transform(args.pipeline_root)
    return TrainingSetup(args, output, train_files, profile_hparams(args.profile, output))

"""One configuration object for a pipeline run; the CLI builds it from flags."""
from __future__ import annotations

import dataclasses
import os
from typing import Any

from components.fra_example_gen import parser
from pipeline.code_version import code_version
from schemas import SCHEMA_FILE
from trainer_module.settings import TrainerSettings
from transform_module.tokens import (DEFAULT_FREQUENCY_THRESHOLD, DEFAULT_JOINT_VOCABULARY,
                                     DEFAULT_SPLIT_ELISIONS, DEFAULT_VOCAB_SIZE,
                                     DEFAULT_TOKENIZER, DEFAULT_WHOLE_NUMBERS,
                                     DEFAULT_WORDPIECE_MAX_WORDS, DEFAULT_WORDPIECE_MIN_COUNT)

PIPELINE_NAME = "nmt-fra-eng"
# Each component's entry module (its code fingerprint starts there: pipeline/code_version.py).
TRANSFORM_MODULE = "transform_module.preprocessing"
TRAINER_MODULE = "trainer_module.task"
PIPELINE_ROOT_ENV = "NMT_PIPELINE_ROOT"
# In-process Beam is the fastest on a small machine; pass --beam-arg to go elsewhere
# (e.g. --runner=DataflowRunner, FlinkRunner, SparkRunner, --direct_num_workers=0).
DEFAULT_BEAM_ARGS = ("--direct_running_mode=in_memory", "--direct_num_workers=1")


# The Evaluator blesses a model with at least its profile's BLEU (HParams.min_bleu), and no
# more than this many BLEU/chrF points below the latest blessed model.
DEFAULT_MAX_METRIC_DROP = 1.0


def split_data_path(path: str) -> tuple[str, str]:
    """'/d/fra.txt' -> ('/d', 'fra.txt'); 'gs://b/x/*/part-*.gz' -> ('gs://b/x', '*/part-*.gz')."""
    wildcard = min((path.index(c) for c in "*?[" if c in path), default=len(path))
    cut = path.rfind("/", 0, wildcard)
    if cut < 0:  # a bare file name or pattern: the working directory
        return ".", path
    return path[:cut] or "/", path[cut + 1:]


def default_pipeline_root() -> str:
    """Under the user's working directory (or $NMT_PIPELINE_ROOT), never inside the package."""
    return os.environ.get(PIPELINE_ROOT_ENV) or os.path.join(os.getcwd(), "nmt_runs")


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    data_path: str
    pipeline_name: str = PIPELINE_NAME
    pipeline_root: str = dataclasses.field(default_factory=default_pipeline_root)
    schema_file: str = SCHEMA_FILE
    split_percentages: tuple[float, float, float] = (80, 10, 10)
    max_line_bytes: int = parser.DEFAULT_MAX_LINE_BYTES
    max_references: int = parser.DEFAULT_MAX_REFERENCES  # French per English sentence
    newest_spans: int = 1  # of a data_path with {SPAN}: how many of the newest spans to read
    profile: str = "cpu"  # hyperparameters by name: trainer_module.hparams.PROFILES
    tokenizer: str = DEFAULT_TOKENIZER  # "wordpiece", "sentencepiece" (subwords) or "word"
    vocab_size: int = DEFAULT_VOCAB_SIZE  # pieces (or words) per language
    vocab_frequency_threshold: int = DEFAULT_FREQUENCY_THRESHOLD  # word tokenizer only
    whole_numbers: bool = DEFAULT_WHOLE_NUMBERS  # 3,50 / 5:30 stay one word (else "3, 50")
    split_elisions: bool = DEFAULT_SPLIT_ELISIONS  # French l'homme -> l' homme
    joint_vocabulary: bool = DEFAULT_JOINT_VOCABULARY  # one vocabulary, tied embeddings
    wordpiece_min_count: int = DEFAULT_WORDPIECE_MIN_COUNT  # rarer pieces are not learned
    wordpiece_max_words: int = DEFAULT_WORDPIECE_MAX_WORDS  # the learner's input, most frequent
    train_steps: int | None = None  # exactly this many steps (None: the profile's budget)
    train_minutes: float | None = None  # time budget (None: the profile's)
    precision: str | None = None  # None: the profile's (hparams.PRECISIONS)
    hparams: dict[str, Any] = dataclasses.field(default_factory=dict)  # profile overrides
    min_bleu: float | None = None  # None: the profile's
    max_metric_drop: float = DEFAULT_MAX_METRIC_DROP
    # Strings, or TFX placeholders resolved when a component runs (engines/flink.py's
    # endpoints, which must stay out of TFX's cache keys).
    beam_pipeline_args: tuple = DEFAULT_BEAM_ARGS
    enable_cache: bool = True
    compare_with_latest_blessed: bool = True  # False on open-source KFP (no resolver steps)
    # A warm start (pipeline/warm_start.py): the Trainer starts from a served version, whose
    # vocabulary Transform keeps. `nmt run` fixes which (warm_start_version); 0: the newest
    # when the run gets there (a compiled Kubeflow spec), or nothing served yet.
    warm_start: bool = False
    warm_start_version: int = 0

    @property
    def data_root(self) -> str:
        """ExampleGen reads a directory plus a file pattern: the directory is the data path
        up to its last "/" before any wildcard (a runtime parameter on Kubeflow)."""
        return split_data_path(self.data_path)[0]

    @property
    def data_file_pattern(self) -> str:
        return split_data_path(self.data_path)[1]

    @property
    def metadata_path(self) -> str:
        return os.path.join(self.pipeline_root, "metadata.sqlite")

    @property
    def checkpoint_root(self) -> str:
        """Training checkpoints live outside any one execution, so a re-run can resume."""
        return os.path.join(self.pipeline_root, "checkpoints")

    @property
    def serving_dir(self) -> str:
        """Where Pusher publishes versions (TF Serving's layout) and `nmt translate` looks."""
        return os.path.join(self.pipeline_root, "serving", self.pipeline_name)

    @property
    def served_vocabulary(self) -> str:
        """Where a warm start's Transform finds the vocabulary it keeps: the base version's
        directory, so that Transform's cache key names it; the serving directory (its newest
        version when Transform runs) when the version is taken at run time (0: on Kubeflow,
        or nothing served yet)."""
        if self.warm_start_version:
            return os.path.join(self.serving_dir, str(self.warm_start_version))
        return self.serving_dir

    @property
    def vocabulary_settings(self) -> dict[str, Any]:
        """Transform's settings that decide the vocabulary and what its ids mean: a served
        model's vocabulary is kept only by a run with the same ones (pipeline/warm_start.py)."""
        return {"tokenizer": self.tokenizer, "vocab_size": self.vocab_size,
                "frequency_threshold": self.vocab_frequency_threshold,
                "whole_numbers": self.whole_numbers, "split_elisions": self.split_elisions,
                "joint_vocabulary": self.joint_vocabulary,
                "wordpiece_min_count": self.wordpiece_min_count,
                "wordpiece_max_words": self.wordpiece_max_words}

    @property
    def trainer_settings(self) -> TrainerSettings:
        """The Trainer's custom_config; the Evaluator's threshold is bound to its profile."""
        return TrainerSettings(
            profile=self.profile, train_minutes=self.train_minutes, precision=self.precision,
            hparams=dict(self.hparams), min_bleu=self.min_bleu, gate_profile=self.profile,
            checkpoint_root=self.checkpoint_root, code_version=code_version(TRAINER_MODULE),
            transform=self.vocabulary_settings)


def pipeline_arguments(config: PipelineConfig) -> dict[str, Any]:
    """create_pipeline's arguments for a config: the one list every runner starts from."""
    from tfx.proto import trainer_pb2  # heavy: not for `nmt metadata` and friends

    trainer = config.trainer_settings
    return dict(
        pipeline_name=config.pipeline_name,
        pipeline_root=config.pipeline_root,
        data_root=config.data_root,
        data_file_pattern=config.data_file_pattern,
        schema_file=config.schema_file,
        split_percentages=config.split_percentages,
        max_line_bytes=config.max_line_bytes,
        max_references=config.max_references,
        newest_spans=config.newest_spans,
        transform_config={**config.vocabulary_settings,
                          **({"served_vocabulary": config.served_vocabulary}
                             if config.warm_start else {}),
                          "code_version": code_version(TRANSFORM_MODULE)},
        train_args=trainer_pb2.TrainArgs(num_steps=config.train_steps or 0),  # 0: the profile's
        trainer_config=trainer.to_config(),
        min_bleu=trainer.bleu_threshold,
        max_metric_drop=config.max_metric_drop,
        serving_dir=config.serving_dir,
        beam_pipeline_args=config.beam_pipeline_args,
        compare_with_latest_blessed=config.compare_with_latest_blessed,
        warm_start_version=config.warm_start_version if config.warm_start else None,
        enable_cache=config.enable_cache,
    )

"""The pipeline, wired as in the diagram; runners (local, Kubeflow) only supply settings."""
from __future__ import annotations

from typing import Any, Sequence

from ml_metadata.proto import metadata_store_pb2
# The modules behind `tfx.v1`'s names: `from tfx import v1` also imports every extension,
# google-cloud-aiplatform among them, which adds ~5 s to each `nmt run` that never uses it.
from tfx.components import StatisticsGen, Trainer, Transform
from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen
from tfx.dsl.components.common.resolver import Resolver
from tfx.dsl.input_resolution.strategies.latest_blessed_model_strategy import \
    LatestBlessedModelStrategy
from tfx.orchestration.data_types import RuntimeParameter
from tfx.orchestration.pipeline import Pipeline
from tfx.proto import pusher_pb2, trainer_pb2
from tfx.types import Channel, standard_artifacts

from components.atomic_pusher import AtomicPusher
from components.fra_example_gen.component import FraTxtExampleGen
from components.served_model import ServedModel
from components.strict_example_validator import StrictExampleValidator
from pipeline.config import TRAINER_MODULE, TRANSFORM_MODULE
from pipeline.eval_config import make_evaluator
from pipeline.stats_options import make_stats_options

PREPROCESSING_FN = f"{TRANSFORM_MODULE}.preprocessing_fn"
RUN_FN = f"{TRAINER_MODULE}.run_fn"


def create_pipeline(
    pipeline_name: str,
    pipeline_root: str,
    data_root: str,
    data_file_pattern: str,
    schema_file: str,
    split_percentages: Sequence[float],
    max_line_bytes: int,
    max_references: int,
    transform_config: dict[str, Any],
    train_args: trainer_pb2.TrainArgs | RuntimeParameter,
    trainer_config: dict[str, Any] | RuntimeParameter,
    min_bleu: float,
    max_metric_drop: float,
    serving_dir: str,
    beam_pipeline_args: Sequence,  # strings or TFX placeholders (PipelineConfig)
    compare_with_latest_blessed: bool = True,
    warm_start_version: int | None = None,
    enable_cache: bool = True,
    metadata_connection_config: metadata_store_pb2.ConnectionConfig | None = None,
    newest_spans: int = 1,
) -> Pipeline:
    """fra.txt -> ExampleGen -> StatisticsGen -> schema -> ExampleValidator -> Transform
    -> Trainer -> Evaluator (against the latest blessed model) -> Pusher.

    With `warm_start_version` (0: the newest when the run gets there), the Trainer starts from
    that served version (ServedModel -> Trainer's base_model; Transform keeps its vocabulary,
    `transform_config`'s served_vocabulary).
    Without `compare_with_latest_blessed` there is no baseline Resolver (open-source KFP
    cannot run resolver steps) and the Evaluator blesses on the BLEU threshold alone.
    """
    example_gen = FraTxtExampleGen(input_base=data_root, file_pattern=data_file_pattern,
                                   split_percentages=split_percentages,
                                   max_line_bytes=max_line_bytes,
                                   max_references=max_references,
                                   newest_spans=newest_spans)
    statistics_gen = StatisticsGen(examples=example_gen.outputs["examples"],
                                   stats_options=make_stats_options())
    schema_gen = ImportSchemaGen(schema_file=schema_file)
    example_validator = StrictExampleValidator(statistics=statistics_gen.outputs["statistics"],
                                               schema=schema_gen.outputs["schema"])
    transform = Transform(
        examples=example_gen.outputs["examples"], schema=schema_gen.outputs["schema"],
        preprocessing_fn=PREPROCESSING_FN,
        custom_config=transform_config,
        disable_statistics=True)  # StatisticsGen has the raw data's; nothing reads Transform's
    transform.add_upstream_node(example_validator)  # never transform data that failed validation
    served_model = ServedModel(serving_dir=serving_dir, version=warm_start_version) \
        if warm_start_version is not None else None
    trainer = Trainer(
        run_fn=RUN_FN,
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        schema=schema_gen.outputs["schema"],
        base_model=served_model.outputs["model"] if served_model else None,
        train_args=train_args,
        eval_args=trainer_pb2.EvalArgs(num_steps=0),
        custom_config=trainer_config)
    latest_blessed_model = Resolver(
        strategy_class=LatestBlessedModelStrategy,
        model=Channel(type=standard_artifacts.Model),
        model_blessing=Channel(type=standard_artifacts.ModelBlessing),
    ).with_id("latest_blessed_model_resolver")
    evaluator = make_evaluator(
        examples=example_gen.outputs["examples"], model=trainer.outputs["model"],
        baseline_model=(latest_blessed_model.outputs["model"]
                        if compare_with_latest_blessed else None),
        min_bleu=min_bleu, max_drop=max_metric_drop)
    pusher = AtomicPusher(
        model=trainer.outputs["model"], model_blessing=evaluator.outputs["blessing"],
        push_destination=pusher_pb2.PushDestination(
            filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=serving_dir)))
    return Pipeline(
        pipeline_name=pipeline_name,
        pipeline_root=pipeline_root,
        components=[example_gen, statistics_gen, schema_gen, example_validator, transform,
                    *([served_model] if served_model else []), trainer,
                    *([latest_blessed_model] if compare_with_latest_blessed else []),
                    evaluator, pusher],
        enable_cache=enable_cache,
        metadata_connection_config=metadata_connection_config,
        beam_pipeline_args=list(beam_pipeline_args),
    )

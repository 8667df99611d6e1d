"""Compiles the pipeline for Kubeflow Pipelines: TFX's KubeflowV2DagRunner, a KFP v2 YAML spec.

The same `create_pipeline` as the local runner, with three differences: values a scheduled run
may change are runtime parameters, there is no metadata connection (KFP brings its own ML
Metadata), and the Trainer's container can ask for GPUs, CPU and memory.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Iterable, Mapping

import yaml
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from tfx import v1 as tfx

from pipeline.config import PipelineConfig, pipeline_arguments
from pipeline.pipeline import create_pipeline

ResourceSpec = pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec.ResourceSpec

# The Dockerfile copies schemas/schema.pbtxt here: the path compiled into the spec must exist
# in the container, not on the machine that compiles.
IMAGE_SCHEMA_FILE = "/pipeline/schema.pbtxt"
TRAINER_ID = "Trainer"
# The Kubernetes resource name KFP puts in the pod's limits; Vertex AI wants e.g. NVIDIA_TESLA_T4.
DEFAULT_GPU_TYPE = "nvidia.com/gpu"


class ComponentNotFoundError(ValueError):
    """Resources were asked for a component the pipeline does not have."""


@dataclasses.dataclass(frozen=True)
class Resources:
    """What one component's container asks for; None or 0: the cluster's default."""
    gpus: int = 0
    gpu_type: str = DEFAULT_GPU_TYPE
    cpu_millicores: int | None = None
    memory_bytes: int | None = None

    def to_proto(self) -> ResourceSpec | None:
        """Limits (Kubernetes requests the same). Newer KFP backends read the resource_*
        strings, older ones the numeric fields: both are set, as the KFP SDK's compiler does."""
        if not (self.gpus or self.cpu_millicores or self.memory_bytes):
            return None
        spec = ResourceSpec()
        if self.cpu_millicores:
            spec.resource_cpu_limit = f"{self.cpu_millicores}m"
            spec.cpu_limit = self.cpu_millicores / 1000
        if self.memory_bytes:
            spec.resource_memory_limit = str(self.memory_bytes)
            spec.memory_limit = self.memory_bytes / 1e9  # in GB
        if self.gpus:
            spec.accelerator.resource_type = spec.accelerator.type = self.gpu_type
            spec.accelerator.resource_count = str(self.gpus)
            spec.accelerator.count = self.gpus
        return spec


def runtime_parameters(config: PipelineConfig) -> dict[str, tfx.dsl.experimental.RuntimeParameter]:
    """create_pipeline arguments that each run may set (`--param NAME=VALUE`); the config's
    values are the defaults. Each name is both the argument and the KFP parameter.

    TFX takes a runtime parameter only for a whole component setting, so the Trainer's are
    JSON strings: train_args='{"num_steps": 5000}' (0: the profile's steps) and
    trainer_config='{"profile": "base", ...}' (the vocabulary stays the compiled one).
    """
    arguments = pipeline_arguments(config)
    return {
        "data_root": tfx.dsl.experimental.RuntimeParameter(
            name="data_root", ptype=str, default=config.data_root),
        "train_args": tfx.dsl.experimental.RuntimeParameter(
            name="train_args", ptype=str,
            default=json.dumps({"num_steps": arguments["train_args"].num_steps})),
        "trainer_config": tfx.dsl.experimental.RuntimeParameter(
            name="trainer_config", ptype=str,
            default=json.dumps(arguments["trainer_config"], sort_keys=True)),
    }


def build(config: PipelineConfig,
          parameters: Mapping[str, tfx.dsl.experimental.RuntimeParameter]) -> tfx.dsl.Pipeline:
    """The pipeline for KFP: runtime parameters where given; ML Metadata is KFP's."""
    return create_pipeline(**{**pipeline_arguments(config), **parameters,
                              "metadata_connection_config": None})


def set_resources(pipeline: tfx.dsl.Pipeline, component_id: str, resources: Resources) -> None:
    """Attaches the resources to that one component; KubeflowV2 puts them on its container."""
    spec = resources.to_proto()
    if spec is None:
        return
    by_id = {component.id: component for component in pipeline.components}
    if component_id not in by_id:
        raise ComponentNotFoundError(
            f"cannot give {component_id} its resources: pipeline "
            f"{pipeline.pipeline_info.pipeline_name} has no component {component_id!r} "
            f"(it has {', '.join(by_id)})")
    by_id[component_id].with_platform_config(spec)


def _complete(spec: pipeline_spec_pb2.PipelineSpec, pipeline_root: str,
              parameters: Iterable[tfx.dsl.experimental.RuntimeParameter]) -> None:
    """Adds what KubeflowV2DagRunner keeps only in the PipelineJob, which a YAML spec drops:
    the pipeline root (a run may override it) and the runtime parameters' defaults."""
    spec.default_pipeline_root = pipeline_root
    for parameter in parameters:
        definition = spec.root.input_definitions.parameters[parameter.name]
        json_format.ParseDict(parameter.default, definition.default_value)
        definition.is_optional = True


def compile_pipeline(config: PipelineConfig, image: str, output_path: str,
                     trainer_resources: Resources = Resources()) -> pipeline_spec_pb2.PipelineSpec:
    """Writes the KFP v2 PipelineSpec YAML that kfp.Client uploads, and returns it."""
    parameters = runtime_parameters(config)
    pipeline = build(config, parameters)
    set_resources(pipeline, TRAINER_ID, trainer_resources)
    # Schema 2.1 (typed parameterValues) is what KFP 2 backends and current Vertex AI run.
    runner = tfx.orchestration.experimental.KubeflowV2DagRunner(
        tfx.orchestration.experimental.KubeflowV2DagRunnerConfig(
            default_image=image, use_pipeline_spec_2_1=True))
    job = runner.run(pipeline, write_out=False)
    spec = json_format.ParseDict(job["pipelineSpec"], pipeline_spec_pb2.PipelineSpec())
    _complete(spec, config.pipeline_root, parameters.values())
    with open(output_path, "w", encoding="utf-8") as f:
        yaml.safe_dump(json_format.MessageToDict(spec), f, sort_keys=True)
    return spec

"""Compiles the pipeline for Kubeflow Pipelines: TFX's KubeflowV2DagRunner, a KFP v2 YAML spec.

The same `create_pipeline` as the local runner, with these differences: values a scheduled run
may change are runtime parameters; there is no metadata connection (KFP brings its own ML
Metadata); the Trainer's container can ask for GPUs, CPU and memory, the Beam components for
CPU and memory; on open-source KFP, ExampleGen is never cached (see `_complete`); on Vertex AI
the Trainer can run as a custom job over several machines (`VertexTraining`).
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable, Mapping

import yaml
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from tfx import v1 as tfx
from tfx.dsl.components.base import base_beam_executor, executor_spec

from pipeline.config import PipelineConfig, pipeline_arguments
from runners.kfp_client import check_storage
from pipeline.pipeline import create_pipeline

ResourceSpec = pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec.ResourceSpec

# The Dockerfile copies schemas/schema.pbtxt here: the path compiled into the spec must exist
# in the container, not on the machine that compiles.
IMAGE_SCHEMA_FILE = "/pipeline/schema.pbtxt"
TRAINER_ID = "Trainer"
EXAMPLE_GEN_ID = "FraTxtExampleGen"
TRANSFORM_ID = "Transform"
SERVED_MODEL_ID = "ServedModel"  # a warm start's base: the newest served version when it runs
# Every task container's command: TFX's entry point in a process that ends sooner.
TASK_COMMAND = ["python", "-m", "runners.kubeflow_task"]
# The Kubernetes resource name KFP puts in the pod's limits; Vertex AI wants e.g. NVIDIA_TESLA_T4.
DEFAULT_GPU_TYPE = "nvidia.com/gpu"
BACKENDS = ("kfp", "vertex")
# What each Beam component's container asks for by default: a starting point for DirectRunner
# in one process on the full fra.txt (Transform's word counts, the Evaluator's decoding);
# --beam-memory raises it if a pod is OOM-killed, and with Dataflow the pods do little.
DEFAULT_BEAM_CPU_MILLICORES = 2000
DEFAULT_BEAM_MEMORY_BYTES = 8 * 2**30


class ComponentNotFoundError(ValueError):
    """Resources were asked for a component the pipeline does not have."""


@dataclasses.dataclass(frozen=True)
class Resources:
    """What one component's container asks for; None or 0: the cluster's default.

    `limit` True: the sizes are limits (Kubernetes requests the same; Vertex AI picks the
    machine from them); False: requests only, so a pod may use more when the node has it.
    """
    gpus: int = 0
    gpu_type: str = DEFAULT_GPU_TYPE
    cpu_millicores: int | None = None
    memory_bytes: int | None = None
    limit: bool = True

    def to_proto(self) -> ResourceSpec | None:
        """Newer KFP backends read the resource_* strings, older ones the numeric fields:
        both are set, as the KFP SDK's compiler does."""
        if not (self.gpus or self.cpu_millicores or self.memory_bytes):
            return None
        spec = ResourceSpec()
        kind = "limit" if self.limit else "request"
        if self.cpu_millicores:
            setattr(spec, f"resource_cpu_{kind}", f"{self.cpu_millicores}m")
            setattr(spec, f"cpu_{kind}", self.cpu_millicores / 1000)
        if self.memory_bytes:
            setattr(spec, f"resource_memory_{kind}", str(self.memory_bytes))
            setattr(spec, f"memory_{kind}", self.memory_bytes / 1e9)  # in GB
        if self.gpus:
            spec.accelerator.resource_type = spec.accelerator.type = self.gpu_type
            spec.accelerator.resource_count = str(self.gpus)
            spec.accelerator.count = self.gpus
        return spec


@dataclasses.dataclass(frozen=True)
class VertexTraining:
    """The Trainer as a Vertex AI custom job on `workers` machines, through TFX's Google Cloud
    Trainer extension: the pipeline's Trainer task only submits the job and waits.

    Worker pool 0 is the chief, pool 1 the other workers; Vertex AI sets TF_CONFIG
    (cluster chief/worker) on each, from which trainer_module/devices.py builds
    MultiWorkerMirroredStrategy. Every machine runs the same image and run_fn.
    """
    workers: int
    project: str
    region: str
    machine_type: str
    gpus: int = 0
    gpu_type: str | None = None

    def custom_config(self, image: str) -> dict[str, Any]:
        """The keys the extension's executor reads from the Trainer's custom_config."""
        from tfx.extensions.google_cloud_ai_platform import constants
        from tfx.extensions.google_cloud_ai_platform.trainer import executor

        machine: dict[str, Any] = {"machine_type": self.machine_type}
        if self.gpus:
            machine.update(accelerator_type=self.gpu_type, accelerator_count=self.gpus)
        pools = [{"machine_spec": machine, "replica_count": count,
                  "container_spec": {"image_uri": image}}
                 for count in (1, self.workers - 1) if count]
        return {constants.ENABLE_VERTEX_KEY: True, constants.VERTEX_REGION_KEY: self.region,
                executor.TRAINING_ARGS_KEY: {"project": self.project,
                                             "worker_pool_specs": pools}}


def with_sdk_container_image(beam_args: Iterable[str], image: str) -> tuple[str, ...]:
    """Dataflow workers must run our image: its pickled functions need transform_module,
    components and tensorflow-text, which TFX's ephemeral package does not carry."""
    beam_args = tuple(beam_args)
    dataflow = any(arg in ("--runner=DataflowRunner", "--runner=dataflow") for arg in beam_args)
    if not dataflow or any(arg.startswith("--sdk_container_image") for arg in beam_args):
        return beam_args
    return (*beam_args, f"--sdk_container_image={image}")


def runtime_parameters(config: PipelineConfig, trainer_extra: Mapping[str, Any] | None = None
                       ) -> dict[str, tfx.dsl.experimental.RuntimeParameter]:
    """create_pipeline arguments that each run may set (`--param NAME=VALUE`); the config's
    values are the defaults. Each name is both the argument and the KFP parameter.

    TFX takes a runtime parameter only for a whole component setting, so the Trainer's are
    JSON strings: train_args='{"num_steps": 5000}' (0: the profile's time budget) and
    trainer_config='{"train_minutes": 60, ...}' (TrainerSettings; the vocabulary stays the
    compiled one; `nmt kubeflow submit` merges a partial one over this default). `trainer_extra`:
    more Trainer custom_config keys (VertexTraining's).
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
            default=json.dumps({**arguments["trainer_config"], **(trainer_extra or {})},
                               sort_keys=True)),
    }


def build(config: PipelineConfig,
          parameters: Mapping[str, tfx.dsl.experimental.RuntimeParameter]) -> tfx.dsl.Pipeline:
    """The pipeline for KFP: runtime parameters where given; ML Metadata is KFP's."""
    return create_pipeline(**{**pipeline_arguments(config), **parameters,
                              "metadata_connection_config": None})


def _component(pipeline: tfx.dsl.Pipeline, component_id: str, why: str) -> Any:
    by_id = {component.id: component for component in pipeline.components}
    if component_id not in by_id:
        raise ComponentNotFoundError(
            f"cannot give {component_id} {why}: pipeline "
            f"{pipeline.pipeline_info.pipeline_name} has no component {component_id!r} "
            f"(it has {', '.join(by_id)})")
    return by_id[component_id]


def set_resources(pipeline: tfx.dsl.Pipeline, component_id: str, resources: Resources) -> None:
    """Attaches the resources to that one component; KubeflowV2 puts them on its container."""
    spec = resources.to_proto()
    if spec is not None:
        _component(pipeline, component_id, "its resources").with_platform_config(spec)


def beam_component_ids(pipeline: tfx.dsl.Pipeline) -> list[str]:
    """The components whose executors run Beam pipelines (ExampleGen, StatisticsGen, ...)."""
    return [component.id for component in pipeline.components
            if issubclass(getattr(getattr(component, "executor_spec", None), "executor_class",
                                  object), base_beam_executor.BaseBeamExecutor)]


def train_on_vertex(pipeline: tfx.dsl.Pipeline) -> None:
    """The Trainer's executor becomes the Google Cloud Trainer extension's, which runs the
    same trainer executor (our run_fn) in a Vertex AI custom job (VertexTraining)."""
    from tfx.extensions.google_cloud_ai_platform.trainer import executor

    trainer = _component(pipeline, TRAINER_ID, "Vertex AI training")
    trainer.executor_spec = executor_spec.ExecutorClassSpec(executor.GenericExecutor)


def _set_beam_resources(spec: dict[str, Any], component_ids: Iterable[str],
                        resources: Resources) -> None:
    """Into the compiled spec, because TFX ignores platform_config for ExampleGen (its
    container is built by the file-based ExampleGen path)."""
    proto = resources.to_proto()
    if proto is None:
        return
    for component_id in component_ids:
        label = spec["components"][component_id]["executorLabel"]
        container = spec["deploymentSpec"]["executors"][label]["container"]
        container["resources"] = json_format.MessageToDict(proto)


def _complete(spec: pipeline_spec_pb2.PipelineSpec, pipeline_root: str,
              parameters: Iterable[tfx.dsl.experimental.RuntimeParameter], backend: str) -> None:
    """Adds what KubeflowV2DagRunner keeps only in the PipelineJob, which a YAML spec drops:
    the pipeline root (a run may override it) and the runtime parameters' defaults.

    On open-source KFP, ExampleGen's cache is turned off: TFX puts the input fingerprint in
    the ExampleGen driver (`lifecycle.preCacheCheck`), which only Vertex AI runs, and KFP's
    cache key (input artifacts, parameters, image, command) is the same every night, so a
    cached ExampleGen would never read a new fra.txt. Its output is then a new artifact each
    run, and KFP's cache keys downstream name their input artifacts: everything after it runs
    again too, and ImportSchemaGen alone stays cached.

    A warm start's ServedModel and Transform are never cached on either backend: they have
    the same inputs and parameters every run, but they must take the version served when they
    run, its weights and its vocabulary.
    """
    spec.default_pipeline_root = pipeline_root
    for parameter in parameters:
        definition = spec.root.input_definitions.parameters[parameter.name]
        json_format.ParseDict(parameter.default, definition.default_value)
        definition.is_optional = True
    if backend == "kfp":
        spec.root.dag.tasks[EXAMPLE_GEN_ID].caching_options.enable_cache = False
    if SERVED_MODEL_ID in spec.root.dag.tasks:
        for task in (SERVED_MODEL_ID, TRANSFORM_ID):
            spec.root.dag.tasks[task].caching_options.enable_cache = False


def compile_pipeline(config: PipelineConfig, image: str, output_path: str,
                     trainer_resources: Resources = Resources(), backend: str = "kfp",
                     beam_resources: Resources = Resources(
                         cpu_millicores=DEFAULT_BEAM_CPU_MILLICORES,
                         memory_bytes=DEFAULT_BEAM_MEMORY_BYTES, limit=False),
                     vertex_training: VertexTraining | None = None,
                     ) -> pipeline_spec_pb2.PipelineSpec:
    """Writes the KFP v2 PipelineSpec YAML that kfp.Client or Vertex AI runs, and returns it."""
    if backend not in BACKENDS:
        raise ValueError(f"backend is one of {BACKENDS}, got {backend!r}")
    if vertex_training and backend != "vertex":
        raise ValueError("Trainer worker pools are a Vertex AI custom job: backend vertex only")
    # (`nmt kubeflow` checks first, naming its flags)
    check_storage(("the pipeline root", config.pipeline_root), ("the data", config.data_path))
    config = dataclasses.replace(
        config, compare_with_latest_blessed=backend == "vertex",
        beam_pipeline_args=with_sdk_container_image(config.beam_pipeline_args, image))
    parameters = runtime_parameters(
        config, vertex_training.custom_config(image) if vertex_training else {})
    pipeline = build(config, parameters)
    if vertex_training:  # the resources are the worker pools' machines, not this container's
        train_on_vertex(pipeline)
    else:
        set_resources(pipeline, TRAINER_ID, trainer_resources)
    # Schema 2.1 (typed parameterValues) is what KFP 2 backends and current Vertex AI run.
    runner = tfx.orchestration.experimental.KubeflowV2DagRunner(
        tfx.orchestration.experimental.KubeflowV2DagRunnerConfig(
            default_image=image, default_commands=TASK_COMMAND, use_pipeline_spec_2_1=True))
    job = runner.run(pipeline, write_out=False)
    _set_beam_resources(job["pipelineSpec"], beam_component_ids(pipeline), beam_resources)
    spec = json_format.ParseDict(job["pipelineSpec"], pipeline_spec_pb2.PipelineSpec())
    _complete(spec, config.pipeline_root, parameters.values(), backend)
    with open(output_path, "w", encoding="utf-8") as f:
        yaml.safe_dump(json_format.MessageToDict(spec), f, sort_keys=True)
    return spec

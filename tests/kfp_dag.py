"""What the two KFP emulators in tests/ share: the order KFP runs a DAG's tasks in and KFP's
cache key. tests/kfp_launcher.py executes a compiled spec's tasks; tests/kfp_store.py writes
the ML Metadata store such a run leaves; both schedule and cache-key through this module.

- `upstream`/`ready`: a task starts once every task it waits for is done: its
  `dependentTasks` and the producers of its inputs (TFX does not list a resolver's producer
  among the dependent tasks). Ready tasks go in name order, so runs are reproducible.
- `cache_key`: kubeflow/pipelines backend/src/v2/cacheutils/cache.go GenerateCacheKey: the
  input artifact names, input parameter values, output artifact and parameter specs (no URIs),
  and the container's image and command with arguments, hashed.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Collection, Mapping

from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2 as pb


def upstream(task: pb.PipelineTaskSpec) -> set[str]:
    """The tasks `task` waits for."""
    return {*task.dependent_tasks,
            *(spec.task_output_artifact.producer_task for spec in task.inputs.artifacts.values()
              if spec.HasField("task_output_artifact")),
            *(spec.task_output_parameter.producer_task
              for spec in task.inputs.parameters.values()
              if spec.HasField("task_output_parameter"))}


def ready(tasks: Mapping[str, pb.PipelineTaskSpec], done: Collection[str],
          waiting: Collection[str]) -> list[str]:
    """Of the `waiting` tasks, those whose upstream tasks are all `done`, in name order."""
    return sorted(name for name in waiting if upstream(tasks[name]) <= set(done))


def run_order(tasks: Mapping[str, pb.PipelineTaskSpec]) -> list[str]:
    """Every task, one at a time: the first ready one (by name) next."""
    order: list[str] = []
    while len(order) < len(tasks):
        next_tasks = ready(tasks, order, set(tasks) - set(order))
        if not next_tasks:
            raise ValueError(f"tasks {sorted(set(tasks) - set(order))} depend on each other")
        order.append(next_tasks[0])
    return order


def cache_key(component: pb.ComponentSpec,
              container: pb.PipelineDeploymentConfig.PipelineContainerSpec,
              input_artifact_names: Mapping[str, list[str]],
              input_parameter_values: Mapping[str, Any]) -> str:
    """GenerateCacheKey's fields, hashed with sha256: the inputs as given (parameter values as
    JSON), the outputs as the driver provisions them from the component (URIs aside)."""
    outputs = component.output_definitions
    key = {
        "inputArtifactNames": input_artifact_names,
        "inputParameterValues": input_parameter_values,
        "outputArtifactsSpec": {
            name: {"name": name, "type": json_format.MessageToDict(spec.artifact_type),
                   "metadata": json_format.MessageToDict(spec.metadata)}
            for name, spec in outputs.artifacts.items()},
        "outputParametersSpec": {
            name: pb.ParameterType.ParameterTypeEnum.Name(spec.parameter_type)
            for name, spec in outputs.parameters.items()},
        "containerSpec": {"image": container.image,
                          "cmdArgs": [*container.command, *container.args]},
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()

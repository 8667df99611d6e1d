"""How the two writers of a store lay ML Metadata out. `graph.load_graph` reads either into one
graph (a `Layout` per writer, detected from the context types present; everything after the
read is shared):

- TFX's LocalDagRunner (`nmt run`): a "pipeline_run" context per run (named by the run id), a
  "node" context per component, executions typed by component class with their exec
  properties as custom properties.
- Kubeflow Pipelines v2 (this pipeline compiled by KubeflowV2DagRunner), whose driver and
  launcher write MLMD themselves (kubeflow/pipelines backend/src/v2/metadata/client.go):
  "system.PipelineRun" contexts under "system.Pipeline" ones, "system.ContainerExecution"s
  named by their task_name custom property with the input parameters (TFX's exec properties)
  in an "inputs" struct, artifacts typed by schema title ("tfx.Examples").
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import ml_metadata as mlmd
from ml_metadata.proto import metadata_store_pb2

from metadata.values import custom_properties

RUN_CONTEXT, PIPELINE_CONTEXT, NODE_CONTEXT = "pipeline_run", "pipeline", "node"
KFP_RUN_CONTEXT, KFP_PIPELINE_CONTEXT = "system.PipelineRun", "system.Pipeline"
# KFP executions that run a task; a system.DAGExecution is the run (or a sub-DAG) itself.
_KFP_TASKS = ("system.ContainerExecution", "system.ImporterExecution")
_KFP_TYPE_PREFIX = "tfx."  # KubeflowV2DagRunner titles artifact schemas "tfx.<type>"
# TFX artifact properties (of the types this pipeline outputs) that KFP keeps as custom ones.
_TFX_PROPERTIES = frozenset({"span", "version", "split_names"})
_TFX_CUSTOM_PREFIX = "custom:"  # tfx.types.artifact.CUSTOM_PROPERTIES_PREFIX
_MODEL_ID_PROPERTIES = frozenset({"current_model_id", "baseline_model_id"})  # a blessing's


@dataclasses.dataclass(frozen=True)
class Layout:
    """What differs between the writers of a store (see the module docstring): the context types
    of runs and pipelines, and how to read a component's name, its config and an artifact."""
    run_context: str
    pipeline_context: str
    # (store, executions of the runs) -> execution id -> component, for those that are one
    components: Callable[[mlmd.MetadataStore, list[metadata_store_pb2.Execution]],
                         dict[int, str]]
    config: Callable[[metadata_store_pb2.Execution], dict[str, Any]]  # exec properties
    artifact: Callable[[metadata_store_pb2.Artifact], metadata_store_pb2.Artifact]  # as TFX's
    state_names: dict[int, str]  # what an MLMD state means where it differs from runs.py's


def _node_components(store: mlmd.MetadataStore,
                     executions: list[metadata_store_pb2.Execution]) -> dict[int, str]:
    """LocalDagRunner: each execution is in its component's "node" context, "<pipeline>.<id>"."""
    ids = {e.id for e in executions}
    return {e.id: node.name.rpartition(".")[2]
            for node in store.get_contexts_by_type(NODE_CONTEXT)
            for e in store.get_executions_by_context(node.id) if e.id in ids}


def _kfp_components(store: mlmd.MetadataStore,
                    executions: list[metadata_store_pb2.Execution]) -> dict[int, str]:
    """KFP records no component class and no node context: a task is named by its task_name
    (KubeflowV2DagRunner names each task by the TFX node id, e.g. "Trainer"), else its
    display_name. The DAG executions (the run itself) are not components."""
    names = {}
    for execution in executions:
        if execution.type in _KFP_TASKS:
            custom = custom_properties(execution)
            names[execution.id] = (custom.get("task_name") or custom.get("display_name")
                                   or f"{execution.type}:{execution.id}")
    return names


def _whole(value: Any) -> Any:
    """A number KFP stored as a double (it has no integers) back as the int TFX wrote."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _kfp_config(execution: metadata_store_pb2.Execution) -> dict[str, Any]:
    """A task's input parameters, which are the TFX component's exec properties: the "inputs"
    struct of KFP 2 (client.go CreateExecution), or the "input:NAME" custom properties of
    earlier v2 launchers."""
    custom = custom_properties(execution)
    parameters = {key.removeprefix("input:"): value for key, value in custom.items()
                  if key.startswith("input:")}
    parameters.update(custom.get("inputs") or {})
    return {key: _whole(value) for key, value in sorted(parameters.items())}


def _kfp_value(key: str, value: metadata_store_pb2.Value) -> metadata_store_pb2.Value:
    """A custom property as TFX wrote it: an int where KFP made it a double, a model id an int."""
    if value.WhichOneof("value") == "double_value" and value.double_value.is_integer():
        return metadata_store_pb2.Value(int_value=int(value.double_value))
    if key in _MODEL_ID_PROPERTIES and value.string_value.isdigit():
        return metadata_store_pb2.Value(int_value=int(value.string_value))
    return value


def _kfp_artifact(artifact: metadata_store_pb2.Artifact) -> metadata_store_pb2.Artifact:
    """A KFP artifact as LocalDagRunner records it, so that one reader serves both layouts.

    KFP types it by schema title ("tfx.Examples"). TFX's KFP entrypoint (kubeflow_v2_entrypoint_
    utils.to_runtime_artifact) writes properties and custom properties into one metadata struct,
    a custom one that shares a property's name prefixed "custom:"; KFP's launcher stores every
    field as a custom property, numbers as doubles (converter.go StructValueToMLMDValue); and a
    blessing's model ids are runtime artifact names, i.e. MLMD ids as strings.
    """
    result = metadata_store_pb2.Artifact()
    result.CopyFrom(artifact)
    result.type = artifact.type.removeprefix(_KFP_TYPE_PREFIX)
    result.ClearField("custom_properties")
    for key, value in artifact.custom_properties.items():
        fields = result.properties if key in _TFX_PROPERTIES else result.custom_properties
        fields[key.removeprefix(_TFX_CUSTOM_PREFIX)].CopyFrom(_kfp_value(key, value))
    return result


LAYOUTS = (
    # TFX's LocalDagRunner (`nmt run`)
    Layout(RUN_CONTEXT, PIPELINE_CONTEXT, _node_components, config=custom_properties,
           artifact=lambda artifact: artifact, state_names={}),
    # Kubeflow Pipelines v2. client.go CreateExecution: "in MLMD, CANCELED state means exactly
    # as what we call not triggered" (a task whose condition was false).
    Layout(KFP_RUN_CONTEXT, KFP_PIPELINE_CONTEXT, _kfp_components, config=_kfp_config,
           artifact=_kfp_artifact,
           state_names={metadata_store_pb2.Execution.CANCELED: "not triggered"}),
)

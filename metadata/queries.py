"""Answers from ML Metadata to "what produced the serving model, from which data, and how good
was it compared with the last one?", so that nobody has to write MLMD queries.

Every public query reads an open store and returns plain dicts and lists (JSON-ready): the CLI
prints them as tables or JSON, the report and the tests use them as they are. Nothing here
writes to the store. Two writers lay MLMD out differently, and `_load` reads either into one
graph (a `_Layout` per writer, detected from the context types present; everything after
`_load` is shared):

- TFX's LocalDagRunner (`nmt run`): a "pipeline_run" context per run (named by the run id), a
  "node" context per component, executions typed by component class with their exec
  properties as custom properties.
- Kubeflow Pipelines v2 (this pipeline compiled by KubeflowV2DagRunner), whose driver and
  launcher write MLMD themselves (kubeflow/pipelines backend/src/v2/metadata/client.go):
  "system.PipelineRun" contexts under "system.Pipeline" ones, "system.ContainerExecution"s
  named by their task_name custom property with the input parameters (TFX's exec properties)
  in an "inputs" struct, artifacts typed by schema title ("tfx.Examples").

In both, INPUT/OUTPUT events between executions and artifacts carry the input/output key, and
a cached execution has OUTPUT events to the artifacts of the execution it reused, so
"produced by" means the first execution that output an artifact.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import glob
import gzip
import json
import logging
import os
import struct
from typing import IO, Any, Callable, Iterator

import ml_metadata as mlmd
from google.protobuf import json_format
from ml_metadata.proto import metadata_store_pb2

from trainer_module.settings import HISTORY_FILE, HPARAMS_FILE

RUN_CONTEXT, PIPELINE_CONTEXT, NODE_CONTEXT = "pipeline_run", "pipeline", "node"
ENGINE_PROPERTY = "beam_engine"  # `nmt run` records it on the run's context (record_engine)
KFP_RUN_CONTEXT, KFP_PIPELINE_CONTEXT = "system.PipelineRun", "system.Pipeline"
# KFP executions that run a task; a system.DAGExecution is the run (or a sub-DAG) itself.
_KFP_TASKS = ("system.ContainerExecution", "system.ImporterExecution")
_KFP_TYPE_PREFIX = "tfx."  # KubeflowV2DagRunner titles artifact schemas "tfx.<type>"
# TFX artifact properties (of the types this pipeline outputs) that KFP keeps as custom ones.
_TFX_PROPERTIES = frozenset({"span", "version", "split_names"})
_TFX_CUSTOM_PREFIX = "custom:"  # tfx.types.artifact.CUSTOM_PROPERTIES_PREFIX
_MODEL_ID_PROPERTIES = frozenset({"current_model_id", "baseline_model_id"})  # a blessing's
SERVING_MODEL_DIR = "Format-Serving"  # the SavedModel inside a Model artifact
# The training metrics of the history run_fn writes into the ModelRun artifact.
_TRAINING_METRICS = ("loss", "masked_accuracy", "perplexity",
                    "val_loss", "val_masked_accuracy", "val_perplexity")
# Inputs that are not where an artifact came from: the Evaluator's baseline is the last model.
_NOT_LINEAGE = frozenset({"baseline_model"})
_STATE_NAMES = {
    metadata_store_pb2.Execution.COMPLETE: "executed",
    metadata_store_pb2.Execution.CACHED: "cached",
    metadata_store_pb2.Execution.FAILED: "failed",
    metadata_store_pb2.Execution.CANCELED: "canceled",
}
# The events that say what an execution read and wrote (not e.g. a resolver's INTERNAL_OUTPUT).
_LINKS = (metadata_store_pb2.Event.INPUT, metadata_store_pb2.Event.OUTPUT)
_UNFINISHED = (metadata_store_pb2.Execution.NEW, metadata_store_pb2.Execution.RUNNING)
_RUN_STATUS_ORDER = ("failed", "canceled", "running", "interrupted")  # the first found wins
_DIFF_SECTIONS = ("components", "input", "config", "hyperparameters", "metrics")

StoreConfig = metadata_store_pb2.ConnectionConfig | metadata_store_pb2.MetadataStoreClientConfig


class MetadataError(Exception):
    """No store, an empty one, or an unknown run/artifact/type: the message says what to do."""


# --- Connecting ---------------------------------------------------------------------------

def sqlite_config(path: str) -> metadata_store_pb2.ConnectionConfig:
    """The local store, read-only: inspecting must never create or migrate one."""
    if not os.path.isfile(path):
        raise MetadataError(f"No ML Metadata store at {path}: run the pipeline first "
                            "(`nmt run`), or pass the --pipeline-root of an existing one.")
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = path
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    return config


def mysql_config(host: str, port: int, database: str, user: str,
                 password: str) -> metadata_store_pb2.ConnectionConfig:
    """A MySQL-backed store; never creates the database."""
    config = metadata_store_pb2.ConnectionConfig()
    config.mysql.host, config.mysql.port, config.mysql.database = host, port, database
    config.mysql.user, config.mysql.password = user, password
    config.mysql.skip_db_creation = True
    return config


def grpc_config(host: str, port: int,
                timeout_s: float = 30.0) -> metadata_store_pb2.MetadataStoreClientConfig:
    """An MLMD gRPC server, e.g. Kubeflow's metadata-grpc-service:8080."""
    return metadata_store_pb2.MetadataStoreClientConfig(host=host, port=port,
                                                        client_timeout_sec=timeout_s)


@contextlib.contextmanager
def _store_errors(*errors: type[Exception]) -> Iterator[None]:
    """MLMD's errors (unreachable server, not a store...) as one clear MetadataError."""
    try:
        yield
    except (mlmd.errors.StatusError, *errors) as err:
        raise MetadataError(f"Cannot read the ML Metadata store ({str(err)[:200]}): check "
                            "--pipeline-root or the connection flags.") from err


def connect(config: StoreConfig) -> mlmd.MetadataStore:
    """An open store, or a MetadataError that says why not."""
    with _store_errors(RuntimeError):  # what MLMD raises for a file that is not a store
        return mlmd.MetadataStore(config)


# --- One read of the store ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Layout:
    """What differs between the writers of a store (see the module docstring): the context types
    of runs and pipelines, and how to read a component's name, its config and an artifact."""
    run_context: str
    pipeline_context: str
    # (store, executions of the runs) -> execution id -> component, for those that are one
    components: Callable[[mlmd.MetadataStore, list[metadata_store_pb2.Execution]],
                         dict[int, str]]
    config: Callable[[metadata_store_pb2.Execution], dict[str, Any]]  # exec properties
    artifact: Callable[[metadata_store_pb2.Artifact], metadata_store_pb2.Artifact]  # as TFX's
    state_names: dict[int, str]  # what an MLMD state means where it differs from _STATE_NAMES


@dataclasses.dataclass
class _Graph:
    """Runs, executions, artifacts and the events between them, read once and indexed."""
    layout: _Layout
    runs: list[metadata_store_pb2.Context]  # newest first
    pipeline_of_run: dict[int, str]
    run_of_execution: dict[int, metadata_store_pb2.Context]
    node_of_execution: dict[int, str]
    config_of_execution: dict[int, dict[str, Any]]
    executions: dict[int, metadata_store_pb2.Execution]
    artifacts: dict[int, metadata_store_pb2.Artifact]
    inputs: dict[int, list[tuple[str, int]]]  # execution id -> (input key, artifact id)
    outputs: dict[int, list[tuple[str, int]]]
    producer: dict[int, int]  # artifact id -> id of the first execution that output it

    def run_name(self, execution_id: int | None) -> str | None:
        run = self.run_of_execution.get(execution_id)
        return run.name if run else None

    def outputs_of_type(self, execution_id: int,
                        type_name: str) -> list[metadata_store_pb2.Artifact]:
        return [self.artifacts[a] for _, a in self.outputs.get(execution_id, [])
                if self.artifacts[a].type == type_name]

    def sibling(self, artifact: metadata_store_pb2.Artifact,
                type_name: str) -> metadata_store_pb2.Artifact | None:
        """Another output of the execution that produced `artifact` (e.g. a Model's ModelRun)."""
        found = self.outputs_of_type(self.producer.get(artifact.id, -1), type_name)
        return found[0] if found else None

    def run_executions(self, run: metadata_store_pb2.Context) -> list[metadata_store_pb2.Execution]:
        return sorted((e for e in self.executions.values()
                       if self.run_of_execution[e.id].id == run.id), key=lambda e: e.id)

    def run_outputs(self, run: metadata_store_pb2.Context) -> list[metadata_store_pb2.Artifact]:
        """What the run's components output, cached ones included (they re-link old artifacts)."""
        return [self.artifacts[a] for e in self.run_executions(run)
                for _, a in self.outputs.get(e.id, [])]


def _runs(store: mlmd.MetadataStore) -> tuple[_Layout, list[metadata_store_pb2.Context]]:
    """The layout of the store, told by the run contexts it holds, and those runs."""
    for layout in _LAYOUTS:
        runs = store.get_contexts_by_type(layout.run_context)
        if runs:
            return layout, runs
    raise MetadataError("The ML Metadata store holds no pipeline runs yet: run the pipeline "
                        "first (`nmt run`), or check --pipeline-root and the connection flags.")


def _load(store: mlmd.MetadataStore) -> _Graph:
    with _store_errors():
        layout, runs = _runs(store)
        pipeline_of_run = {run.id: pipeline.name
                           for pipeline in store.get_contexts_by_type(layout.pipeline_context)
                           for run in store.get_children_contexts_by_context(pipeline.id)}
        run_of_execution = {e.id: run for run in runs
                            for e in store.get_executions_by_context(run.id)}
        in_runs = store.get_executions_by_id(list(run_of_execution))
        node_of_execution = layout.components(store, in_runs)
        executions = {e.id: e for e in in_runs if e.id in node_of_execution}
        events = [event for event in store.get_events_by_execution_ids(list(executions))
                  if event.type in _LINKS]
        artifacts = {a.id: layout.artifact(a) for a in store.get_artifacts_by_id(
            sorted({event.artifact_id for event in events}))}
    inputs: dict[int, list[tuple[str, int]]] = {}
    outputs: dict[int, list[tuple[str, int]]] = {}
    sides = dict(zip(_LINKS, (inputs, outputs)))
    for event in sorted(events, key=lambda ev: (ev.execution_id, ev.artifact_id)):
        key = event.path.steps[0].key if event.path.steps else ""
        sides[event.type].setdefault(event.execution_id, []).append((key, event.artifact_id))
    producer: dict[int, int] = {}
    for execution_id in sorted(outputs):
        for _, artifact_id in outputs[execution_id]:
            producer.setdefault(artifact_id, execution_id)
    return _Graph(layout=layout,
                  runs=sorted(runs, key=lambda r: (r.create_time_since_epoch, r.id), reverse=True),
                  pipeline_of_run=pipeline_of_run,
                  run_of_execution={e: run_of_execution[e] for e in executions},
                  node_of_execution=node_of_execution,
                  config_of_execution={i: layout.config(e) for i, e in executions.items()},
                  executions=executions, artifacts=artifacts, inputs=inputs, outputs=outputs,
                  producer=producer)


def _find_run(graph: _Graph, run_id: str | None) -> metadata_store_pb2.Context:
    """The run with this id, or the only one it is a prefix of; the newest for None."""
    if run_id is None:
        return graph.runs[0]
    exact = [r for r in graph.runs if r.name == run_id]
    matches = exact or [r for r in graph.runs if r.name.startswith(run_id)]
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(r.name for r in (matches or graph.runs)[:5])
    what = "is ambiguous" if matches else "is not a known run"
    raise MetadataError(f"{run_id!r} {what} (e.g. {known}): see `nmt metadata runs`.")


# --- Values -------------------------------------------------------------------------------

def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).astimezone() \
        .isoformat(timespec="seconds")


def _seconds(start_ms: int, end_ms: int) -> float:
    return round((end_ms - start_ms) / 1000, 1)


def _value(value: metadata_store_pb2.Value) -> Any:
    kind = value.WhichOneof("value")
    if kind == "struct_value":
        return json_format.MessageToDict(value.struct_value)
    return getattr(value, kind) if kind in ("int_value", "double_value", "string_value",
                                            "bool_value") else None


def _custom(item: metadata_store_pb2.Artifact | metadata_store_pb2.Execution) -> dict[str, Any]:
    return {key: _value(value) for key, value in sorted(item.custom_properties.items())}


def _parsed(text: Any) -> Any:
    """Exec properties hold protos and dicts as JSON text: parsed, so they diff key by key."""
    if isinstance(text, str) and text[:1] in "{[":
        with contextlib.suppress(ValueError):
            return json.loads(text)
    return text


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}, "c": [2]} -> {"a.b": 1, "c.0": 2}: nested values compared (diff) and
    printed (tables) key by key."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, item in items:
        flat.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return flat


# --- The two layouts ---------------------------------------------------------------------

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
            custom = _custom(execution)
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
    custom = _custom(execution)
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


_LAYOUTS = (
    # TFX's LocalDagRunner (`nmt run`)
    _Layout(RUN_CONTEXT, PIPELINE_CONTEXT, _node_components, config=_custom,
            artifact=lambda artifact: artifact, state_names={}),
    # Kubeflow Pipelines v2. client.go CreateExecution: "in MLMD, CANCELED state means exactly
    # as what we call not triggered" (a task whose condition was false).
    _Layout(KFP_RUN_CONTEXT, KFP_PIPELINE_CONTEXT, _kfp_components, config=_kfp_config,
            artifact=_kfp_artifact,
            state_names={metadata_store_pb2.Execution.CANCELED: "not triggered"}),
)


# --- Files that artifacts point to (local paths, or gs:// etc. through TensorFlow) ----------

def _open(path: str) -> IO[bytes]:
    if "://" not in path:
        return open(path, "rb")
    import tensorflow as tf  # only for remote URIs: slow to import
    return tf.io.gfile.GFile(path, "rb")


def _glob(pattern: str) -> list[str]:
    if "://" not in pattern:
        return sorted(glob.glob(pattern))
    import tensorflow as tf
    return sorted(tf.io.gfile.glob(pattern))


def read_json(path: str) -> Any:
    """A JSON file an artifact holds, or None when it has none."""
    if not _glob(path):
        return None
    with _open(path) as f:
        return json.load(f)


def _count_records(split_dir: str) -> int:
    """Records in a split's TFRecord files, by their framing (8-byte length, 4-byte CRC, data,
    4-byte CRC), so that counting needs no TensorFlow."""
    count = 0
    for path in _glob(os.path.join(split_dir, "*")):
        with _open(path) as raw, (gzip.open(raw) if path.endswith(".gz")
                                  else contextlib.nullcontext(raw)) as f:
            while header := f.read(12):
                f.seek(struct.unpack("<Q", header[:8])[0] + 4, os.SEEK_CUR)
                count += 1
    return count


@functools.lru_cache(maxsize=None)
def evaluation_metrics(uri: str) -> dict[str, Any]:
    """Corpus BLEU/chrF of a ModelEvaluation, overall and per English length bucket: against
    all references (bleu, chrf) and against the first (bleu_1ref, chrf_1ref; None in
    evaluations made before the Evaluator measured them)."""
    import tensorflow_model_analysis as tfma  # slow to import: only when metrics are asked for
    from components.tfma_metrics import (CORPUS_BLEU_1REF_NAME, CORPUS_BLEU_NAME,
                                         CORPUS_CHRF_1REF_NAME, CORPUS_CHRF_NAME)

    tf_logger = logging.getLogger("tensorflow")
    level = tf_logger.level
    tf_logger.setLevel(logging.ERROR)  # TFMA's reader logs TF deprecation warnings
    try:
        result = tfma.load_eval_result(uri)
    finally:
        tf_logger.setLevel(level)
    scores: dict[str, Any] = {"overall": None, "by_length": {}}
    for slice_key, values in result.slicing_metrics:
        metrics = values[""][""]
        score = {key: metrics[name]["doubleValue"] if name in metrics else None
                 for key, name in (("bleu", CORPUS_BLEU_NAME), ("chrf", CORPUS_CHRF_NAME),
                                   ("bleu_1ref", CORPUS_BLEU_1REF_NAME),
                                   ("chrf_1ref", CORPUS_CHRF_1REF_NAME))}
        if slice_key:  # the Evaluator slices by one feature: the English length bucket
            scores["by_length"][slice_key[0][1]] = score
        else:
            scores["overall"] = score
    scores["by_length"] = dict(sorted(scores["by_length"].items()))
    return scores


# --- What each artifact type says ---------------------------------------------------------

def _input_file(artifact: metadata_store_pb2.Artifact) -> dict[str, Any] | None:
    """The fra.txt an ExampleGen Examples artifact was read from (path, size, sha256)."""
    custom = _custom(artifact)
    if "input_sha256" not in custom:
        return None
    return {"path": custom["input_path"], "size_bytes": int(custom["input_size_bytes"]),
            "sha256": custom["input_sha256"]}


def _examples_properties(graph: _Graph, artifact: metadata_store_pb2.Artifact) -> dict[str, Any]:
    custom = _custom(artifact)
    splits = json.loads(artifact.properties["split_names"].string_value or "[]")
    properties: dict[str, Any] = {
        "splits": {s: _count_records(os.path.join(artifact.uri, f"Split-{s}")) for s in splits}}
    properties.update({key: custom[key] for key in
                       ("lines_read", "pairs_kept", "lines_rejected", "examples") if key in custom})
    if (source := _input_file(artifact)) is not None:
        properties["input"] = source
    return properties


def _evaluation_properties(graph: _Graph, artifact: metadata_store_pb2.Artifact) -> dict[str, Any]:
    return dict(evaluation_metrics(artifact.uri)["overall"] or {})


def _blessing_properties(graph: _Graph, artifact: metadata_store_pb2.Artifact) -> dict[str, Any]:
    custom = _custom(artifact)
    evaluation = graph.sibling(artifact, "ModelEvaluation")
    return {"blessed": bool(custom.get("blessed")), "model": custom.get("current_model_id"),
            "baseline_model": custom.get("baseline_model_id"),
            "evaluation": evaluation.id if evaluation else None,
            **(_evaluation_properties(graph, evaluation) if evaluation else {})}


def _pushed_properties(graph: _Graph, artifact: metadata_store_pb2.Artifact) -> dict[str, Any]:
    custom = _custom(artifact)
    return {"pushed": bool(custom.get("pushed")), "version": custom.get("pushed_version"),
            "destination": custom.get("pushed_destination")}


_PROPERTIES: dict[str, Callable[[_Graph, metadata_store_pb2.Artifact], dict[str, Any]]] = {
    "Examples": _examples_properties,
    "ModelEvaluation": _evaluation_properties,
    "ModelBlessing": _blessing_properties,
    "PushedModel": _pushed_properties,
}


def _describe(graph: _Graph, artifact: metadata_store_pb2.Artifact) -> dict[str, Any]:
    producer = graph.producer.get(artifact.id)
    properties = _PROPERTIES.get(artifact.type)
    return {"id": artifact.id, "type": artifact.type, "uri": artifact.uri,
            "producer": graph.node_of_execution.get(producer), "run": graph.run_name(producer),
            "created": _iso(artifact.create_time_since_epoch),
            "properties": properties(graph, artifact) if properties else {}}


# --- runs ---------------------------------------------------------------------------------

def _component_state(graph: _Graph, execution: metadata_store_pb2.Execution,
                     newest_run: bool) -> str:
    """A run that never finished an execution and was followed by another was interrupted
    (killed, crashed): MLMD still says RUNNING."""
    if execution.last_known_state in _UNFINISHED:
        return "running" if newest_run else "interrupted"
    return graph.layout.state_names.get(execution.last_known_state) or _STATE_NAMES.get(
        execution.last_known_state, "unknown")


def _run_record(graph: _Graph, run: metadata_store_pb2.Context, newest: bool) -> dict[str, Any]:
    executions = graph.run_executions(run)
    components = [{"component": graph.node_of_execution.get(e.id), "execution": e.id,
                   "state": _component_state(graph, e, newest),
                   "duration_s": None if e.last_known_state in _UNFINISHED else _seconds(
                       e.create_time_since_epoch, e.last_update_time_since_epoch)}
                  for e in executions]
    states = {c["state"] for c in components}
    end = max([e.last_update_time_since_epoch for e in executions],
              default=run.create_time_since_epoch)
    return {"run": run.name, "pipeline": graph.pipeline_of_run.get(run.id),
            "status": next((s for s in _RUN_STATUS_ORDER if s in states), "complete"),
            "engine": _custom(run).get(ENGINE_PROPERTY),
            "start": _iso(run.create_time_since_epoch), "end": _iso(end),
            "duration_s": _seconds(run.create_time_since_epoch, end), "components": components}


def _run_records(graph: _Graph) -> list[dict[str, Any]]:
    newest: dict[str | None, int] = {}
    for run in graph.runs:  # newest first
        newest.setdefault(graph.pipeline_of_run.get(run.id), run.id)
    return [_run_record(graph, run, run.id in newest.values()) for run in graph.runs]


def list_runs(store: mlmd.MetadataStore) -> list[dict[str, Any]]:
    """Pipeline runs, newest first: status, times, and per component executed/cached/failed
    with its duration in seconds."""
    return _run_records(_load(store))


def record_engine(store: mlmd.MetadataStore, run_name: str, engine: str) -> None:
    """Names the Beam engine a local run's data steps ran on, on its run context."""
    run = store.get_context_by_type_and_name(RUN_CONTEXT, run_name)
    run.custom_properties[ENGINE_PROPERTY].string_value = engine
    store.put_contexts([run])


def get_run(store: mlmd.MetadataStore, run_id: str | None = None) -> dict[str, Any]:
    """One run's record as in `list_runs` (the newest for None; a unique prefix is enough)."""
    graph = _load(store)
    name = _find_run(graph, run_id).name
    return next(r for r in _run_records(graph) if r["run"] == name)


# --- artifacts ----------------------------------------------------------------------------

def list_artifacts(store: mlmd.MetadataStore, type_name: str | None = None,
                   run_id: str | None = None) -> list[dict[str, Any]]:
    """Artifacts, newest first, with their producer, run and key properties; optionally one
    type, or what one run's components output (cached ones included)."""
    graph = _load(store)
    artifacts = list(graph.artifacts.values()) if run_id is None else \
        graph.run_outputs(_find_run(graph, run_id))
    if type_name is not None:
        known = sorted({a.type for a in graph.artifacts.values()})
        if type_name not in known:
            raise MetadataError(f"No artifacts of type {type_name!r}; types in the store: "
                                f"{', '.join(known)}.")
        artifacts = [a for a in artifacts if a.type == type_name]
    return [_describe(graph, a) for a in sorted(artifacts, key=lambda a: a.id, reverse=True)]


# --- lineage ------------------------------------------------------------------------------

def _resolve_artifact(graph: _Graph, ref: str) -> metadata_store_pb2.Artifact:
    """A pushed version (checked first: versions are Unix times, ids small) or an artifact id."""
    for artifact in graph.artifacts.values():
        if artifact.type == "PushedModel" and _custom(artifact).get("pushed_version") == ref:
            return artifact
    if ref.isdigit() and int(ref) in graph.artifacts:
        return graph.artifacts[int(ref)]
    raise MetadataError(f"{ref!r} is neither a pushed version nor an artifact id in the store: "
                        "see `nmt metadata models` and `nmt metadata artifacts`.")


def _lineage_inputs(graph: _Graph, artifact_id: int) -> list[int]:
    producer = graph.producer.get(artifact_id)
    return sorted({a for key, a in graph.inputs.get(producer, []) if key not in _NOT_LINEAGE},
                  reverse=True)


def _upstream(graph: _Graph, artifact_id: int) -> set[int]:
    seen, todo = set(), [artifact_id]
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo.extend(_lineage_inputs(graph, current))
    return seen


def _model_run_json(graph: _Graph, model: metadata_store_pb2.Artifact, name: str) -> Any:
    """A JSON file the Trainer wrote into the ModelRun output next to the Model, or None."""
    model_run = graph.sibling(model, "ModelRun")
    return read_json(os.path.join(model_run.uri, name)) if model_run else None


def _model_hparams(graph: _Graph, model: metadata_store_pb2.Artifact) -> dict[str, Any] | None:
    """The Trainer's full hyperparameters."""
    return _model_run_json(graph, model, HPARAMS_FILE)


def _trained_steps(graph: _Graph, model: metadata_store_pb2.Artifact) -> int | None:
    """Steps actually trained: fewer than train_steps when a time budget stopped training."""
    history = _model_run_json(graph, model, HISTORY_FILE)
    return history[-1].get("step") if history else None


def lineage(store: mlmd.MetadataStore, ref: str) -> dict[str, Any]:
    """Where an artifact (a pushed version or an artifact id) came from, back to fra.txt.

    The chain lists the artifact and everything upstream, newest first (ids grow as the
    pipeline runs, so every artifact comes before its inputs), each with the ids of the inputs
    it was made from, and ends with the input file(s). The Evaluator's baseline model is not
    followed: it is the previous model, not a source of this one.
    """
    graph = _load(store)
    target = _resolve_artifact(graph, ref)
    chain = [{**_describe(graph, graph.artifacts[a]), "inputs": _lineage_inputs(graph, a)}
             for a in sorted(_upstream(graph, target.id), reverse=True)]
    files = [f for f in (_input_file(graph.artifacts[node["id"]]) for node in chain) if f]
    chain += [{"id": None, "type": "File", "uri": f["path"], "producer": None, "run": None,
               "created": None, "properties": {"size_bytes": f["size_bytes"],
                                               "sha256": f["sha256"]}, "inputs": []}
              for f in files]
    models = [graph.artifacts[node["id"]] for node in chain if node["type"] == "Model"]
    return {"target": target.id, "chain": chain,
            "hyperparameters": _model_hparams(graph, models[0]) if models else None}


def _model_of_directory(graph: _Graph, model_dir: str) -> metadata_store_pb2.Artifact | None:
    """The Model or PushedModel artifact whose files are `model_dir`: a pushed version's
    directory, or a Trainer's Model (its Format-Serving SavedModel); None for any other
    directory (a copy, a model of another store)."""
    wanted = _place(model_dir)
    for artifact in sorted(graph.artifacts.values(), key=lambda a: a.id, reverse=True):
        if artifact.type == "PushedModel":
            places = [_pushed_properties(graph, artifact).get("destination")]
        elif artifact.type == "Model":
            places = [artifact.uri, os.path.join(artifact.uri, "Format-Serving")]
        else:
            continue
        if wanted in {_place(p) for p in places if p}:
            return artifact
    return None


def _place(directory: str) -> str:
    """A directory as one comparable string: a local one absolute with symlinks resolved (a
    user may name the model relative to where they stand; ML Metadata holds absolute paths),
    a URL (gs://...) as written."""
    return os.path.normpath(directory) if "://" in directory else os.path.realpath(directory)


def training_examples(store: mlmd.MetadataStore, model_dir: str) -> dict[str, Any] | None:
    """Where the model in `model_dir` learned from, by its lineage: the Model artifact's id and
    the train split ExampleGen wrote ({"model", "examples", "train_split"}); None when the
    store knows no artifact of that directory."""
    graph = _load(store)
    target = _model_of_directory(graph, model_dir)
    if target is None:
        return None
    upstream = [graph.artifacts[a] for a in _upstream(graph, target.id)]
    models = [a.id for a in upstream if a.type == "Model"]
    examples = [a for a in upstream if a.type == "Examples" and _input_file(a)]
    if not models or not examples:
        return None
    source = max(examples, key=lambda a: a.id)
    return {"model": max(models), "examples": source.id,
            "train_split": os.path.join(source.uri, "Split-train")}


# --- models -------------------------------------------------------------------------------

def _pushes(graph: _Graph) -> dict[int, list[dict[str, Any]]]:
    """Model id -> the versions it was pushed as (PushedModel properties), oldest first."""
    pushes: dict[int, list[dict[str, Any]]] = {}
    for artifact in sorted(graph.artifacts.values(), key=lambda a: a.id):
        pushed = _pushed_properties(graph, artifact) if artifact.type == "PushedModel" else {}
        if pushed.get("pushed"):
            for key, model_id in graph.inputs.get(graph.producer[artifact.id], []):
                if key == "model":
                    pushes.setdefault(model_id, []).append(pushed)
    return pushes


def _serving(pushes: dict[int, list[dict[str, Any]]]) -> set[str]:
    """Destinations being served: the highest version under each serving directory, as TF
    Serving's default policy (and `nmt translate`) picks it."""
    newest: dict[str, dict[str, Any]] = {}
    for push in (p for model_pushes in pushes.values() for p in model_pushes):
        base = os.path.dirname(push["destination"])
        if base not in newest or int(push["version"]) > int(newest[base]["version"]):
            newest[base] = push
    return {push["destination"] for push in newest.values()}


def _latest_blessing(graph: _Graph, model_id: int) -> metadata_store_pb2.Artifact | None:
    """The blessing of the newest evaluation of this model as the candidate (not baseline)."""
    found = [blessing for e in sorted(graph.executions)
             if ("model", model_id) in graph.inputs.get(e, [])
             for blessing in graph.outputs_of_type(e, "ModelBlessing")]
    return found[-1] if found else None


def list_models(store: mlmd.MetadataStore) -> list[dict[str, Any]]:
    """Every trained model, newest first: steps, BLEU/chrF, blessed, pushed version, and
    whether it is the one being served."""
    graph = _load(store)
    pushes = _pushes(graph)
    serving = _serving(pushes)
    models = []
    for model in sorted((a for a in graph.artifacts.values() if a.type == "Model"),
                        key=lambda a: a.id, reverse=True):
        blessing = _latest_blessing(graph, model.id)
        judged = _blessing_properties(graph, blessing) if blessing else {}
        model_pushes = sorted(pushes.get(model.id, []), key=lambda p: int(p["version"]))
        models.append({
            "model": model.id, "run": graph.run_name(graph.producer.get(model.id)),
            "created": _iso(model.create_time_since_epoch),
            "train_steps": (_model_hparams(graph, model) or {}).get("train_steps"),
            "trained_steps": _trained_steps(graph, model),
            "bleu_1ref": judged.get("bleu_1ref"), "chrf_1ref": judged.get("chrf_1ref"),
            "bleu": judged.get("bleu"), "chrf": judged.get("chrf"),
            "blessed": judged.get("blessed"), "baseline_model": judged.get("baseline_model"),
            "pushed_version": model_pushes[-1]["version"] if model_pushes else None,
            "serving": any(p["destination"] in serving for p in model_pushes),
            "uri": model.uri})
    return models


# --- diff ---------------------------------------------------------------------------------

def _effective_execution(graph: _Graph,
                         execution: metadata_store_pb2.Execution) -> metadata_store_pb2.Execution:
    """A cached execution's config is that of the execution whose outputs it reused (a cached
    one records fewer exec properties, e.g. no input fingerprint)."""
    if execution.last_known_state == metadata_store_pb2.Execution.CACHED:
        for _, artifact_id in graph.outputs.get(execution.id, [])[:1]:
            return graph.executions[graph.producer[artifact_id]]
    return execution


def _first(artifacts: list[metadata_store_pb2.Artifact],
           type_name: str) -> metadata_store_pb2.Artifact | None:
    return next((a for a in artifacts if a.type == type_name), None)


def _run_metrics(outputs: list[metadata_store_pb2.Artifact]) -> dict[str, Any]:
    evaluation, blessing, model_run = (_first(outputs, t) for t in
                                       ("ModelEvaluation", "ModelBlessing", "ModelRun"))
    metrics: dict[str, Any] = {}
    if evaluation:
        metrics["evaluation"] = evaluation_metrics(evaluation.uri)
    if blessing:
        metrics["blessing"] = {"blessed": bool(_custom(blessing).get("blessed"))}
    history = read_json(os.path.join(model_run.uri, HISTORY_FILE)) if model_run else None
    if history:
        metrics["training"] = {k: history[-1][k] for k in _TRAINING_METRICS if k in history[-1]}
    return metrics


def _run_facts(graph: _Graph, run: metadata_store_pb2.Context,
               states: dict[str, str]) -> dict[str, dict[str, dict[str, Any]]]:
    """What a run was made of and what it measured: section -> group -> flat values."""
    outputs = graph.run_outputs(run)
    source = next((f for f in map(_input_file, outputs) if f), None)
    model = _first(outputs, "Model")
    hparams = _model_hparams(graph, model) if model else None
    return {
        "components": {"": states},
        "input": {"": source} if source else {},
        "config": {graph.node_of_execution.get(e.id): flatten({
            key: _parsed(value) for key, value
            in graph.config_of_execution[_effective_execution(graph, e).id].items()})
            for e in graph.run_executions(run)},
        "hyperparameters": {"": flatten(hparams)} if hparams else {},
        "metrics": {group: flatten(values) for group, values in _run_metrics(outputs).items()},
    }


def _changes(section: str, a: dict[str, dict[str, Any]],
             b: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Key by key, within the groups both runs have (a component that one run lacks shows in
    the "components" section instead of as every one of its keys)."""
    return [{"section": section, "key": f"{group}.{key}" if group else key,
             "a": a[group].get(key), "b": b[group].get(key)}
            for group in sorted(a.keys() & b.keys())
            for key in sorted(a[group].keys() | b[group].keys())
            if a[group].get(key) != b[group].get(key)]


def diff_runs(store: mlmd.MetadataStore, run_a: str, run_b: str) -> dict[str, Any]:
    """What changed from run A to run B: which components executed, were cached or are
    missing (None), the input file, component config (exec properties), the Trainer's
    hyperparameters, and metrics. Only values that differ are listed."""
    graph = _load(store)
    a, b = _find_run(graph, run_a), _find_run(graph, run_b)
    states = {record["run"]: {c["component"]: c["state"] for c in record["components"]}
              for record in _run_records(graph) if record["run"] in (a.name, b.name)}
    facts_a, facts_b = _run_facts(graph, a, states[a.name]), _run_facts(graph, b, states[b.name])
    return {"run_a": a.name, "run_b": b.name,
            "changes": [change for section in _DIFF_SECTIONS
                        for change in _changes(section, facts_a[section], facts_b[section])]}


def as_text(value: Any) -> str:
    """One value as people read it: "-" for none, yes/no, 4 significant digits, k=v lists."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ",".join(map(as_text, value))
    if isinstance(value, dict):
        return ", ".join(f"{k}={as_text(v)}" for k, v in flatten(value).items())
    return str(value)

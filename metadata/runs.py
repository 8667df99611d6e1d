"""Pipeline runs: each one's status, times, the input spans read, and per component
executed/cached/failed with its duration. `record_engine` is the one query that writes: `nmt
run` names its Beam engine on its run's context."""
from __future__ import annotations

from typing import Any

import ml_metadata as mlmd
from ml_metadata.proto import metadata_store_pb2

from components.fra_example_gen.spans import SPANS_PROPERTY
from metadata.graph import Graph, find_run, load_graph
from metadata.layouts import RUN_CONTEXT
from metadata.values import custom_properties, iso, seconds

ENGINE_PROPERTY = "beam_engine"  # `nmt run` records it on the run's context (record_engine)
_STATE_NAMES = {
    metadata_store_pb2.Execution.COMPLETE: "executed",
    metadata_store_pb2.Execution.CACHED: "cached",
    metadata_store_pb2.Execution.FAILED: "failed",
    metadata_store_pb2.Execution.CANCELED: "canceled",
}
_UNFINISHED = (metadata_store_pb2.Execution.NEW, metadata_store_pb2.Execution.RUNNING)
_RUN_STATUS_ORDER = ("failed", "canceled", "running", "interrupted")  # the first found wins


def _component_state(graph: Graph, execution: metadata_store_pb2.Execution,
                     newest_run: bool) -> str:
    """A run that never finished an execution and was followed by another was interrupted
    (killed, crashed): MLMD still says RUNNING."""
    if execution.last_known_state in _UNFINISHED:
        return "running" if newest_run else "interrupted"
    return graph.layout.state_names.get(execution.last_known_state) or _STATE_NAMES.get(
        execution.last_known_state, "unknown")


def _spans_read(graph: Graph, executions: list[metadata_store_pb2.Execution]) -> str | None:
    """The spans ("3,4") of a {SPAN} input that the run's ExampleGen read, or reused."""
    return next((spans for e in executions for a in graph.outputs_of_type(e.id, "Examples")
                 if (spans := custom_properties(a).get(SPANS_PROPERTY)) is not None), None)


def _run_record(graph: Graph, run: metadata_store_pb2.Context, newest: bool) -> dict[str, Any]:
    executions = graph.run_executions(run)
    components = [{"component": graph.node_of_execution.get(e.id), "execution": e.id,
                   "state": _component_state(graph, e, newest),
                   "duration_s": None if e.last_known_state in _UNFINISHED else seconds(
                       e.create_time_since_epoch, e.last_update_time_since_epoch)}
                  for e in executions]
    states = {c["state"] for c in components}
    end = max([e.last_update_time_since_epoch for e in executions],
              default=run.create_time_since_epoch)
    return {"run": run.name, "pipeline": graph.pipeline_of_run.get(run.id),
            "status": next((s for s in _RUN_STATUS_ORDER if s in states), "complete"),
            "engine": custom_properties(run).get(ENGINE_PROPERTY),
            "spans": _spans_read(graph, executions),
            "start": iso(run.create_time_since_epoch), "end": iso(end),
            "duration_s": seconds(run.create_time_since_epoch, end), "components": components}


def run_records(graph: Graph) -> list[dict[str, Any]]:
    newest: dict[str | None, int] = {}
    for run in graph.runs:  # newest first
        newest.setdefault(graph.pipeline_of_run.get(run.id), run.id)
    return [_run_record(graph, run, run.id in newest.values()) for run in graph.runs]


def list_runs(store: mlmd.MetadataStore) -> list[dict[str, Any]]:
    """Pipeline runs, newest first: status, times, and per component executed/cached/failed
    with its duration in seconds."""
    return run_records(load_graph(store))


def record_engine(store: mlmd.MetadataStore, run_name: str, engine: str) -> None:
    """Names the Beam engine a local run's data steps ran on, on its run context."""
    run = store.get_context_by_type_and_name(RUN_CONTEXT, run_name)
    run.custom_properties[ENGINE_PROPERTY].string_value = engine
    store.put_contexts([run])


def get_run(store: mlmd.MetadataStore, run_id: str | None = None) -> dict[str, Any]:
    """One run's record as in `list_runs` (the newest for None; a unique prefix is enough)."""
    graph = load_graph(store)
    name = find_run(graph, run_id).name
    return next(r for r in run_records(graph) if r["run"] == name)

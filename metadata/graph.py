"""One read of the store: its runs, executions, artifacts and the events between them, indexed,
whichever writer laid it out (layouts.py). Every question (runs.py, artifacts.py, lineage.py,
models.py, diff.py) reads an open store into this graph once and answers from it.

In both layouts, INPUT/OUTPUT events between executions and artifacts carry the input/output
key, and a cached execution has OUTPUT events to the artifacts of the execution it reused, so
"produced by" means the first execution that output an artifact.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import ml_metadata as mlmd
from ml_metadata.proto import metadata_store_pb2

from metadata.layouts import LAYOUTS, Layout
from metadata.store import MetadataError, store_errors

# The events that say what an execution read and wrote (not e.g. a resolver's INTERNAL_OUTPUT).
_LINKS = (metadata_store_pb2.Event.INPUT, metadata_store_pb2.Event.OUTPUT)


@dataclasses.dataclass
class Graph:
    """Runs, executions, artifacts and the events between them, read once and indexed."""
    layout: Layout
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


def _runs(store: mlmd.MetadataStore) -> tuple[Layout, list[metadata_store_pb2.Context]]:
    """The layout of the store, told by the run contexts it holds, and those runs."""
    for layout in LAYOUTS:
        runs = store.get_contexts_by_type(layout.run_context)
        if runs:
            return layout, runs
    raise MetadataError("The ML Metadata store holds no pipeline runs yet: run the pipeline "
                        "first (`nmt run`), or check --pipeline-root and the connection flags.")


def load_graph(store: mlmd.MetadataStore) -> Graph:
    """The store, read once: every query starts here."""
    with store_errors():
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
    return Graph(layout=layout,
                 runs=sorted(runs, key=lambda r: (r.create_time_since_epoch, r.id), reverse=True),
                 pipeline_of_run=pipeline_of_run,
                 run_of_execution={e: run_of_execution[e] for e in executions},
                 node_of_execution=node_of_execution,
                 config_of_execution={i: layout.config(e) for i, e in executions.items()},
                 executions=executions, artifacts=artifacts, inputs=inputs, outputs=outputs,
                 producer=producer)


def find_run(graph: Graph, run_id: str | None) -> metadata_store_pb2.Context:
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

"""What changed from one run to another: components, input file, config, hyperparameters,
metrics."""
from __future__ import annotations

import os
from typing import Any

import ml_metadata as mlmd
from ml_metadata.proto import metadata_store_pb2

from components.serving_versions import SERVED_PATH
from metadata.artifacts import evaluation_metrics, input_file, model_hparams, read_json
from metadata.graph import Graph, find_run, load_graph
from metadata.runs import run_records
from metadata.values import custom_properties, flatten, parsed
from trainer_module.settings import HISTORY_FILE

# The training metrics of the history run_fn writes into the ModelRun artifact.
_TRAINING_METRICS = ("loss", "masked_accuracy", "perplexity",
                    "val_loss", "val_masked_accuracy", "val_perplexity")
_DIFF_SECTIONS = ("components", "input", "config", "hyperparameters", "metrics")


def _effective_execution(graph: Graph,
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
        metrics["blessing"] = {"blessed": bool(custom_properties(blessing).get("blessed"))}
    history = read_json(os.path.join(model_run.uri, HISTORY_FILE)) if model_run else None
    if history:
        metrics["training"] = {k: history[-1][k] for k in _TRAINING_METRICS if k in history[-1]}
    return metrics


def _run_facts(graph: Graph, run: metadata_store_pb2.Context,
               states: dict[str, str]) -> dict[str, dict[str, dict[str, Any]]]:
    """What a run was made of and what it measured: section -> group -> flat values."""
    outputs = graph.run_outputs(run)
    source = next((f for f in map(input_file, outputs) if f), None)
    # the Trainer's model, not a warm start's copy of the served base (ServedModel's output)
    model = _first([a for a in outputs if SERVED_PATH not in custom_properties(a)], "Model")
    hparams = model_hparams(graph, model) if model else None
    return {
        "components": {"": states},
        "input": {"": source} if source else {},
        "config": {graph.node_of_execution.get(e.id): flatten({
            key: parsed(value) for key, value
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
    graph = load_graph(store)
    a, b = find_run(graph, run_a), find_run(graph, run_b)
    states = {record["run"]: {c["component"]: c["state"] for c in record["components"]}
              for record in run_records(graph) if record["run"] in (a.name, b.name)}
    facts_a, facts_b = _run_facts(graph, a, states[a.name]), _run_facts(graph, b, states[b.name])
    return {"run_a": a.name, "run_b": b.name,
            "changes": [change for section in _DIFF_SECTIONS
                        for change in _changes(section, facts_a[section], facts_b[section])]}

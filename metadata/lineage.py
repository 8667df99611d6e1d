"""Where an artifact came from, back to the input file: `lineage` (a pushed version or an
artifact id) and `training_examples` (the train splits a model directory learned from)."""
from __future__ import annotations

import os
from typing import Any

import ml_metadata as mlmd
from ml_metadata.proto import metadata_store_pb2

from components.serving_versions import SERVED_PATH
from metadata.artifacts import (describe, input_file, model_hparams, pushed_properties,
                                total_train_steps, trained_steps)
from metadata.graph import Graph, load_graph
from metadata.store import MetadataError
from metadata.values import custom_properties

# Inputs that are not where an artifact came from: the Evaluator's baseline is the last model.
_NOT_LINEAGE = frozenset({"baseline_model"})


def _resolve_artifact(graph: Graph, ref: str) -> metadata_store_pb2.Artifact:
    """A pushed version (checked first: versions are Unix times, ids small) or an artifact id."""
    for artifact in graph.artifacts.values():
        if (artifact.type == "PushedModel"
                and custom_properties(artifact).get("pushed_version") == ref):
            return artifact
    if ref.isdigit() and int(ref) in graph.artifacts:
        return graph.artifacts[int(ref)]
    raise MetadataError(f"{ref!r} is neither a pushed version nor an artifact id in the store: "
                        "see `nmt metadata models` and `nmt metadata artifacts`.")


def _lineage_inputs(graph: Graph, artifact_id: int) -> list[int]:
    """The artifacts it was made from: its producer's inputs; for a warm start's base model
    (a served version), the push that served it, and so the model trained before."""
    producer = graph.producer.get(artifact_id)
    found = {a for key, a in graph.inputs.get(producer, []) if key not in _NOT_LINEAGE}
    served = custom_properties(graph.artifacts[artifact_id]).get(SERVED_PATH)
    if served:
        pushed = {a.id: pushed_properties(graph, a).get("destination")
                  for a in graph.artifacts.values() if a.type == "PushedModel"}
        found |= {a for a, place in pushed.items() if place and _place(place) == _place(served)}
    return sorted(found, reverse=True)


def _upstream(graph: Graph, artifact_id: int) -> set[int]:
    seen, todo = set(), [artifact_id]
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo.extend(_lineage_inputs(graph, current))
    return seen


def lineage(store: mlmd.MetadataStore, ref: str) -> dict[str, Any]:
    """Where an artifact (a pushed version or an artifact id) came from, back to fra.txt.

    The chain lists the artifact and everything upstream, newest first (ids grow as the
    pipeline runs, so every artifact comes before its inputs), each with the ids of the inputs
    it was made from, and ends with the input file(s). The Evaluator's baseline model is not
    followed: it is the previous model, not a source of this one.
    """
    graph = load_graph(store)
    target = _resolve_artifact(graph, ref)
    chain = [{**describe(graph, graph.artifacts[a]), "inputs": _lineage_inputs(graph, a)}
             for a in sorted(_upstream(graph, target.id), reverse=True)]
    files = [f for f in (input_file(graph.artifacts[node["id"]]) for node in chain) if f]
    chain += [{"id": None, "type": "File", "uri": f["path"], "producer": None, "run": None,
               "created": None, "properties": {"size_bytes": f["size_bytes"],
                                               "sha256": f["sha256"]}, "inputs": []}
              for f in files]
    models = [graph.artifacts[node["id"]] for node in chain if node["type"] == "Model"
              and SERVED_PATH not in custom_properties(graph.artifacts[node["id"]])]
    return {"target": target.id, "chain": chain,
            "models": [{"model": m.id, "run": graph.run_name(graph.producer.get(m.id)),
                        "trained_steps": trained_steps(graph, m),
                        "total_train_steps": total_train_steps(m)} for m in models],
            "hyperparameters": model_hparams(graph, models[0]) if models else None}


def _model_of_directory(graph: Graph, model_dir: str) -> metadata_store_pb2.Artifact | None:
    """The Model or PushedModel artifact whose files are `model_dir`: a pushed version's
    directory, or a Trainer's Model (its Format-Serving SavedModel); None for any other
    directory (a copy, a model of another store)."""
    wanted = _place(model_dir)
    for artifact in sorted(graph.artifacts.values(), key=lambda a: a.id, reverse=True):
        if artifact.type == "PushedModel":
            places = [pushed_properties(graph, artifact).get("destination")]
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
    the train splits ExampleGen wrote ({"model", "examples", "train_splits"}, newest first:
    a warm-started model learned from its base's data too); None when the store knows no
    artifact of that directory."""
    graph = load_graph(store)
    target = _model_of_directory(graph, model_dir)
    if target is None:
        return None
    upstream = [graph.artifacts[a] for a in _upstream(graph, target.id)]
    models = [a.id for a in upstream if a.type == "Model"]
    examples = [a for a in upstream if a.type == "Examples" and input_file(a)]
    if not models or not examples:
        return None
    examples.sort(key=lambda a: a.id, reverse=True)
    return {"model": max(models), "examples": [a.id for a in examples],
            "train_splits": [os.path.join(a.uri, "Split-train") for a in examples]}

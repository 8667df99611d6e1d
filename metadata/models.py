"""Every trained model: its steps, BLEU/chrF, blessing, pushed version, and whether it is the
one being served."""
from __future__ import annotations

import os
from typing import Any

import ml_metadata as mlmd
from ml_metadata.proto import metadata_store_pb2

from components.serving_versions import SERVED_PATH
from metadata.artifacts import (blessing_properties, model_hparams, pushed_properties,
                                total_train_steps, trained_steps)
from metadata.graph import Graph, load_graph
from metadata.values import custom_properties, iso


def _pushes(graph: Graph) -> dict[int, list[dict[str, Any]]]:
    """Model id -> the versions it was pushed as (PushedModel properties), oldest first."""
    pushes: dict[int, list[dict[str, Any]]] = {}
    for artifact in sorted(graph.artifacts.values(), key=lambda a: a.id):
        pushed = pushed_properties(graph, artifact) if artifact.type == "PushedModel" else {}
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


def _latest_blessing(graph: Graph, model_id: int) -> metadata_store_pb2.Artifact | None:
    """The blessing of the newest evaluation of this model as the candidate (not baseline)."""
    found = [blessing for e in sorted(graph.executions)
             if ("model", model_id) in graph.inputs.get(e, [])
             for blessing in graph.outputs_of_type(e, "ModelBlessing")]
    return found[-1] if found else None


def list_models(store: mlmd.MetadataStore) -> list[dict[str, Any]]:
    """Every trained model, newest first: steps, BLEU/chrF, blessed, pushed version, and
    whether it is the one being served."""
    graph = load_graph(store)
    pushes = _pushes(graph)
    serving = _serving(pushes)
    models = []
    trained = (a for a in graph.artifacts.values()  # not a warm start's copy of a served one
               if a.type == "Model" and SERVED_PATH not in custom_properties(a))
    for model in sorted(trained, key=lambda a: a.id, reverse=True):
        blessing = _latest_blessing(graph, model.id)
        judged = blessing_properties(graph, blessing) if blessing else {}
        model_pushes = sorted(pushes.get(model.id, []), key=lambda p: int(p["version"]))
        models.append({
            "model": model.id, "run": graph.run_name(graph.producer.get(model.id)),
            "created": iso(model.create_time_since_epoch),
            "train_steps": (model_hparams(graph, model) or {}).get("train_steps"),
            "trained_steps": trained_steps(graph, model),
            "total_train_steps": total_train_steps(model),
            "bleu_1ref": judged.get("bleu_1ref"), "chrf_1ref": judged.get("chrf_1ref"),
            "bleu": judged.get("bleu"), "chrf": judged.get("chrf"),
            "blessed": judged.get("blessed"), "baseline_model": judged.get("baseline_model"),
            "pushed_version": model_pushes[-1]["version"] if model_pushes else None,
            "serving": any(p["destination"] in serving for p in model_pushes),
            "uri": model.uri})
    return models

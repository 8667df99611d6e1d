"""What the artifacts hold: the files they point to (local paths, or gs:// etc. through
TensorFlow), what each artifact type says (an Examples' splits and input file, an evaluation's
BLEU/chrF, a blessing, a push), and `list_artifacts`."""
from __future__ import annotations

import contextlib
import functools
import glob
import gzip
import json
import logging
import os
import struct
from typing import IO, Any, Callable

import ml_metadata as mlmd
from ml_metadata.proto import metadata_store_pb2

from components.serving_versions import SERVED_PATH, SERVED_VERSION
from metadata.graph import Graph, find_run, load_graph
from metadata.store import MetadataError
from metadata.values import custom_properties, iso
from trainer_module.settings import HISTORY_FILE, HPARAMS_FILE, TRAINING_RECORD

SERVING_MODEL_DIR = "Format-Serving"  # the SavedModel inside a Model artifact


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

def input_file(artifact: metadata_store_pb2.Artifact) -> dict[str, Any] | None:
    """The fra.txt an ExampleGen Examples artifact was read from (path, size, sha256)."""
    custom = custom_properties(artifact)
    if "input_sha256" not in custom:
        return None
    return {"path": custom["input_path"], "size_bytes": int(custom["input_size_bytes"]),
            "sha256": custom["input_sha256"]}


def _examples_properties(graph: Graph, artifact: metadata_store_pb2.Artifact) -> dict[str, Any]:
    custom = custom_properties(artifact)
    splits = json.loads(artifact.properties["split_names"].string_value or "[]")
    properties: dict[str, Any] = {
        "splits": {s: _count_records(os.path.join(artifact.uri, f"Split-{s}")) for s in splits}}
    properties.update({key: custom[key] for key in
                       ("lines_read", "pairs_kept", "lines_rejected", "examples") if key in custom})
    if (source := input_file(artifact)) is not None:
        properties["input"] = source
    return properties


def _evaluation_properties(graph: Graph, artifact: metadata_store_pb2.Artifact) -> dict[str, Any]:
    return dict(evaluation_metrics(artifact.uri)["overall"] or {})


def blessing_properties(graph: Graph, artifact: metadata_store_pb2.Artifact) -> dict[str, Any]:
    custom = custom_properties(artifact)
    evaluation = graph.sibling(artifact, "ModelEvaluation")
    return {"blessed": bool(custom.get("blessed")), "model": custom.get("current_model_id"),
            "baseline_model": custom.get("baseline_model_id"),
            "evaluation": evaluation.id if evaluation else None,
            **(_evaluation_properties(graph, evaluation) if evaluation else {})}


def pushed_properties(graph: Graph, artifact: metadata_store_pb2.Artifact) -> dict[str, Any]:
    custom = custom_properties(artifact)
    return {"pushed": bool(custom.get("pushed")), "version": custom.get("pushed_version"),
            "destination": custom.get("pushed_destination")}


def _model_properties(graph: Graph, artifact: metadata_store_pb2.Artifact) -> dict[str, Any]:
    """The steps behind a trained model; for a warm start's base, the served version it is."""
    served = custom_properties(artifact)
    if SERVED_PATH in served:  # a warm start's base ("": nothing was served yet)
        return {"served_version": served[SERVED_VERSION] or "none",
                "served_path": served[SERVED_PATH] or "-"}
    total = total_train_steps(artifact)
    return {"total_train_steps": total} if total is not None else {}


_PROPERTIES: dict[str, Callable[[Graph, metadata_store_pb2.Artifact], dict[str, Any]]] = {
    "Examples": _examples_properties,
    "Model": _model_properties,
    "ModelEvaluation": _evaluation_properties,
    "ModelBlessing": blessing_properties,
    "PushedModel": pushed_properties,
}


def describe(graph: Graph, artifact: metadata_store_pb2.Artifact) -> dict[str, Any]:
    """An artifact as the queries list it: its producer, run, and what its type says."""
    producer = graph.producer.get(artifact.id)
    properties = _PROPERTIES.get(artifact.type)
    return {"id": artifact.id, "type": artifact.type, "uri": artifact.uri,
            "producer": graph.node_of_execution.get(producer), "run": graph.run_name(producer),
            "created": iso(artifact.create_time_since_epoch),
            "properties": properties(graph, artifact) if properties else {}}


def list_artifacts(store: mlmd.MetadataStore, type_name: str | None = None,
                   run_id: str | None = None) -> list[dict[str, Any]]:
    """Artifacts, newest first, with their producer, run and key properties; optionally one
    type, or what one run's components output (cached ones included)."""
    graph = load_graph(store)
    artifacts = list(graph.artifacts.values()) if run_id is None else \
        graph.run_outputs(find_run(graph, run_id))
    if type_name is not None:
        known = sorted({a.type for a in graph.artifacts.values()})
        if type_name not in known:
            raise MetadataError(f"No artifacts of type {type_name!r}; types in the store: "
                                f"{', '.join(known)}.")
        artifacts = [a for a in artifacts if a.type == type_name]
    return [describe(graph, a) for a in sorted(artifacts, key=lambda a: a.id, reverse=True)]


# --- What the Trainer wrote beside a Model ------------------------------------------------

def _model_run_json(graph: Graph, model: metadata_store_pb2.Artifact, name: str) -> Any:
    """A JSON file the Trainer wrote into the ModelRun output next to the Model, or None."""
    model_run = graph.sibling(model, "ModelRun")
    return read_json(os.path.join(model_run.uri, name)) if model_run else None


def model_hparams(graph: Graph, model: metadata_store_pb2.Artifact) -> dict[str, Any] | None:
    """The Trainer's full hyperparameters."""
    return _model_run_json(graph, model, HPARAMS_FILE)


def total_train_steps(model: metadata_store_pb2.Artifact) -> int | None:
    """The training steps behind a model: its own, plus its base's total for a warm start
    (the record in its SavedModel; None for a model exported before records existed)."""
    record = read_json(os.path.join(model.uri, "Format-Serving", TRAINING_RECORD))
    return record.get("total_train_steps") if record else None


def trained_steps(graph: Graph, model: metadata_store_pb2.Artifact) -> int | None:
    """Steps actually trained: fewer than train_steps when a time budget stopped training."""
    history = _model_run_json(graph, model, HISTORY_FILE)
    return history[-1].get("step") if history else None

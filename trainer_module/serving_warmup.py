"""TF Serving's warm-up requests, written into the export
(`assets.extra/tf_serving_warmup_requests`, TF Serving's SavedModel warm-up): TF Serving
replays them when it loads a version, before the version serves. TensorFlow optimizes a
loaded signature's graph at its first call, which takes seconds (BENCHMARKS.md, "Decoding
speed", the first request); with this file a server pays that at load, not on a user's
first request. `nmt translate` and the Evaluator load the model themselves and pay it once.
"""
from __future__ import annotations

import os
from typing import Sequence

import tensorflow as tf

from transform_module.preprocessing import ENGLISH

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
# A short sentence and a long one with clauses: the signature's paths for both (a request of
# long sentences is cut into clauses first).
WARMUP_SENTENCES = ("Hello.", "When the rain stopped, we went out for a walk in the park, but "
                    "it started again before we could get home, so we waited under a tree.")


def write_warmup_requests(export_dir: str, signatures: Sequence[str]) -> None:
    """Writes one PredictionLog per signature (those a client calls: export.export_translator
    names greedy and beam search; the Evaluator loads the model itself)."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    path = os.path.join(export_dir, WARMUP_FILE)
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.TFRecordWriter(path) as writer:
        for signature in signatures:
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(signature_name=signature))
            request.inputs[ENGLISH].CopyFrom(tf.make_tensor_proto(list(WARMUP_SENTENCES)))
            writer.write(prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)).SerializeToString())

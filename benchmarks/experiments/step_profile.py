"""Where a training step's time goes: TensorFlow's profiler over a few steps of a profile's
model, its op time summed by op type and by name scope.

Trains the profile's model (one precision) on the first batches of the training split, as
`step_time.py` does, traces the steps of one `budget.seconds_per_step` call (two passes over
the batches) with `tf.profiler`, and reads the trace (the XSpace protobuf it writes). Times are
CPU milliseconds per step summed over TensorFlow's compute threads, so on 2 cores they add up
to about twice the wall time of a step. The name scope of a gradient op starts with
`gradient_tape/`; the loss is `global_token_mean_cross_entropy`.

Usage: python -m benchmarks.experiments.step_profile --pipeline-root nmt_runs [--profile cpu]
           [--precision mixed_bfloat16] [--steps 10] [--top 25] [--output result.json]
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import tempfile

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from benchmarks import pipeline_outputs, results
from trainer_module import budget, devices, hparams as hparams_lib
from trainer_module.input_pipeline import make_dataset
from trainer_module.task import build_keras_model

_COMPUTE_THREADS = "tf_Compute"  # the trace lines of the executor's op kernels


def op_times(xspace_path: str, steps: int) -> tuple[collections.Counter, collections.Counter]:
    """(ms per step by op type, ms per step by name scope) of the ops in a trace. A gradient
    op's scope is its first three name parts (gradient_tape/transformer/decoder_0), others'
    their first two."""
    space = xplane_pb2.XSpace()
    with open(xspace_path, "rb") as f:
        space.ParseFromString(f.read())
    by_type: collections.Counter = collections.Counter()
    by_scope: collections.Counter = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if not line.name.startswith(_COMPUTE_THREADS):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if ":" not in name or "::" in name:  # the executor's own spans, not an op
                    continue
                op_name, op_type = name.rsplit(":", 1)
                ms = event.duration_ps / 1e9 / steps
                parts = op_name.split("/")
                by_type[op_type] += ms
                by_scope["/".join(parts[:3 if parts[0] == "gradient_tape" else 2])] += ms
    return by_type, by_scope


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--precision", default="mixed_bfloat16")
    parser.add_argument("--steps", type=int, default=10, help="batches per pass (two are traced)")
    parser.add_argument("--top", type=int, default=25, help="op types and scopes reported")
    parser.add_argument("--output", help="also write the result here (JSON)")
    args, output, train_files, base = pipeline_outputs.parse_training_args(parser)
    hparams = hparams_lib.with_overrides(base, {"precision": args.precision})
    batches = list(make_dataset(train_files, output, hparams, training=True,
                                seed=0).take(args.steps))
    model = build_keras_model(hparams)
    budget.seconds_per_step(model, batches)  # trace the train function first
    with tempfile.TemporaryDirectory() as log_dir:
        tf.profiler.experimental.start(log_dir)
        wall_ms = budget.seconds_per_step(model, batches) * 1000
        tf.profiler.experimental.stop()
        trace, = glob.glob(os.path.join(log_dir, "**", "*.xplane.pb"), recursive=True)
        by_type, by_scope = op_times(trace, steps=2 * len(batches))
    total = sum(by_type.values())
    result = {
        "profile": args.profile, "precision": args.precision,
        "cpu_bfloat16_units": devices.cpu_has_bfloat16_units(),
        "onednn_kernels": devices.onednn_enabled(), "traced_steps": 2 * len(batches),
        "wall_ms_per_step_traced": round(wall_ms, 1), "op_cpu_ms_per_step": round(total, 1),
        "by_op_type": {k: round(v, 1) for k, v in by_type.most_common(args.top)},
        "by_scope": {k: round(v, 1) for k, v in by_scope.most_common(args.top)},
        "loss_share": round(sum(v for k, v in by_scope.items()
                                if "cross_entropy" in k) / total, 3),
    }
    results.emit(args.output, "where a training step's time goes: op time by op type and name "
                 "scope, from TensorFlow's profiler", result)


if __name__ == "__main__":
    main()

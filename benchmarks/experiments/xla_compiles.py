"""XLA compilations of a `base`-shaped training run: batches padded to each batch's longest pair
(before) vs to its length bucket's boundary (after, what the Trainer does under XLA).

The number of compilations depends only on the batch shapes, so the run uses the `base` profile's
batching (batch_tokens 8192, up to 128 tokens) and length buckets on the real data with the
`smoke` profile's tiny model, which keeps each compilation short. Counted from TensorFlow's own
log of XLA compilations (device_compilation_profiler), one child process per variant. XLA
compiles one program per distinct input shape, so the distinct batch shapes of the first
`--steps` batches are what a run of that many steps compiles; `--train-steps` of them are really
trained (all of them by default) to show the log agrees.

Usage: python benchmarks/experiments/xla_compiles.py --pipeline-root /work/runs/full [--steps 200]
           [--train-steps N]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import time

_COMPILED = re.compile(r"Compiled (__inference_\w+) (\d+) times")


def child(pipeline_root: str, steps: int, train_steps: int, pad_to_boundary: bool) -> None:
    """Trains `train_steps` XLA-compiled steps; prints the distinct batch shapes of the first
    `train_steps` and `steps` batches as JSON."""
    from benchmarks.pipeline_outputs import latest_transform
    from trainer_module import hparams as hparams_lib
    from trainer_module.input_pipeline import make_dataset
    from trainer_module.task import build_keras_model, with_vocabularies

    output, train_files = latest_transform(pipeline_root)
    base = hparams_lib.get_profile("base")
    hparams = with_vocabularies(dataclasses.replace(
        hparams_lib.get_profile("smoke"), batch_tokens=base.batch_tokens,
        max_source_length=base.max_source_length, max_target_length=base.max_target_length,
        use_xla=True), output)
    dataset = make_dataset(train_files, output, hparams,
                           training=True, seed=0, pad_to_boundary=pad_to_boundary)
    model = build_keras_model(hparams)
    model.fit(dataset, steps_per_epoch=train_steps, verbose=0)
    shapes = [tuple(tuple(t.shape) for t in (inputs[0], inputs[1], labels))
              for inputs, labels in dataset.take(steps)]
    print(json.dumps({"distinct_batch_shapes": len(set(shapes)),
                      "distinct_batch_shapes_trained": len(set(shapes[:train_steps]))}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pipeline-root", required=True)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--train-steps", type=int, default=None)
    args = parser.parse_args()
    train_steps = args.train_steps or args.steps
    results = {"steps": args.steps, "trained_steps": train_steps}
    for name, pad in (("before_dynamic_padding", False), ("after_bucket_boundaries", True)):
        start = time.time()
        proc = subprocess.run(
            [sys.executable, __file__, "--child", args.pipeline_root, str(args.steps),
             str(train_steps), str(pad)],
            capture_output=True, text=True, check=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0",
                 "TF_CPP_VMODULE": "device_compilation_profiler=1"})
        counts: dict[str, int] = {}
        for function, count in _COMPILED.findall(proc.stderr):
            counts[function] = max(counts.get(function, 0), int(count))
        results[name] = {**json.loads(proc.stdout.strip().splitlines()[-1]),
                         "xla_compilations_trained": sum(counts.values()),
                         "wall_seconds": round(time.time() - start)}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "True")
    else:
        main()

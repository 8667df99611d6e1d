"""Memory of the Trainer's cached training pairs per byte of Transform's gzip output.

Reads a pipeline root's transformed train split with `input_pipeline.read_pairs(...).cache()`,
twice (the second pass is served from the cache), and compares the process's RSS before and
after: the number behind `input_pipeline.CACHE_BYTES_PER_FILE_BYTE`.

    python benchmarks/experiments/cache_memory.py --pipeline-root nmt_runs --profile cpu
"""
from __future__ import annotations

import argparse
import glob
import json
import os

import psutil
import tensorflow_transform as tft

from trainer_module import input_pipeline
from trainer_module.hparams import get_profile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline-root", required=True)
    parser.add_argument("--profile", default="cpu")
    args = parser.parse_args()
    graph = sorted(glob.glob(os.path.join(args.pipeline_root, "Transform", "transform_graph", "*")))
    files = sorted(glob.glob(os.path.join(args.pipeline_root, "Transform",
                                          "transformed_examples", "*", "Split-train", "*")))
    output = tft.TFTransformOutput(graph[-1])
    hparams = get_profile(args.profile)
    for _ in input_pipeline.read_pairs(files, output, hparams):  # traces and loads everything
        pass
    process = psutil.Process()
    before = process.memory_info().rss
    cached = input_pipeline.read_pairs(files, output, hparams).cache()
    pairs = sum(1 for _ in cached)
    assert pairs == sum(1 for _ in cached)  # the second pass comes from the cache
    grown = process.memory_info().rss - before
    file_bytes = sum(os.path.getsize(f) for f in files)
    print(json.dumps({"pairs": pairs, "file_bytes": file_bytes, "cached_bytes": grown,
                      "bytes_per_pair": round(grown / pairs),
                      "bytes_per_file_byte": round(grown / file_bytes, 1)}))


if __name__ == "__main__":
    main()

"""Runs the data half (ExampleGen .. StrictExampleValidator) on a fra.txt and checks it.

Usage: python benchmarks/data_half.py --data ../shared/data/fra-eng/fra.txt [--beam-arg ...]
Prints wall time, example/pair counts, split sizes vs. the configured ratios and the
English sentences shared between splits (must be 0), as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import ml_metadata as mlmd
from ml_metadata.proto import metadata_store_pb2

from benchmarks import results
from components.fra_example_gen.records import read_split

SPLITS = ("train", "eval", "test")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True)
    parser.add_argument("--split", default="80,10,10")
    parser.add_argument("--beam-arg", action="append", default=[])
    parser.add_argument("--output", help="also write a result file (a bare name: in "
                                         "benchmarks/results/)")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="nmt_data_half_")
    command = [sys.executable, "-m", "cli", "run", "--data", args.data,
               "--pipeline-root", root, "--split", args.split, "--to", "StrictExampleValidator",
               *[f"--beam-arg={a}" for a in args.beam_arg]]
    start = time.time()
    subprocess.run(command, check=True)
    wall_s = time.time() - start

    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = os.path.join(root, "metadata.sqlite")
    examples = mlmd.MetadataStore(config).get_artifacts_by_type("Examples")[-1]
    report = json.loads(examples.custom_properties["parse_report"].string_value)
    english = {split: [e for e, _ in read_split(examples.uri, split)] for split in SPLITS}
    total = sum(len(v) for v in english.values())
    ratios = [int(p) for p in args.split.split(",")]
    sets = {split: set(v) for split, v in english.items()}
    counts = {
        "command": " ".join(command[1:]),
        "wall_time_s": round(wall_s, 1),
        "lines_read": report["lines_read"],
        "pairs_kept": report["pairs_kept"],
        "lines_rejected": report["lines_rejected"],
        "kept_plus_rejected": report["pairs_kept"] + report["lines_rejected"],
        "examples": total,
        "distinct_english": len(set().union(*sets.values())),
        "split_sizes": {s: len(v) for s, v in english.items()},
        "split_percent": {s: round(100 * len(v) / total, 2) for s, v in english.items()},
        "max_deviation_points": round(max(abs(100 * len(english[s]) / total - r)
                                          for s, r in zip(SPLITS, ratios)), 2),
        "english_shared_between_splits": sum(
            len(sets[a] & sets[b]) for a, b in (("train", "eval"), ("train", "test"),
                                                ("eval", "test"))),
        "input_sha256": report["input"]["sha256"],
    }
    results.emit(args.output, "fra.txt through the data half: lines, examples, splits", counts)


if __name__ == "__main__":
    main()

"""The data half: ExampleGen -> StatisticsGen -> schema -> validator.

The read-only checks look at the session's smoke pipeline root (conftest.smoke_run) instead
of a run of their own; a killed run is compared with it. Small inputs written by the tests:
test_data_checks.py (a module of its own, so it runs beside the smoke root's modules).
"""
from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time

from google.protobuf import json_format

from components.fra_example_gen.records import read_split
from helpers import (DATA_HALF, REPO, cached_components, latest_artifact, open_store,
                     split_records)

UPSTREAM = ("FraTxtExampleGen", "ImportSchemaGen", "StatisticsGen", "StrictExampleValidator",
            "Transform")


def expected_groups(path: str) -> dict[str, list[str]]:
    groups = collections.defaultdict(list)
    with open(path, encoding="utf-8") as f:
        for line in f:
            english, french = line.rstrip("\n").split("\t")[:2]
            groups[english].append(french)
    return groups


def test_examples_are_one_per_english_sentence_with_every_reference(fra_sample, smoke_run):
    splits = {split: read_split(smoke_run.examples_uri, split)
              for split in ("train", "eval", "test")}
    produced = {english: refs for rows in splits.values() for english, refs in rows}
    expected = expected_groups(fra_sample)
    assert sum(len(rows) for rows in splits.values()) == len(expected) == len(produced)
    assert produced == expected  # every reference kept, in file order


def test_splits_are_disjoint_by_english_and_near_the_ratios(smoke_run):
    english = {split: {e for e, _ in read_split(smoke_run.examples_uri, split)}
               for split in ("train", "eval", "test")}
    assert not english["train"] & english["eval"]
    assert not english["train"] & english["test"]
    assert not english["eval"] & english["test"]
    total = sum(len(s) for s in english.values())
    assert abs(len(english["train"]) / total - 0.8) < 0.05


def test_parse_report_is_recorded_in_the_artifact_and_the_log(fra_sample, smoke_run):
    examples = latest_artifact(open_store(smoke_run.root), "Examples", "FraTxtExampleGen")
    with open(os.path.join(examples.uri, "parse_report.json")) as f:
        report = json.load(f)
    lines = open(fra_sample, "rb").read().count(b"\n")
    assert report["lines_read"] == report["pairs_kept"] == lines
    assert report["lines_rejected"] == 0
    assert examples.custom_properties["lines_read"].int_value == lines
    assert examples.custom_properties["input_sha256"].string_value == report["input"]["sha256"]
    assert f"read {lines} lines" in smoke_run.killed_log  # the first run executed ExampleGen
    assert "Component StrictExampleValidator is finished." in smoke_run.killed_log


def test_validation_passes_on_real_data(smoke_run):
    anomalies = latest_artifact(open_store(smoke_run.root), "ExampleAnomalies",
                                "StrictExampleValidator")  # Transform writes some too
    blessed = json_format.MessageToDict(anomalies.custom_properties["blessed"].struct_value)
    assert blessed == {"train": 1, "eval": 1, "test": 1}


def test_rerun_on_unchanged_input_is_cached_even_with_a_new_mtime(smoke_rerun):
    """The smoke root's third run changes only the Trainer's steps, and fra.txt's modification
    time (not its content): the data half and Transform come from the cache."""
    for component in UPSTREAM:
        assert f"Component {component} is running." in smoke_rerun.stderr
    assert cached_components(smoke_rerun.stderr) == len(UPSTREAM)
    assert "fra.txt ExampleGen: read" not in smoke_rerun.stderr  # the executor never ran


def test_killed_run_can_be_rerun_without_cleanup(fra_sample, smoke_run, tmp_path, nmt_pipeline):
    root = str(tmp_path / "root")
    args = [sys.executable, "-m", "cli", "run", "--data", fra_sample,
            "--pipeline-root", root, *DATA_HALF]
    proc = subprocess.Popen(args, cwd=REPO, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.time() + 300
    for line in proc.stderr:  # kill it while StatisticsGen is running
        if "Component StatisticsGen is running" in line or time.time() > deadline:
            break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    result = nmt_pipeline("--data", fra_sample, "--pipeline-root", root, *DATA_HALF)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Component StrictExampleValidator is finished." in result.stderr
    assert cached_components(result.stderr) >= 1  # ExampleGen reused
    # Same input, another pipeline root: byte-identical examples in the same splits.
    store = open_store(root)
    assert split_records(latest_artifact(store, "Examples", "FraTxtExampleGen").uri) == \
        split_records(smoke_run.examples_uri)

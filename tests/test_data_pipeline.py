"""The data half: ExampleGen -> StatisticsGen -> schema -> validator.

The read-only checks look at the session's smoke pipeline root (conftest.smoke_run) instead
of a run of their own; the others run `nmt run --to StrictExampleValidator` on small inputs.
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

from components.fra_example_gen.executor import read_split
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


BAD_LINES = (b"\xef\xbb\xbfGo.\tVa !\r\n"  # BOM + CRLF: kept
             b"\n"  # blank
             b"No tab at all\n"
             b"\tPas d'anglais.\n"
             b"No French.\t\n"
             b"Too\tmany\tcolumns\there\n"
             b"Bad \xff bytes.\tMauvais.\n"
             b"Nul \x00 byte.\tNul.\n"
             + b"Long " + b"x" * 3000 + b"\tLong.\n"
             + b"Hi.\tSalut !\tCC-BY 2.0 (France) Attribution: tatoeba.org\n")


def test_bad_lines_are_counted_not_fatal(tmp_path, nmt_pipeline):
    data = tmp_path / "data" / "fra.txt"
    data.parent.mkdir()
    data.write_bytes(BAD_LINES + "".join(f"Sentence {i}.\tPhrase {i}.\n" for i in range(60))
                     .encode())
    root = str(tmp_path / "root")
    result = nmt_pipeline("--data", str(data), "--pipeline-root", root, *DATA_HALF)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(latest_artifact(open_store(root), "Examples", "FraTxtExampleGen")
                        .custom_properties["parse_report"].string_value)
    assert report["lines_read"] == 70 == report["pairs_kept"] + report["lines_rejected"]
    assert report["pairs_kept"] == 62
    assert {k: v["count"] for k, v in report["rejected_by_reason"].items()} == {
        "blank_line": 1, "no_tab": 1, "empty_english": 1, "empty_french": 1,
        "too_many_columns": 1, "invalid_utf8": 1, "nul_byte": 1, "too_long": 1}
    assert report["rejected_by_reason"]["invalid_utf8"]["samples"] == [
        {"file": str(data), "line": 7, "byte_offset": 78}]
    assert report["files"][str(data)]["rejected_by_reason"]["invalid_utf8"][
        "sample_line_numbers"] == [7]
    assert "rejected 8 [blank_line: 1 (e.g. line 2)" in result.stderr


def test_a_sentence_translated_10000_times_is_capped_not_an_anomaly(tmp_path, nmt_pipeline):
    """Issue #28: a hot sentence keeps the schema's 64 references, the rest are counted."""
    data = tmp_path / "data" / "fra.txt"
    data.parent.mkdir()
    data.write_bytes("".join([f"Go.\tVa {i} !\n" for i in range(10_000)]
                             + [f"Sentence {i}.\tPhrase {i}.\n" for i in range(60)]
                             + ["Go.\tVa 1 !\n"] * 5).encode())
    root = str(tmp_path / "root")
    result = nmt_pipeline("--data", str(data), "--pipeline-root", root, *DATA_HALF)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Component StrictExampleValidator is finished." in result.stderr
    examples = latest_artifact(open_store(root), "Examples", "FraTxtExampleGen")
    report = json.loads(examples.custom_properties["parse_report"].string_value)
    assert (report["lines_read"], report["duplicate_pairs"], report["references_over_cap"],
            report["examples"]) == (10_065, 5, 10_000 - 64, 61)
    go = {english: refs for split in ("train", "eval", "test")
          for english, refs in read_split(examples.uri, split)}["Go."]
    assert len(go) == 64


def test_anomaly_stops_the_pipeline_before_transform(tmp_path, nmt_pipeline):
    """A cap raised above the schema's limit: 'Go.' keeps 70 references (schema max 64)."""
    data = tmp_path / "fra.txt"
    data.write_bytes("".join(f"Go.\tVa {i} !\n" for i in range(70)).encode()
                     + b"Hi.\tSalut !\n")
    root = str(tmp_path / "root")
    result = nmt_pipeline("--data", str(data), "--pipeline-root", root, "--profile", "smoke",
                          "--max-references", "100")
    assert result.returncode == 1
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("nmt: error: Data validation failed")
    assert "feature 'french'" in message and "values" in message
    store = open_store(root)
    assert not store.get_artifacts_by_type("TransformGraph")
    assert not store.get_artifacts_by_type("Model")


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

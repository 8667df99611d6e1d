"""The data half on small inputs written here, through `nmt run`: bad lines are counted, not
fatal, and a sentence translated 10,000 times is capped, not an anomaly (one run on one file
with both); an anomaly stops the run before Transform. (The checks on the smoke root's data
are in test_data_pipeline.py.)
"""
from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest

from components.fra_example_gen.records import read_split
from helpers import DATA_HALF, latest_artifact, open_store


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


@dataclasses.dataclass
class MessyRun:
    data: str
    root: str
    result: subprocess.CompletedProcess
    report: dict
    examples_uri: str


@pytest.fixture(scope="module")
def messy_run(tmp_path_factory, nmt_pipeline) -> MessyRun:
    """One data-half run on a file with the bad lines above, a sentence translated 10,000
    times ("Go.", also one of the bad lines' good ones), duplicated pairs and 60 plain pairs."""
    tmp = tmp_path_factory.mktemp("messy")
    data = tmp / "data" / "fra.txt"
    data.parent.mkdir()
    data.write_bytes(BAD_LINES + "".join([f"Go.\tVa {i} !\n" for i in range(10_000)]
                                         + [f"Sentence {i}.\tPhrase {i}.\n" for i in range(60)]
                                         + ["Go.\tVa 1 !\n"] * 5).encode())
    root = str(tmp / "root")
    result = nmt_pipeline("--data", str(data), "--pipeline-root", root, *DATA_HALF)
    assert result.returncode == 0, result.stderr[-3000:]
    examples = latest_artifact(open_store(root), "Examples", "FraTxtExampleGen")
    return MessyRun(str(data), root, result,
                    json.loads(examples.custom_properties["parse_report"].string_value),
                    examples.uri)


def test_bad_lines_are_counted_not_fatal(messy_run):
    report, data = messy_run.report, messy_run.data
    assert report["lines_read"] == 10_075 == report["pairs_kept"] + report["lines_rejected"]
    assert report["lines_rejected"] == 8
    assert {k: v["count"] for k, v in report["rejected_by_reason"].items()} == {
        "blank_line": 1, "no_tab": 1, "empty_english": 1, "empty_french": 1,
        "too_many_columns": 1, "invalid_utf8": 1, "nul_byte": 1, "too_long": 1}
    assert report["rejected_by_reason"]["invalid_utf8"]["samples"] == [
        {"file": data, "line": 7, "byte_offset": 78}]
    assert report["files"][data]["rejected_by_reason"]["invalid_utf8"][
        "sample_line_numbers"] == [7]
    assert "rejected 8 [blank_line: 1 (e.g. line 2)" in messy_run.result.stderr


def test_a_sentence_translated_10000_times_is_capped_not_an_anomaly(messy_run):
    """Issue #28: a hot sentence keeps the schema's 64 references, the rest are counted."""
    assert "Component StrictExampleValidator is finished." in messy_run.result.stderr
    report = messy_run.report
    # "Go." has 10,001 distinct references ("Va !" and "Va 0 !" to "Va 9999 !"); the
    # examples are "Go.", "Hi." and the 60 sentences.
    assert (report["duplicate_pairs"], report["references_over_cap"], report["examples"]) == (
        5, 10_001 - 64, 62)
    go = {english: refs for split in ("train", "eval", "test")
          for english, refs in read_split(messy_run.examples_uri, split)}["Go."]
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

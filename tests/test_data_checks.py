"""The data half on small inputs written here, each through `nmt run`: bad lines are counted,
not fatal; a sentence translated 10,000 times is capped, not an anomaly; an anomaly stops the
run before Transform. (The checks on the smoke root's data are in test_data_pipeline.py.)
"""
from __future__ import annotations

import json

from components.fra_example_gen.executor import read_split
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

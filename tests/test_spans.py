"""New data as numbered spans (issue #65): `--data 'DIR/fra-{SPAN}.txt'` reads the newest span,
`--spans N` the newest N; ML Metadata and `nmt metadata runs` say which; a new span re-runs
ExampleGen and an unchanged one is cached; a bad pattern fails before anything runs.

Real TFX (LocalDagRunner) up to FraTxtExampleGen, on spans of a few hundred lines of fra.txt.
"""
from __future__ import annotations

import json
import os

import pytest

from components.fra_example_gen import spans
from components.fra_example_gen.records import read_split
from helpers import cached_components, latest_artifact, open_store, run_nmt
from metadata.runs import list_runs
from pipeline import data_source

SPAN_LINES = 200
PATTERN = "fra-{SPAN}.txt"
TO_EXAMPLE_GEN = ("--to", "FraTxtExampleGen")


def write_span(directory, span: int, fra_sample: str) -> None:
    """Span `span`'s file: its own block of the sample (spans 9, 10, 11... hold different ones)."""
    with open(fra_sample, "rb") as f:
        lines = f.readlines()
    start = (span - 9) * SPAN_LINES
    (directory / f"fra-{span}.txt").write_bytes(b"".join(lines[start:start + SPAN_LINES]))


def english_of(directory, *span_numbers: int) -> set[str]:
    return {line.split("\t")[0] for span in span_numbers
            for line in (directory / f"fra-{span}.txt").read_text(encoding="utf-8").splitlines()}


def produced_english(examples_uri: str) -> set[str]:
    return {english for split in ("train", "eval", "test")
            for english, _ in read_split(examples_uri, split)}


# --- Bad patterns: refused before anything runs -----------------------------------------------

# (pattern, files in the directory, what the error says, whether TFX's driver refuses it too:
# a {SPAN} in a directory and {VERSION} are nmt's own limits)
BAD_PATTERNS = [
    ("fra-{SPAN}-{SPAN}.txt", ["fra-1-1.txt"], "has {SPAN} 2 times; it may appear once", True),
    ("{SPAN}/fra.txt", ["1/fra.txt"], "has {SPAN} in a directory; it must be in the file name",
     False),
    ("fra-{SPAN}.txt", ["other.txt"], "matches no file", True),
    ("fra-{SPAN}.txt", ["fra-1.txt", "fra-old.txt"],
     "matches '{dir}/fra-old.txt', which has no span number where {SPAN} is", True),
    ("fra*{SPAN}.txt", ["fra-1.txt"], "has * right before {SPAN}", True),
    ("fra-{SPAN:x}.txt", ["fra-1.txt"], "has {SPAN:x}; a width must be a positive whole number",
     True),
    ("fra-{SPAN}-{VERSION}.txt", ["fra-1-1.txt"], "has {VERSION}; nmt numbers spans with "
                                                  "{SPAN} only", False),
]


@pytest.mark.parametrize("pattern,files,message,tfx_refuses", BAD_PATTERNS,
                         ids=[f"{case[0]}:{','.join(case[1])}" for case in BAD_PATTERNS])
def test_a_bad_span_pattern_fails_with_one_sentence(tmp_path, pattern, files, message,
                                                    tfx_refuses):
    from tfx.components.example_gen import utils
    from tfx.proto import example_gen_pb2

    for name in files:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("Go.\tVa !\n")
    path = str(tmp_path / pattern)

    with pytest.raises(data_source.DataSourceError) as raised:
        data_source.resolve_data_path(path)
    assert str(raised.value).startswith(f"--data {path!r} ")
    assert message.replace("{dir}", str(tmp_path)) in str(raised.value)
    assert str(raised.value).endswith(".") and "\n" not in str(raised.value)

    if tfx_refuses:  # the rules are TFX's: its driver would fail on the same input
        with pytest.raises(ValueError):
            utils.calculate_splits_fingerprint_span_and_version(
                str(tmp_path), [example_gen_pb2.Input.Split(name="single_split",
                                                            pattern=pattern)])


def test_newest_spans_need_a_span_pattern(tmp_path):
    (tmp_path / "fra.txt").write_text("Go.\tVa !\n")
    with pytest.raises(data_source.DataSourceError,
                       match=r"--spans 2 reads the newest of numbered files .* has no \{SPAN\}"):
        data_source.resolve_data_path(str(tmp_path / "fra.txt"), newest_spans=2)


def test_the_command_stops_before_anything_runs(tmp_path):
    root = tmp_path / "root"
    result = run_nmt("run", "--data", str(tmp_path / "fra-{SPAN}{SPAN}.txt"),
                     "--pipeline-root", str(root), timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"nmt: error: --data '{tmp_path}/fra-{{SPAN}}{{SPAN}}.txt' has {{SPAN}} 2 times; it may "
        "appear once."]
    assert not root.exists()


def test_span_numbers_and_the_newest_are_tfxs(tmp_path):
    """By number, not by name (fra-9 sorts after fra-10), zero padded with a width."""
    from tfx.components.example_gen import utils
    from tfx.proto import example_gen_pb2

    for name in ("fra-9.txt", "fra-10.txt", "fra-2.txt", "x-007.txt", "x-012.txt"):
        (tmp_path / name).write_text("Go.\tVa !\n")
    for pattern, newest in (("fra-{SPAN}.txt", [9, 10]), ("x-{SPAN:3}.txt", [7, 12])):
        full = str(tmp_path / pattern)
        found = spans.find_spans(full, [str(p) for p in tmp_path.glob(spans.files_glob(pattern))])
        assert spans.newest(found, 2) == newest
        assert [spans.fill(full, span) for span in newest] == [
            path for span in newest for path in found[span]]
        _, tfx_span, _ = utils.calculate_splits_fingerprint_span_and_version(
            str(tmp_path), [example_gen_pb2.Input.Split(name="single_split", pattern=pattern)])
        assert tfx_span == newest[-1]
    assert data_source.resolve_data_path(str(tmp_path / PATTERN), newest_spans=5) == str(
        tmp_path / PATTERN)  # fewer spans than asked for: all of them


def test_older_spans_come_first_whatever_their_names_sort_as(tmp_path):
    """A sentence's references are kept in this order: span 9's before span 10's."""
    paths = [str(tmp_path / name) for name in ("fra-10.txt", "fra-9.txt", "fra-11.txt")]
    assert spans.in_span_order(str(tmp_path / PATTERN), paths) == [
        str(tmp_path / name) for name in ("fra-9.txt", "fra-10.txt", "fra-11.txt")]
    padded = [str(tmp_path / f"fra-{span:03d}.{part}.txt") for span, part in
              ((2, "b"), (10, "a"), (2, "a"))]
    assert spans.in_span_order(str(tmp_path / "fra-{SPAN:3}.*.txt"), padded) == [
        padded[2], padded[0], padded[1]]


# --- Runs: the newest span, a new one, an unchanged one -----------------------------------------

@pytest.fixture(scope="module")
def span_dir(fra_sample, tmp_path_factory):
    """Spans 9 and 10 (10 is the newest though "fra-10.txt" sorts first); tests add 11."""
    directory = tmp_path_factory.mktemp("spans")
    for span in (9, 10):
        write_span(directory, span, fra_sample)
    return directory


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("spans_root"))


@pytest.fixture(scope="module")
def first_run(nmt_pipeline, span_dir, root):
    """`nmt run --data 'DIR/fra-{SPAN}.txt'` over spans 9 and 10."""
    result = nmt_pipeline("--data", str(span_dir / PATTERN), "--pipeline-root", root,
                          *TO_EXAMPLE_GEN)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def new_span_run(nmt_pipeline, first_run, fra_sample, span_dir, root):
    """Span 11 arrives; `--spans 2` reads 10 and 11."""
    write_span(span_dir, 11, fra_sample)
    result = nmt_pipeline("--data", str(span_dir / PATTERN), "--spans", "2",
                          "--pipeline-root", root, *TO_EXAMPLE_GEN)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_the_newest_span_is_read_and_recorded(first_run, span_dir, root):
    store = open_store(root)
    examples = latest_artifact(store, "Examples", "FraTxtExampleGen")
    assert produced_english(examples.uri) == english_of(span_dir, 10)
    assert examples.custom_properties["span"].int_value == 10  # TFX's own property
    assert examples.custom_properties["spans"].string_value == "10"
    assert examples.custom_properties["input_path"].string_value == str(span_dir / "fra-10.txt")
    assert f"read {SPAN_LINES} lines of {span_dir}/fra-10.txt (span 10)" in first_run.stderr
    assert list_runs(store)[-1]["spans"] == "10"


def test_a_new_span_reruns_example_gen(new_span_run, span_dir, root):
    store = open_store(root)
    examples = latest_artifact(store, "Examples", "FraTxtExampleGen")
    assert produced_english(examples.uri) == english_of(span_dir, 10, 11)
    assert examples.custom_properties["span"].int_value == 11
    assert examples.custom_properties["spans"].string_value == "10,11"
    assert cached_components(new_span_run.stderr) == 0
    assert f"read {2 * SPAN_LINES} lines of {span_dir}/{PATTERN} (spans 10,11; 2 files)" in \
        new_span_run.stderr
    with open(os.path.join(examples.uri, "parse_report.json")) as f:
        assert sorted(json.load(f)["files"]) == [str(span_dir / f"fra-{span}.txt")
                                                 for span in (10, 11)]


def test_unchanged_spans_are_a_cache_hit(nmt_pipeline, new_span_run, span_dir, root):
    result = nmt_pipeline("--data", str(span_dir / PATTERN), "--spans", "2",
                          "--pipeline-root", root, *TO_EXAMPLE_GEN)
    assert result.returncode == 0, result.stderr[-3000:]
    assert cached_components(result.stderr) == 1
    assert "fra.txt ExampleGen: read" not in result.stderr  # the executor never ran
    assert [run["spans"] for run in list_runs(open_store(root))] == ["10,11", "10,11", "10"]
    table = run_nmt("metadata", "runs", "--pipeline-root", root)
    assert table.returncode == 0, table.stderr
    header, newest = table.stdout.splitlines()[:2]
    assert newest[header.index("SPANS"):].startswith("10,11 ")

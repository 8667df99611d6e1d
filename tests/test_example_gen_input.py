"""ExampleGen at scale (issue #28): many files, plain and gzip, read in parallel byte ranges;
duplicate pairs collapsed and references capped per sentence; each input file hashed once per
run. Real Beam on small fixtures, through the executor itself (no `nmt run`)."""
from __future__ import annotations

import bisect
import collections
import gzip
import hashlib
import itertools
import json
import os
import random
import tempfile

import apache_beam as beam
import pytest
import tensorflow as tf
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.dsl.components.base.base_beam_executor import BaseBeamExecutor
from tfx.proto import example_gen_pb2
from tfx.types import standard_artifacts
from tfx.utils import proto_utils

from components.fra_example_gen import executor, fingerprint, parser, records, references, source
from components.fra_example_gen.component import split_output_config
from components.fra_example_gen.splits import split_hash_buckets
from helpers import split_records
from pipeline.config import DEFAULT_BEAM_ARGS
from runners import local_runner
from schemas import SCHEMA_FILE


@pytest.fixture(autouse=True, scope="module")
def _beam_as_nmt_runs_it():
    local_runner.without_tfx_package()  # no sdist of TFX before each executor, as in nmt run


def test_a_beam_executor_packages_tfx_only_for_workers_elsewhere(tmp_path, monkeypatch):
    """TFX's sdist of itself (a second and ~50 MB in a temporary directory, per Beam
    component): not for Beam's DirectRunner, which runs where TFX is installed; still for a
    runner whose workers may lack it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    local_runner.without_tfx_package()
    here = executor.Executor(BaseBeamExecutor.Context(
        beam_pipeline_args=list(DEFAULT_BEAM_ARGS)))
    assert not [arg for arg in here._beam_pipeline_args if arg.startswith("--extra_package")]
    assert not os.listdir(tmp_path)

    remote = executor.Executor(BaseBeamExecutor.Context(
        beam_pipeline_args=["--runner=DataflowRunner", "--project=p", "--region=r"]))
    [package] = [arg.split("=", 1)[1] for arg in remote._beam_pipeline_args
                 if arg.startswith("--extra_package=")]
    assert package.startswith(str(tmp_path)) and os.path.isfile(package)


def pairs_text(count: int, start: int = 0) -> bytes:
    return "".join(f"Sentence {i}.\tPhrase {i}.\n" for i in range(start, start + count)).encode()


def run_executor(tmp_path, input_base: str, pattern: str, beam_args: tuple[str, ...] = (),
                 name: str = "examples", split: tuple[float, ...] = (80, 10, 10),
                 **custom_config) -> tuple[dict, str]:
    """Executor.Do as TFX calls it; returns the parse report and the Examples URI."""
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / name)
    exec_properties = {
        "input_base": input_base,
        "input_config": proto_utils.proto_to_json(example_gen_pb2.Input(splits=[
            example_gen_pb2.Input.Split(name="single_split", pattern=pattern)])),
        "output_config": proto_utils.proto_to_json(split_output_config(split)),
        "custom_config": json.dumps(custom_config),
        "output_data_format": example_gen_pb2.FORMAT_TF_EXAMPLE,
        "output_file_format": example_gen_pb2.FORMAT_TFRECORDS_GZIP}
    context = BaseBeamExecutor.Context(beam_pipeline_args=list(beam_args))
    executor.Executor(context).Do({}, {"examples": [examples]}, exec_properties)
    with open(os.path.join(examples.uri, executor.REPORT_FILE)) as f:
        return json.load(f), examples.uri


def produced(uri: str) -> dict[str, list[str]]:
    return {english: refs for split in ("train", "eval", "test")
            for english, refs in records.read_split(uri, split)}


def test_a_directory_of_gzip_and_plain_files_gives_examples_and_a_report_per_file(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_bytes(pairs_text(40) + b"\nno tab\n")
    with gzip.open(data / "b.txt.gz", "wb") as f:  # a pair also in a.txt, and twice here
        f.write(pairs_text(30, start=40) + b"Sentence 3.\tPhrase 3.\n" * 2
                + b"Sentence 3.\tAutre phrase 3.\n\tno English\n")
    (data / "empty.txt").write_bytes(b"")  # an empty shard is no error
    (data / "sub").mkdir()  # nor is a directory

    report, uri = run_executor(tmp_path, str(data), "*")

    expected = {f"Sentence {i}.": [f"Phrase {i}."] for i in range(70)}
    expected["Sentence 3."].append("Autre phrase 3.")  # a.txt's first, then b.txt.gz's
    assert produced(uri) == expected
    files = report["files"]
    assert sorted(files) == [str(data / name) for name in ("a.txt", "b.txt.gz", "empty.txt")]
    assert {path: (r["lines_read"], r["pairs_kept"], r["lines_rejected"])
            for path, r in files.items()} == {
        str(data / "a.txt"): (42, 40, 2), str(data / "b.txt.gz"): (34, 33, 1),
        str(data / "empty.txt"): (0, 0, 0)}
    assert files[str(data / "a.txt")]["rejected_by_reason"]["no_tab"] == {
        "count": 1, "sample_line_numbers": [42], "sample_byte_offsets": [len(pairs_text(40)) + 1]}
    assert files[str(data / "b.txt.gz")]["rejected_by_reason"]["empty_english"][
        "sample_line_numbers"] == [34]
    assert report["lines_read"] == 76 == report["pairs_kept"] + report["lines_rejected"]
    assert report["duplicate_pairs"] == 2 and report["references_over_cap"] == 0
    assert report["examples"] == 70
    assert report["rejected_by_reason"]["blank_line"]["samples"] == [
        {"file": str(data / "a.txt"), "line": 41, "byte_offset": len(pairs_text(40))}]
    # The gzip file is fingerprinted by its own (compressed) bytes.
    gz_sha256 = hashlib.sha256((data / "b.txt.gz").read_bytes()).hexdigest()
    assert files[str(data / "b.txt.gz")]["digest"] == f"sha256:{gz_sha256}"
    assert report["input"]["path"] == str(data / "*")


def tfx_split(english: str, buckets: tuple[int, ...]) -> str:
    """The split TFX's ExampleGen puts a sentence in: sha256 of the serialized `english`
    feature modulo the total buckets, in the splits' cumulative bucket ranges."""
    key = tf.train.Feature(bytes_list=tf.train.BytesList(value=[english.encode()]))
    bucket = int(hashlib.sha256(key.SerializeToString(deterministic=True)).hexdigest(), 16)
    return ("train", "eval", "test")[bisect.bisect(
        list(itertools.accumulate(buckets)), bucket % sum(buckets))]


def test_a_restarted_jobs_leftover_write_is_removed(tmp_path, caplog):
    """Flink restarting ExampleGen's job after a lost TaskManager leaves the killed attempt's
    `beam-temp-*` directory inside a split, where StatisticsGen, Transform and the Evaluator
    read `Split-*/*`: the executor removes it once its own write has committed."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "fra.txt").write_bytes(pairs_text(50))
    leftover = tmp_path / "examples" / "Split-train" / "beam-temp-data_tfrecord-0123"
    leftover.mkdir(parents=True)
    (leftover / "part").write_bytes(b"half written")
    with caplog.at_level("INFO"):
        _, uri = run_executor(tmp_path, str(tmp_path / "in"), "fra.txt")
    assert not leftover.exists()
    assert f"Removed {leftover}: a restarted Beam job's unfinished write." in caplog.text
    assert len(produced(uri)) == 50
    assert all(not os.path.isdir(f) for split in ("train", "eval", "test")
               for f in records.split_files(uri, split))


def test_a_split_finer_than_whole_percent_routes_by_its_buckets(tmp_path):
    """99.8/0.1/0.1 is 998/1/1 buckets: a few eval and test sentences (found by TFX's own
    hash) among train ones land where those buckets say."""
    buckets = split_hash_buckets((99.8, 0.1, 0.1))
    assert buckets == (998, 1, 1)
    by_split = collections.defaultdict(list)
    for i in itertools.count():
        by_split[tfx_split(f"Sentence {i}.", buckets)].append(i)
        if len(by_split["eval"]) >= 2 and len(by_split["test"]) >= 2:
            break
    chosen = by_split["train"][:300] + by_split["eval"] + by_split["test"]
    (tmp_path / "fra.txt").write_bytes("".join(
        f"Sentence {i}.\tPhrase {i}.\n" for i in chosen).encode())

    _, uri = run_executor(tmp_path, str(tmp_path), "fra.txt", split=(99.8, 0.1, 0.1))

    assert {split: sorted(int(english.split()[1][:-1])
                          for english, _ in records.read_split(uri, split))
            for split in ("train", "eval", "test")} == {
        "train": sorted(by_split["train"][:300]), "eval": by_split["eval"],
        "test": by_split["test"]}


def tricky_file(lines: int = 300) -> bytes:
    """A BOM, CRLF ends, blank and bad lines, a line far longer than a range, no final newline."""
    rng = random.Random(7)
    body = [f"Sentence {rng.randint(0, 60)}.\tPhrase {i}.\r\n".encode() for i in range(lines)]
    body[10:10] = [b"\n", b"no tab\n", b"Long " + b"x" * 5000 + b"\tLong.\n"]
    return b"\xef\xbb\xbf" + b"".join(body) + b"Last.\tDernier."


@pytest.mark.parametrize("range_bytes", [64, 1000])
def test_ranges_hold_every_line_once_with_its_offset(tmp_path, range_bytes):
    data = tricky_file()
    path = tmp_path / "fra.txt"
    path.write_bytes(data)
    raw_lines = data.splitlines(keepends=True)
    offsets = [sum(map(len, raw_lines[:i])) for i in range(len(raw_lines))]
    with test_pipeline.TestPipeline() as pipeline:
        lines = (pipeline | beam.Create(source.match_files(str(path)))
                 | source.ReadLines(max_line_bytes=100, range_bytes=range_bytes))
        located = lines | beam.MapTuple(lambda _, line: (line.offset, line.raw))
        assert_that(located, equal_to([(offset, raw[:106]) for offset, raw in
                                       zip(offsets, raw_lines)]))
        # Each line is read by the range it starts in (the 5 KB line spans many ranges).
        chunks = lines | beam.MapTuple(lambda _, line: line.chunk) | beam.Distinct()
        starts = {offset // range_bytes * range_bytes for offset in offsets}
        assert len(starts) > 5
        assert_that(chunks, equal_to(sorted(starts)), label="OneReaderPerRange")


@pytest.mark.slow  # ~50 s: two Beam worker processes start
def test_one_file_read_as_many_ranges_by_two_processes_is_the_file_read_whole(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "fra.txt").write_bytes(tricky_file(2000))
    whole, whole_uri = run_executor(tmp_path, str(data), "fra.txt", name="whole",
                                    max_line_bytes=100)
    ranged, ranged_uri = run_executor(
        tmp_path, str(data), "fra.txt", name="ranged", max_line_bytes=100, range_bytes=2000,
        beam_args=("--direct_num_workers=2", "--direct_running_mode=multi_processing"))
    assert split_records(ranged_uri) == split_records(whole_uri)
    assert ranged == whole
    rejected = whole["files"][str(data / "fra.txt")]["rejected_by_reason"]
    assert {reason: info["sample_line_numbers"] for reason, info in rejected.items()} == {
        "blank_line": [11], "no_tab": [12], "too_long": [13]}  # 1-based, as in an editor


def test_references_are_capped_by_smallest_hash_in_bounded_memory():
    cap, refs = 64, [(f"Traduction {i}.", ("f", i)) for i in range(10_000)]
    combine = references.SmallestHashReferences(cap)
    accumulators = []
    for part in (refs[:3000], refs[3000:7000], refs[7000:]):  # three workers' bundles
        accumulator = combine.create_accumulator()
        for ref in part:
            accumulator = combine.add_input(accumulator, ref)
            assert len(accumulator[1]) <= cap  # never all of them at once
        accumulators.append(accumulator)
    capped = combine.extract_output(combine.merge_accumulators(accumulators))
    smallest = sorted(refs, key=lambda ref: references.reference_hash(ref[0]))[:cap]
    assert capped.references == sorted((position, french) for french, position in smallest)
    assert capped.dropped == 10_000 - cap
    one_pass = combine.create_accumulator()
    for ref in reversed(refs):  # another order, another split: the same choice
        one_pass = combine.add_input(one_pass, ref)
    assert combine.extract_output(one_pass) == capped


def test_a_hot_sentence_is_capped_and_counted(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "fra.txt").write_bytes(
        pairs_text(20) + "".join(f"Go.\tVa {i} !\n" for i in range(300)).encode()
        + b"Go.\tVa 1 !\n" * 50)
    report, uri = run_executor(tmp_path, str(data), "fra.txt", max_references=64)
    go = produced(uri)["Go."]
    assert len(go) == 64 == len(set(go))
    kept = sorted(f"Va {i} !" for i in range(300))
    kept.sort(key=references.reference_hash)
    assert set(go) == set(kept[:64])
    assert go == sorted(go, key=lambda ref: int(ref.split()[1]))  # file order
    assert report["references_over_cap"] == 300 - 64 and report["duplicate_pairs"] == 50
    assert report["lines_read"] == report["pairs_kept"] == 370


def test_the_schema_allows_exactly_the_references_example_gen_keeps():
    schema = text_format.Parse(open(SCHEMA_FILE).read(), schema_pb2.Schema())
    [french] = [f for f in schema.feature if f.name == "french"]
    assert french.value_count.max == parser.DEFAULT_MAX_REFERENCES


def test_an_object_store_file_is_fingerprinted_from_its_metadata_never_its_bytes(
        tmp_path, monkeypatch):
    """As gs:// is, with local files: Beam's local 'checksum' is the size, GCS's the crc32c."""
    path = tmp_path / "fra.txt"
    path.write_bytes(pairs_text(10))
    size = path.stat().st_size

    def no_reading(*args, **kwargs):
        raise AssertionError("read the bytes")

    assert fingerprint.file_digest(str(path), size) == \
        f"sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}"
    monkeypatch.setattr(beam.io.filesystems.FileSystems, "open", no_reading)
    assert fingerprint.file_digest(str(path), size, checksum_schemes=frozenset({""})) == \
        f"store:{size}:{size}"
    assert fingerprint.scheme("gs://bucket/fra.txt") in fingerprint.STORE_CHECKSUM_SCHEMES


def test_unchanged_input_is_hashed_once_per_run(tmp_path, monkeypatch):
    """The driver hashes every file for the cache key; the executor reuses its digests."""
    from tfx.orchestration import metadata as tfx_metadata
    from tfx.orchestration import pipeline as tfx_pipeline
    from tfx.orchestration.local.local_dag_runner import LocalDagRunner

    from components.fra_example_gen.component import FraTxtExampleGen

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_bytes(pairs_text(50))
    with gzip.open(data / "b.txt.gz", "wb") as f:
        f.write(pairs_text(50, start=50))
    hashed = collections.Counter()
    real_file_digest = fingerprint.file_digest

    def counting(path: str, *args, **kwargs) -> str:
        hashed[path] += 1
        return real_file_digest(path, *args, **kwargs)

    monkeypatch.setattr(fingerprint, "file_digest", counting)

    def run() -> None:
        LocalDagRunner().run(tfx_pipeline.Pipeline(
            pipeline_name="fingerprint-once", pipeline_root=str(tmp_path / "root"),
            components=[FraTxtExampleGen(input_base=str(data), file_pattern="*")],
            enable_cache=True,
            metadata_connection_config=tfx_metadata.sqlite_metadata_connection_config(
                str(tmp_path / "metadata.sqlite"))))

    run()
    assert hashed == {str(data / "a.txt"): 1, str(data / "b.txt.gz"): 1}
    [uri] = [os.path.join(dirpath) for dirpath, _, files in os.walk(tmp_path / "root")
             if executor.REPORT_FILE in files]
    with open(os.path.join(uri, executor.REPORT_FILE)) as f:
        report = json.load(f)
    assert report["files"][str(data / "a.txt")]["digest"] == \
        f"sha256:{hashlib.sha256((data / 'a.txt').read_bytes()).hexdigest()}"
    run()  # unchanged: cached, hashed once more (by the driver, for the cache key) and no more
    assert hashed == {str(data / "a.txt"): 2, str(data / "b.txt.gz"): 2}

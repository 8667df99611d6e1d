"""The console log: library noise filtered unless -v (runners/logs.py), and the summary that
ends a run (runners/run_summary.py). The summary of a real run is checked in
test_pipeline_e2e.py."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import sacrebleu

from helpers import REPO
from runners.run_summary import (ComponentTime, RunFacts, Verdict, nmt_command,
                                  summary_lines)

# Each noise source called the way the pipeline calls it, in a fresh process with nmt's
# logging (argv[1]: "-v" or ""), then lines that must always get through.
NOISE_SCRIPT = r"""
import os, sys
import ml_metadata as mlmd
import tensorflow as tf
from apache_beam.io import tfrecordio
from ml_metadata.proto import metadata_store_pb2
from tensorflow_model_analysis.writers import metrics_plots_and_validations_writer as tfma_writer
from tensorflow_transform import graph_tools
from tfx.components.util import examples_utils
from tfx.orchestration.portable.input_resolution import channel_resolver
from tfx.proto.orchestration import pipeline_pb2
from tfx.types import standard_artifacts
from runners import logs

logs.configure(verbose=sys.argv[1] == "-v")
store = mlmd.MetadataStore(metadata_store_pb2.ConnectionConfig(
    fake_database=metadata_store_pb2.FakeDatabaseConfig()))
store.put_artifact_type(metadata_store_pb2.ArtifactType(name="Examples"))
query = pipeline_pb2.InputSpec.Channel.ArtifactQuery()
query.type.name = "Examples"
channel_resolver._filter_by_artifact_query(store, [], query)
# TFT's own warning function, with its text (the table analysis needs a traced TFT graph).
graph_tools.InitializableGraphAnalyzer._log_warning(
    None, "Tables initialized inside a tf.function  will be re-initialized on every "
    "invocation of the function.: vocab/text_file_init/InitializeTableFromTextFileV2")
examples_utils.get_payload_format(standard_artifacts.Examples())
tfrecordio._default_crc32c_fn(b"record")  # python-snappy is not installed
with tf.io.TFRecordWriter(sys.argv[2]) as writer:
    writer.write(b"record")
list(tfma_writer._raw_value_iterator([sys.argv[2]], "tfrecord"))
# A deprecated function called by our own code (a code object of a file in pipeline/) stays.
from tensorflow.python.util import deprecation
old = deprecation.deprecated(None, "Use new.")(lambda: None)
exec(compile("old()", os.path.join(os.getcwd(), "pipeline", "x.py"), "exec"))
os.write(2, b'W0000 00:00:1795593451.192933    3130 op_level_cost_estimator.cc:699] Error in '
            b'PredictCost() for the op: op: "Softmax" attr { key: "T" value { type: DT_FLOAT } }'
            b' inputs { dtype: DT_FLOAT shape { unknown_rank: true } }\n')
os.write(2, b"W0000 00:00:1795593451.2 3130 some_kernel.cc:1] another C++ warning\n")
# The SentencePiece library's note as tensorflow-text's op loads a model that does no
# normalization of its own (as Transform's vocabulary does).
import tensorflow_text
from transform_module import sentencepiece as sp
tensorflow_text.SentencepieceTokenizer(model=sp.learn_model(
    ["un chat", "le chat noir"] * 20, 12, ("<p>", "<u>", "<s>", "</s>"))).tokenize(["un chat"])
import logging
logging.getLogger("absl").warning("Another TFX warning.")
# TFX's partial-run warning (nmt run --to on a fresh root), logged from its own file.
absl_logger = logging.getLogger("absl")
absl_logger.handle(absl_logger.makeRecord(
    "absl", logging.WARNING, "/x/tfx/orchestration/portable/partial_run_utils.py", 834,
    "base run context %s or new pipeline run context %s not found.", (None, "id: 2"), None))
# What Beam's multi_processing workers log, relayed by the runner as it relays them.
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.local_job_service import BeamFnLoggingServicer
Entry = beam_fn_api_pb2.LogEntry
BeamFnLoggingServicer().Logging([Entry.List(log_entries=[
    Entry(severity=Entry.Severity.WARN, message="No semi_persistent_directory found: Functions "
          "defined in __main__ (interactive session) may fail.",
          log_location="/x/apache_beam/runners/worker/sdk_worker_main.py:123"),
    Entry(severity=Entry.Severity.INFO, message="Learned english_vocab: 12 WordPiece pieces.",
          log_location=os.path.join(os.getcwd(), "transform_module", "wordpiece.py:74")),
    Entry(severity=Entry.Severity.WARN, message="Couldn't find python-snappy so the "
          "implementation of _TFRecordUtil._masked_crc32c is not as fast as it could be.",
          log_location="/x/apache_beam/io/tfrecordio.py:57"),
    Entry(severity=Entry.Severity.WARN, message="A warning of the worker.",
          log_location="/x/apache_beam/runners/worker/operations.py:1"),
    Entry(severity=Entry.Severity.INFO, message="tensorflow_recommenders is not available.",
          log_location="/x/tfx/components/trainer/rewriting/rewriter_factory.py:1")])])
os.write(2, b"Exception ignored in: <function AtomicFunction.__del__ at 0x7f08b24a5580>\n"
            b"Traceback (most recent call last):\n"
            b'  File "/x/tensorflow/python/eager/polymorphic_function/atomic_function.py", '
            b"line 291, in __del__\n"
            b"TypeError: 'NoneType' object is not subscriptable\n"
            b"  FraTxtExampleGen   1.0 s  executed\n")
print("PYTHONWARNINGS", os.environ.get("PYTHONWARNINGS"), file=sys.stderr)
"""
NOISE = {  # filter -> the line it drops
    "channel_resolver": "ArtifactQuery.property_predicate is not supported.",
    "tft tables": "Tables initialized inside a tf.function",
    "payload_format": "Examples artifact does not have payload_format custom property.",
    "snappy": "Couldn't find python-snappy",
    "library deprecation": "tf_record_iterator (from tensorflow.python.lib.io.tf_record) is "
                           "deprecated",
    "grappler": 'Error in PredictCost() for the op: op: "Softmax"',
    "sentencepiece": "precompiled_charsmap is empty. use identity normalization.",
    "beam worker start-up": "No semi_persistent_directory found",
    "partial run": "base run context None or new pipeline run context id: 2 not found.",
    "library info from a worker": "tensorflow_recommenders is not available.",
    "worker shutdown traceback": "Exception ignored in: <function AtomicFunction.__del__",
}
ALWAYS = ("pipeline/x.py:1: <lambda> (from __main__) is deprecated",
          "another C++ warning", "WARNING Another TFX warning.", "A warning of the worker.",
          "  FraTxtExampleGen   1.0 s  executed")


def run_noise_script(verbose: bool, tmp_path) -> str:
    result = subprocess.run(
        [sys.executable, "-c", NOISE_SCRIPT, "-v" if verbose else "", str(tmp_path / "r.tfrecord")],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": REPO})
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


@pytest.mark.parametrize("verbose", [False, True], ids=["default", "verbose"])
def test_each_noise_filter_drops_its_line_and_verbose_keeps_it(verbose, tmp_path):
    log = run_noise_script(verbose, tmp_path)
    for name, line in NOISE.items():
        assert (line in log) == verbose, f"{name}: {line!r}\n{log[-3000:]}"
    for line in ALWAYS:
        assert line in log, log[-3000:]
    # A worker's record from our code reads as if logged here; verbose shows Beam's relay.
    unwrapped = "INFO Learned english_vocab: 12 WordPiece pieces.\n"
    assert (unwrapped in log) != verbose and "Learned english_vocab" in log, log[-3000:]
    assert ("TypeError: 'NoneType' object is not subscriptable" in log) == verbose
    # Beam's worker processes inherit the setting that silences import-time FutureWarnings.
    assert ("ignore::FutureWarning" in log) != verbose


def test_a_verbose_run_shows_the_library_warnings(nmt_pipeline, fra_sample, tmp_path):
    """`nmt -v run` (TFX once read its -v as absl's --verbosity and failed)."""
    result = nmt_pipeline.verbose("--data", fra_sample, "--pipeline-root", str(tmp_path),
                                  "--profile", "smoke", "--to", "StatisticsGen")
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("channel_resolver", "snappy"):  # those of ExampleGen and StatisticsGen
        assert NOISE[name] in result.stderr, name
    assert " INFO Run summary: " in result.stderr


COMPONENTS = (ComponentTime("FraTxtExampleGen", "cached", 0.0),
              ComponentTime("Trainer", "executed", 1843.25),
              ComponentTime("Evaluator", "executed", 78.0),
              ComponentTime("AtomicPusher", "executed", 0.4))


def test_summary_of_a_blessed_and_pushed_model():
    lines = summary_lines(RunFacts(
        wall_seconds=2405.6, components=COMPONENTS,
        pipeline_root="/data/my runs",
        verdict=Verdict(bleu_1ref=39.994, chrf_1ref=58.2, bleu=47.734, chrf=65.1,
                        blessed=True, min_bleu=10.0, max_metric_drop=1.0, baseline_model=42),
        pushed_version="1795593454", pushed_path="/data/my runs/serving/nmt-fra-eng/1795593454"))
    assert lines == [
        "Run summary: the pipeline took 40m 06s.",
        "  FraTxtExampleGen      0.0 s  cached",
        "  Trainer            1843.2 s  executed",
        "  Evaluator            78.0 s  executed",
        "  AtomicPusher          0.4 s  executed",
        "  Eval split, one reference: BLEU 39.99, chrF 58.20 (these gate the Pusher)",
        "  Eval split, all references: BLEU 47.73, chrF 65.10",
        "  Signatures: BLEU nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:"
        f"{sacrebleu.__version__} (all references: nrefs:var); chrF "
        f"nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:{sacrebleu.__version__}",
        "  Blessed: yes: single-reference BLEU >= 10, and neither its BLEU nor chrF more than "
        "1 below the latest blessed model (model 42)",
        "  Pushed: version 1795593454 to /data/my runs/serving/nmt-fra-eng/1795593454",
        "  Next: nmt translate --pipeline-root '/data/my runs' \"Hello.\"",
    ]


def test_summary_of_a_first_model_judged_on_bleu_alone():
    lines = summary_lines(RunFacts(
        wall_seconds=59.4, components=COMPONENTS, pipeline_name="nmt-test",
        verdict=Verdict(bleu_1ref=0.04, chrf_1ref=3.1, bleu=0.05, chrf=3.5, blessed=True,
                        min_bleu=0.0, max_metric_drop=1.0, baseline_model=None),
        pushed_version="7", pushed_path="/r/serving/nmt-fra-eng/7"))
    assert lines[0] == "Run summary: the pipeline took 59s."
    assert "  Blessed: yes: single-reference BLEU >= 0 (the first model: there is no blessed " \
           "one to compare with)" in lines
    assert lines[-1] == '  Next: nmt translate --pipeline-name nmt-test "Hello."'


def test_summary_of_a_model_that_was_not_blessed_says_why_and_what_next():
    failures = ("corpus_bleu_1ref changed by -2.100 against the baseline (Change too small)",
                "corpus_chrf_1ref changed by -1.500 against the baseline (Change too small)")
    lines = summary_lines(RunFacts(
        wall_seconds=600, components=COMPONENTS, pipeline_root="/r", pipeline_name="n",
        verdict=Verdict(bleu_1ref=25.0, chrf_1ref=45.0, bleu=30.0, chrf=50.0, blessed=False,
                        min_bleu=10.0, max_metric_drop=1.0, baseline_model=42,
                        failures=failures)))
    assert lines[-3:] == [
        "  Blessed: no: " + "; ".join(failures),
        "  Pushed: not pushed",
        "  Next: nmt report --pipeline-root /r  (this run's metrics next to the previous ones)",
    ]


def test_summary_of_a_run_stopped_by_to_lists_what_ran_and_says_so():
    lines = summary_lines(RunFacts(
        wall_seconds=10.2, components=COMPONENTS[:1],
        to_component="StrictExampleValidator"))
    assert lines == [
        "Run summary: the pipeline took 10s, stopped after StrictExampleValidator (--to).",
        "  FraTxtExampleGen      0.0 s  cached",
        "  Next: the same `nmt run` without --to StrictExampleValidator goes on from here "
        "(finished components are cached)",
    ]


def test_the_next_command_is_the_running_nmt_as_the_user_can_call_it():
    """`.venv/bin/nmt` after `make run` in a virtualenv that is not activated; `nmt` when PATH
    finds the running one, or when it runs as `python -m cli`."""
    not_on_path = lambda name: None  # noqa: E731
    assert nmt_command(".venv/bin/nmt", not_on_path, cwd="/repo") == ".venv/bin/nmt"
    assert nmt_command("/repo/.venv/bin/nmt", not_on_path, cwd="/repo") == ".venv/bin/nmt"
    assert nmt_command("/opt/my env/bin/nmt", not_on_path, cwd="/repo") == "'/opt/my env/bin/nmt'"
    assert nmt_command("/repo/.venv/bin/nmt", lambda name: "/usr/bin/nmt",
                       cwd="/repo") == ".venv/bin/nmt"  # PATH finds another nmt
    assert nmt_command(".venv/bin/nmt", lambda name: "/repo/.venv/bin/nmt", cwd="/repo") == "nmt"
    assert nmt_command("nmt", not_on_path, cwd="/repo") == "nmt"  # found on PATH by the shell
    assert nmt_command("/repo/cli/__main__.py", not_on_path, cwd="/repo") == "nmt"
    lines = summary_lines(RunFacts(wall_seconds=1.0, components=COMPONENTS[:1],
                                   to_component="Transform", nmt=".venv/bin/nmt"))
    assert lines[-1].startswith("  Next: the same `.venv/bin/nmt run` without --to Transform")
    lines = summary_lines(RunFacts(wall_seconds=1.0, components=COMPONENTS,
                                   pushed_version="7", pushed_path="/r/7", nmt=".venv/bin/nmt"))
    assert lines[-1] == '  Next: .venv/bin/nmt translate "Hello."'

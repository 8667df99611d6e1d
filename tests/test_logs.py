"""The summary that ends a run (pipeline/run_summary.py), built from plain data. The summary
of a real run is checked in test_pipeline_e2e.py."""
from __future__ import annotations

from pipeline.run_summary import ComponentTime, RunFacts, Verdict, summary_lines


COMPONENTS = (ComponentTime("FraTxtExampleGen", "cached", 0.0),
              ComponentTime("Trainer", "executed", 1843.25),
              ComponentTime("Evaluator", "executed", 78.0),
              ComponentTime("AtomicPusher", "executed", 0.4))


def test_summary_of_a_blessed_and_pushed_model():
    lines = summary_lines(RunFacts(
        wall_seconds=2405.6, components=COMPONENTS,
        pipeline_root="/data/my runs",
        verdict=Verdict(bleu=47.734, chrf=65.1, blessed=True, min_bleu=10.0,
                        max_metric_drop=1.0, baseline_model=42),
        pushed_version="1795593454", pushed_path="/data/my runs/serving/nmt-fra-eng/1795593454"))
    assert lines == [
        "Run summary: the pipeline took 40m 06s.",
        "  FraTxtExampleGen      0.0 s  cached",
        "  Trainer            1843.2 s  executed",
        "  Evaluator            78.0 s  executed",
        "  AtomicPusher          0.4 s  executed",
        "  Evaluation (eval split): BLEU 47.73, chrF 65.10",
        "  Blessed: yes: BLEU >= 10, and neither BLEU nor chrF more than 1 below the latest "
        "blessed model (model 42)",
        "  Pushed: version 1795593454 to /data/my runs/serving/nmt-fra-eng/1795593454",
        "  Next: nmt translate --pipeline-root '/data/my runs' \"Hello.\"",
    ]


def test_summary_of_a_first_model_judged_on_bleu_alone():
    lines = summary_lines(RunFacts(
        wall_seconds=59.4, components=COMPONENTS, pipeline_name="nmt-test",
        verdict=Verdict(bleu=0.05, chrf=3.5, blessed=True, min_bleu=0.0, max_metric_drop=1.0,
                        baseline_model=None),
        pushed_version="7", pushed_path="/r/serving/nmt-fra-eng/7"))
    assert lines[0] == "Run summary: the pipeline took 59s."
    assert "  Blessed: yes: BLEU >= 0 (the first model: there is no blessed one to compare " \
           "with)" in lines
    assert lines[-1] == '  Next: nmt translate --pipeline-name nmt-test "Hello."'


def test_summary_of_a_model_that_was_not_blessed_says_why_and_what_next():
    failures = ("corpus_bleu changed by -2.100 against the baseline (Change too small)",
                "corpus_chrf changed by -1.500 against the baseline (Change too small)")
    lines = summary_lines(RunFacts(
        wall_seconds=600, components=COMPONENTS, pipeline_root="/r", pipeline_name="n",
        verdict=Verdict(bleu=30.0, chrf=50.0, blessed=False, min_bleu=10.0,
                        max_metric_drop=1.0, baseline_model=42, failures=failures)))
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

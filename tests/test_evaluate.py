"""`nmt evaluate` on the smoke run's pushed model (a real SavedModel in a fresh process): the
shared dev set's first lines plus training sentences known to be seen. BLEU and chrF equal
sacreBLEU's command line on the written hypotheses, the overlap check finds exactly the seen
lines through ML Metadata lineage, and a copied model (no lineage) says so."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import sacrebleu

from components.fra_example_gen.records import read_split
from helpers import open_store, run_nmt, serving_dir
from metadata.lineage import training_examples

DEV_LINES = 60


@pytest.fixture(scope="module")
def test_files(smoke_run, unseen_lines, tmp_path_factory):
    """(English file, French file, indices of the seen lines, how many of them seen exactly):
    the dev set's first lines (English absent from fra.txt), then 3 training sentences as
    they are and 2 changed in case and punctuation."""
    english = [sentence for sentence, _ in unseen_lines[:DEV_LINES]]
    french = [reference for _, reference in unseen_lines[:DEV_LINES]]
    train = read_split(smoke_run.examples_uri, "train")
    trained = {sentence for sentence, _ in train}
    picks = train[10:15]
    variants = [picks[3][0].upper(), picks[4][0].rstrip(".!?") + " !"]
    assert not set(variants) & trained  # seen only after normalization
    english += [sentence for sentence, _ in picks[:3]] + variants
    french += [references[0] for _, references in picks]
    directory = tmp_path_factory.mktemp("evaluate")
    source, reference = directory / "test.eng", directory / "test.fra"
    source.write_text("".join(line + "\n" for line in english), encoding="utf-8")
    reference.write_text("".join(line + "\n" for line in french), encoding="utf-8")
    return str(source), str(reference), list(range(DEV_LINES, DEV_LINES + 5)), 3


def sacrebleu_cli(reference: str, hypotheses: str) -> tuple[float, float]:
    """BLEU and chrF as sacreBLEU's own command line prints them (-b: the scores only, as a
    JSON list for two metrics; -w 4: four decimals)."""
    result = subprocess.run([sys.executable, "-m", "sacrebleu", reference, "-i", hypotheses,
                             "-m", "bleu", "chrf", "-b", "-w", "4"], capture_output=True,
                            text=True, check=True)
    bleu, chrf = json.loads(result.stdout)
    return float(bleu), float(chrf)


@pytest.fixture(scope="module")
def evaluated(smoke_run, test_files, tmp_path_factory):
    """`nmt evaluate --json` with the default model (the newest pushed version)."""
    source, reference, _, _ = test_files
    hypotheses = str(tmp_path_factory.mktemp("hyps") / "hyps.txt")
    result = run_nmt("evaluate", "--source", source, "--reference", reference,
                     "--pipeline-root", smoke_run.root, "--hypotheses", hypotheses, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout), hypotheses, result.stderr


def test_bleu_and_chrf_equal_sacrebleus_command_line(evaluated, test_files):
    result, hypotheses, _ = evaluated
    _, reference, _, _ = test_files
    every = result["scores"]["all"]
    bleu, chrf = sacrebleu_cli(reference, hypotheses)
    assert every["bleu"] == pytest.approx(bleu, abs=0.01)
    assert every["chrf"] == pytest.approx(chrf, abs=0.01)
    assert every["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|")
    assert every["chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|")
    assert every["lines"] == DEV_LINES + 5
    assert every["chrf"] > 1  # the smoke model learned a little: not 0 == 0


def test_the_default_model_is_the_newest_pushed_version(evaluated, smoke_run):
    result, _, _ = evaluated
    assert result["model"] == os.path.join(serving_dir(smoke_run.root), smoke_run.pushed_version)
    assert result["decoding"] == "greedy" and result["sentences_per_second"] > 0


def test_the_overlap_check_finds_the_seen_lines_through_lineage(evaluated, test_files,
                                                                 smoke_run):
    result, hypotheses, _ = evaluated
    _, reference, seen_lines, seen_exactly = test_files
    found = result["overlap"]
    assert found["seen_exactly"] == seen_exactly
    assert found["seen_normalized"] == len(seen_lines)
    assert found["train_splits"] == [os.path.join(smoke_run.examples_uri, "Split-train")]
    assert found["training_sentences"] == len(read_split(smoke_run.examples_uri, "train"))
    with open(hypotheses, encoding="utf-8") as f:
        hyps = f.read().splitlines()
    with open(reference, encoding="utf-8") as f:
        refs = f.read().splitlines()
    for part, keep in (("seen", seen_lines), ("unseen", range(DEV_LINES))):
        score = result["scores"][part]
        assert score["lines"] == len(keep)
        subset = ([hyps[i] for i in keep], [[refs[i] for i in keep]])
        assert score["bleu"] == pytest.approx(sacrebleu.corpus_bleu(*subset).score, abs=1e-9)
        assert score["chrf"] == pytest.approx(sacrebleu.corpus_chrf(*subset).score, abs=1e-9)


def test_a_model_named_by_a_relative_path_is_found_through_lineage(smoke_run, monkeypatch):
    monkeypatch.chdir(serving_dir(smoke_run.root))
    found = training_examples(open_store(smoke_run.root), smoke_run.pushed_version)
    assert found is not None, "ML Metadata holds absolute paths: the relative one must match"
    assert found["train_splits"] == [os.path.join(smoke_run.examples_uri, "Split-train")]


def test_progress_shows_an_eta(evaluated):
    _, _, log = evaluated
    assert f"Translated {DEV_LINES + 5} of {DEV_LINES + 5} sentences (100%)" in log
    assert "sentences/s, ETA 0m00s" in log


def test_a_copied_model_has_no_lineage_and_scores_all_lines(smoke_run, test_files, tmp_path):
    source, reference, _, _ = test_files
    copy = shutil.copytree(os.path.join(serving_dir(smoke_run.root), smoke_run.pushed_version),
                           tmp_path / "copied")
    result = run_nmt("evaluate", "--source", source, "--reference", reference, "--reference",
                     reference, "--model", str(copy), "--pipeline-root", smoke_run.root)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert f"Training overlap: not checked: ML Metadata knows no model in {copy}" in lines[2]
    assert "2 reference(s) per line" in lines[1]
    parts = [line.split()[0] for line in lines[3:] if line.split()]
    assert parts[:3] == ["LINES", "all", "BLEU"]  # one row: all lines; then the signatures
    assert "BLEU signature: nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:" \
           f"{sacrebleu.__version__}" in lines

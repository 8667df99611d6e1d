"""The whole pipeline (smoke profile) through Pusher, then serving the pushed model.

One pipeline root for the session (conftest.smoke_run): the first run is killed during
training and resumed; a second run's candidate is worse and must not be pushed.
"""
from __future__ import annotations

import glob
import math
import os
import subprocess
import sys

import pytest
import sacrebleu
import tensorflow as tf
import tensorflow_model_analysis as tfma

from components.fra_example_gen.executor import read_split
from conftest import (REPO, SMOKE_TRAIN_STEPS, SmokeRun, latest_artifact, open_store)


def serving_dir(root: str) -> str:
    return os.path.join(root, "serving", "nmt-fra-eng")


def versions(root: str) -> list[str]:
    return sorted(os.listdir(serving_dir(root))) if os.path.isdir(serving_dir(root)) else []


def pushed_path(run: SmokeRun) -> str:
    return os.path.join(serving_dir(run.root), run.pushed_version)


def test_killed_trainer_resumes_from_its_last_checkpoint(smoke_run):
    killed_log, resumed_log = smoke_run.killed_log, smoke_run.log
    assert "Checkpoint at step 40" in killed_log
    assert "Component Evaluator" not in killed_log
    assert "Resuming from" in resumed_log
    resumed_step = int(resumed_log.split("Resuming from")[1].split("(step ")[1].split()[0])
    assert resumed_step >= 40
    assert f"Training step {SMOKE_TRAIN_STEPS}/{SMOKE_TRAIN_STEPS}" in resumed_log
    assert "Training step 20/" not in resumed_log  # it did not start over


def test_blessed_model_is_pushed_in_serving_layout(smoke_run):
    assert versions(smoke_run.root)[0] == smoke_run.pushed_version
    assert smoke_run.pushed_version.isdigit()
    assert os.path.isfile(os.path.join(pushed_path(smoke_run), "saved_model.pb"))
    assert os.path.isdir(os.path.join(pushed_path(smoke_run), "variables"))
    assert not [n for n in os.listdir(serving_dir(smoke_run.root)) if not n.isdigit()]
    assert f"Pushed the blessed model as version {smoke_run.pushed_version}" in smoke_run.log


def test_evaluator_bleu_equals_sacrebleu_on_the_pushed_model(smoke_run):
    rows = read_split(smoke_run.examples_uri, "eval")
    model = tf.saved_model.load(pushed_path(smoke_run))
    hypotheses = [t.decode() for t in model.signatures["serving_default"](
        tf.constant([english for english, _ in rows]))["translation"].numpy()]
    most = max(len(refs) for _, refs in rows)
    streams = [[refs[i] if i < len(refs) else None for _, refs in rows] for i in range(most)]
    result = tfma.load_eval_result(smoke_run.evaluation_uri)
    metrics = {key: values[""][""] for key, values in result.slicing_metrics}
    overall = metrics[()]
    assert overall["corpus_bleu"]["doubleValue"] == pytest.approx(
        sacrebleu.corpus_bleu(hypotheses, streams).score, abs=1e-6)
    assert overall["corpus_chrf"]["doubleValue"] == pytest.approx(
        sacrebleu.corpus_chrf(hypotheses, streams).score, abs=1e-6)
    assert overall["corpus_chrf"]["doubleValue"] > 5  # it learned something
    # Token accuracy and perplexity: TFMA's corpus ratios of the model's per-example sums.
    files = sorted(glob.glob(os.path.join(smoke_run.examples_uri, "Split-eval", "*")))
    records = [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]
    sums = model.signatures["translate_examples"](examples=tf.constant(records))
    nll, correct, count = (float(tf.reduce_sum(sums[k]))
                           for k in ("token_nll", "token_correct", "token_count"))
    assert count > len(rows)  # every reference, with its [end]
    assert overall["token_accuracy"]["doubleValue"] == pytest.approx(correct / count, rel=1e-4)
    assert overall["perplexity"]["doubleValue"] == pytest.approx(math.exp(nll / count), rel=1e-4)
    assert 0 < correct / count < 1 and math.exp(nll / count) > 1
    buckets = {key[0][1] for key in metrics if key}
    assert buckets and buckets <= {"01-05", "06-10", "11-20", "21+"}


def test_pushed_model_serves_in_a_fresh_process(smoke_run):
    path = pushed_path(smoke_run)
    script = (
        "import sys, tensorflow as tf, tensorflow_text\n"
        f"m = tf.saved_model.load({path!r})\n"
        "out = m.signatures['serving_default'](tf.constant(['I am hungry.', 'Go.', '']))\n"
        "beam = m.signatures['beam_search'](tf.constant(['I am hungry.']))\n"
        "print([t.decode() for t in out['translation'].numpy()], out['token_ids'].shape[0],"
        " float(beam['score'][0]) <= 0, sep='|')\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd="/", env={k: v for k, v in os.environ.items()
                                          if k != "PYTHONPATH"}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    translations, batch, beam_ok = result.stdout.strip().splitlines()[-1].split("|")
    translations = eval(translations)  # a printed list of str
    assert len(translations) == 3 and translations[0] and translations[2] == ""
    assert batch == "3" and beam_ok == "True"


def test_saved_model_cli_shows_the_serving_signature(smoke_run):
    path = pushed_path(smoke_run)
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    result = subprocess.run([cli, "show", "--dir", path, "--tag_set", "serve",
                             "--signature_def", "serving_default"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    shown = " ".join(result.stdout.split())
    assert "inputs['english'] tensor_info: dtype: DT_STRING shape: (-1) name: serving_default_english:0" in shown
    for output, dtype, shape in (("translation", "DT_STRING", "(-1)"),
                                 ("token_ids", "DT_INT32", "(-1, -1)"),
                                 ("score", "DT_FLOAT", "(-1)")):
        assert f"outputs['{output}'] tensor_info: dtype: {dtype} shape: {shape}" in shown


def nmt_translate(root: str, *args: str, stdin: bytes | None = None):
    return subprocess.run([sys.executable, "-m", "pipeline.cli", "translate", "--pipeline-root",
                           root, *args], cwd=REPO, input=stdin, capture_output=True,
                          timeout=300)


def test_translate_arguments_and_stdin_agree(smoke_run):
    root = smoke_run.root
    by_args = nmt_translate(root, "I am hungry.", "Where is the station?")
    assert by_args.returncode == 0, by_args.stderr[-3000:]
    by_stdin = nmt_translate(root, stdin=b"I am hungry.\nWhere is the station?\n")
    lines = by_args.stdout.decode().splitlines()
    assert len(lines) == 2 and all(lines)
    assert by_stdin.stdout.decode().splitlines() == lines


def test_translate_bad_input_gets_clear_answers(smoke_run):
    root = smoke_run.root
    # 60 tokens whatever the vocabulary (punctuation is one piece); smoke translates at most 32
    long_sentence = " ".join(["!"] * 60)
    stdin = (b"Go.\n\n   \n" + long_sentence.encode() + b"\nBad \xff byte.\nTab\x07bell.\n")
    result = nmt_translate(root, stdin=stdin)
    assert result.returncode == 0, result.stderr[-3000:]
    out, err = result.stdout.decode().split("\n"), result.stderr.decode()
    assert len(out) == 7 and out[0] and out[1] == out[2] == out[4] == "" and out[3] and out[5]
    assert "Input line 2 is empty" in err and "Input line 3 is empty" in err
    assert "Sentence 4 has 60 tokens: only the first 32 were translated." in err
    assert "Input line 5 is not valid UTF-8" in err
    assert "Input line 6 contains control characters" in err


def test_translate_without_a_model_says_what_to_do(tmp_path):
    result = nmt_translate(str(tmp_path), "Hello.")
    assert result.returncode == 2
    assert "No pushed model in" in result.stderr.decode()
    assert "Traceback" not in result.stderr.decode()


def test_beam_width_must_match_the_export(smoke_run):
    root = smoke_run.root
    ok = nmt_translate(root, "--beam", "2", "I am hungry.")
    assert ok.returncode == 0 and ok.stdout.decode().strip(), ok.stderr[-3000:]
    wrong = nmt_translate(root, "--beam", "7", "I am hungry.")
    assert wrong.returncode == 2
    assert "beam search uses width 2, not 7" in wrong.stderr.decode()


def test_worse_candidate_is_not_blessed_and_not_pushed(smoke_run, smoke_rerun):
    root, result = smoke_run.root, smoke_rerun
    store = open_store(root)
    blessing = latest_artifact(store, "ModelBlessing")
    assert blessing.custom_properties["blessed"].int_value == 0
    assert latest_artifact(store, "PushedModel").custom_properties["pushed"].int_value == 0
    assert versions(root) == [smoke_run.pushed_version]
    assert "not blessed" in result.stderr

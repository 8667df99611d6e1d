"""The whole pipeline (smoke profile) through Pusher, then serving the pushed model.

One pipeline root for the session (conftest.smoke_run): the first run is killed during
training and resumed; a second run's candidate is worse and must not be pushed.
"""
from __future__ import annotations

import glob
import json
import math
import os
import re
import shlex
import subprocess
import sys

import pytest
import sacrebleu
import tensorflow as tf
import tensorflow_model_analysis as tfma

from components.fra_example_gen.records import read_split
from helpers import (REPO, SMOKE_TRAIN_STEPS, TF_SERVING_2_12_TEXT_OPS, checkpoint_steps,
                     latest_artifact, nmt_translate, open_store, ops_core_tensorflow_lacks,
                     serving_dir, versions)
from test_logs import NOISE
from trainer_module.serving_warmup import WARMUP_FILE
from trainer_module.settings import HISTORY_FILE

def pushed_path(run) -> str:
    return os.path.join(serving_dir(run.root), run.pushed_version)


def run_summary(log: str, level: str = "INFO") -> list[str]:
    """The summary that ends a run's log: its first line and the indented ones after it."""
    lines = log.rstrip("\n").splitlines()
    start = max(i for i, line in enumerate(lines) if f" {level} Run summary: " in line)
    assert all(line.startswith("  ") for line in lines[start + 1:]), lines[start:]
    return lines[start:]


def test_the_run_ends_with_its_summary_and_shows_no_library_noise(smoke_run):
    summary = run_summary(smoke_run.log)
    assert re.search(r"INFO Run summary: the pipeline took (\d+m )?\d+s\.$", summary[0])
    states = {}
    for line in summary[1:]:
        if found := re.fullmatch(r"  (\S+) +(\d+\.\d) s  (executed|cached)", line):
            states[found[1]] = found[3]
    # The resumed run: the data half was finished by the killed run, training was not.
    assert states.pop("latest_blessed_model_resolver") in ("executed", "cached")
    assert states == {"FraTxtExampleGen": "cached", "ImportSchemaGen": "cached",
                      "StatisticsGen": "cached",
                      "StrictExampleValidator": "cached", "Transform": "cached",
                      "Trainer": "executed", "Evaluator": "executed",
                      "AtomicPusher": "executed"}
    overall = {key: values[""][""] for key, values in tfma.load_eval_result(
        smoke_run.evaluation_uri).slicing_metrics}[()]
    assert (f"  Eval split, one reference: BLEU {overall['corpus_bleu_1ref']['doubleValue']:.2f}"
            f", chrF {overall['corpus_chrf_1ref']['doubleValue']:.2f} (these gate the Pusher)"
            ) in summary
    assert (f"  Eval split, all references: BLEU {overall['corpus_bleu']['doubleValue']:.2f}, "
            f"chrF {overall['corpus_chrf']['doubleValue']:.2f}") in summary
    assert "  Blessed: yes: single-reference BLEU >= 0 (the first model: there is no blessed " \
           "one to compare with)" in summary
    assert f"  Pushed: version {smoke_run.pushed_version} to {pushed_path(smoke_run)}" in summary
    assert "  Beam engine: direct (in memory)" in summary
    assert summary[-1] == f'  Next: nmt translate --pipeline-root {shlex.quote(smoke_run.root)} ' \
                          '"Hello."'
    # The killed run went through the data half and Transform, where most of the noise is.
    assert "Component Transform is finished." in smoke_run.killed_log
    for log in (smoke_run.killed_log, smoke_run.log):
        for name, line in NOISE.items():
            assert line not in log, name


def test_killed_trainer_resumes_from_its_last_checkpoint(smoke_run):
    """The resumed run's first checkpoint is the one after the last the killed run wrote, and
    the history (one entry per checkpoint, kept across restarts) has every step once, in
    order, the killed run's entries unchanged. A restart from zero fails each of these."""
    killed, resumed = checkpoint_steps(smoke_run.killed_log), checkpoint_steps(smoke_run.log)
    assert "Component Evaluator" not in smoke_run.killed_log
    every = killed[0]
    assert killed == list(range(every, 40 + 1, every))  # killed right after step 40's
    resumed_from = int(re.search(r"Resuming from \S+ \(step (\d+) of", smoke_run.log)[1])
    assert resumed_from == killed[-1]
    assert resumed == list(range(resumed_from + every, SMOKE_TRAIN_STEPS + 1, every))
    with open(os.path.join(smoke_run.model_run_uri, HISTORY_FILE)) as f:
        history = json.load(f)
    assert [entry["step"] for entry in history] == killed + resumed
    killed_losses = re.findall(r"Checkpoint at step \d+: \S+ \(validation loss ([\d.]+)\)",
                               smoke_run.killed_log)
    assert [f"{entry['val_loss']:.3f}" for entry in history[:len(killed)]] == killed_losses


def test_the_trainer_says_it_trains_on_the_cpu_with_onednn_kernels(smoke_run):
    assert "No GPU visible: training on the CPU (" in smoke_run.log
    assert "threads, oneDNN kernels on)." in smoke_run.log


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
    # Against one reference: the first of each sentence, in fra.txt's order.
    first = [[refs[0] for _, refs in rows]]
    assert overall["corpus_bleu_1ref"]["doubleValue"] == pytest.approx(
        sacrebleu.corpus_bleu(hypotheses, first).score, abs=1e-6)
    assert overall["corpus_chrf_1ref"]["doubleValue"] == pytest.approx(
        sacrebleu.corpus_chrf(hypotheses, first).score, abs=1e-6)
    assert overall["corpus_chrf_1ref"]["doubleValue"] < overall["corpus_chrf"]["doubleValue"]
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
    """...and its TF Serving warm-up requests replay as TF Serving replays them at load: each
    record's signature by name, its inputs by key (trainer_module/serving_warmup.py)."""
    path = pushed_path(smoke_run)
    script = (
        "import sys, tensorflow as tf, tensorflow_text\n"
        "from tensorflow_serving.apis import prediction_log_pb2\n"
        f"m = tf.saved_model.load({path!r})\n"
        f"warmup = tf.data.TFRecordDataset({os.path.join(path, WARMUP_FILE)!r})\n"
        "replayed = []\n"
        "for record in warmup:\n"
        "    request = prediction_log_pb2.PredictionLog.FromString(record.numpy()"
        ").predict_log.request\n"
        "    got = m.signatures[request.model_spec.signature_name](**{k: tf.make_ndarray(v) "
        "for k, v in request.inputs.items()})\n"
        "    replayed.append(f'{request.model_spec.signature_name}:{len(got[\"translation\"])}')\n"
        "out = m.signatures['serving_default'](tf.constant(['I am hungry.', 'Go.', '']))\n"
        "beam = m.signatures['beam_search'](tf.constant(['I am hungry.']))\n"
        "print(replayed)\n"
        "print([t.decode() for t in out['translation'].numpy()], out['token_ids'].shape[0],"
        " float(beam['score'][0]) <= 0, sep='|')\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd="/", env={k: v for k, v in os.environ.items()
                                          if k != "PYTHONPATH"}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    replayed, served = result.stdout.strip().splitlines()[-2:]
    assert eval(replayed) == ["serving_default:2", "beam_search:2"]  # a printed list of str
    translations, batch, beam_ok = served.split("|")
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
    assert ("inputs['english'] tensor_info: dtype: DT_STRING shape: (-1) "
            "name: serving_default_english:0") in shown
    for output, dtype, shape in (("translation", "DT_STRING", "(-1)"),
                                 ("token_ids", "DT_INT32", "(-1, -1)"),
                                 ("score", "DT_FLOAT", "(-1)")):
        assert f"outputs['{output}'] tensor_info: dtype: {dtype} shape: {shape}" in shown


def test_translate_arguments_and_stdin_agree(smoke_run):
    root = smoke_run.root
    by_args = nmt_translate(root, "I am hungry.", "Where is the station?")
    assert by_args.returncode == 0, by_args.stderr[-3000:]
    by_stdin = nmt_translate(root, stdin=b"I am hungry.\nWhere is the station?\n")
    lines = by_args.stdout.decode().splitlines()
    assert len(lines) == 2 and all(lines)
    assert by_stdin.stdout.decode().splitlines() == lines


def test_translate_runs_the_signature_as_exported_without_grappler(smoke_run):
    """`nmt translate` skips Grappler (graph_optimization.skip_graph_optimization); a process that
    loads the same model with TensorFlow's defaults optimizes the signature's graph, so the
    log line looked for is there to see."""
    grappler_log = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0",
                    "TF_CPP_VMODULE": "meta_optimizer=1"}
    optimized = "Starting optimization for grappler item: __inference_signature_wrapper_serve"
    defaults = subprocess.run(
        [sys.executable, "-c", "import sys, tensorflow as tf, tensorflow_text; "
         "tf.saved_model.load(sys.argv[1]).signatures['serving_default'](tf.constant(['Hi.']))",
         pushed_path(smoke_run)], env=grappler_log, capture_output=True, text=True, timeout=300)
    assert defaults.returncode == 0, defaults.stderr[-3000:]
    assert optimized in defaults.stderr
    done = nmt_translate(smoke_run.root, "I am hungry.", env=grappler_log)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr[-3000:]
    assert optimized not in done.stderr.decode()


_EVALUATOR_THEN_A_CALL = """import sys
import tensorflow as tf
import tensorflow_text
from benchmarks.evaluator_time import evaluator_seconds
examples, model, root = sys.argv[1:]
print(evaluator_seconds(examples, model, root)[1]["overall"]["bleu"], flush=True)
print("== the Evaluator ended ==", file=sys.stderr, flush=True)
tf.saved_model.load(model + "/Format-Serving").signatures["serving_default"](tf.constant(["Hi."]))
"""


def test_the_evaluator_runs_the_model_without_grappler_and_sets_it_back(smoke_run, tmp_path):
    """The pipeline's Evaluator (components/evaluator_executor.py) evaluates with no graph
    through Grappler; once it has ended, the process's TensorFlow optimizes graphs again, so
    the log line looked for is there to see after it."""
    model = latest_artifact(open_store(smoke_run.root), "Model", "Trainer").uri
    done = subprocess.run(
        [sys.executable, "-c", _EVALUATOR_THEN_A_CALL, smoke_run.examples_uri, model,
         str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_VMODULE": "meta_optimizer=1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert math.isfinite(float(done.stdout.split()[-1]))  # the Evaluator scored the model
    during, after = done.stderr.split("== the Evaluator ended ==")
    assert "Starting optimization for grappler item" not in during
    assert "Starting optimization for grappler item: __inference_signature_wrapper_serve" in after


# 90 words, one sentence, no clause of more than the smoke model's 32 tokens.
LONG_ENGLISH = (
    "When we arrived at the station, the train had already left, so we decided to walk to the "
    "old town, where my grandmother used to live, and we stopped at a small café near the "
    "river, because it was raining hard; after an hour the rain stopped, the sun came out, "
    "and we walked along the water until evening, talking about the summers we had spent "
    "there as children, when everything seemed much simpler, when the days were long and "
    "warm, and when nobody we loved had ever gone away.")


def test_a_90_word_sentence_is_translated_whole_without_a_warning(smoke_run):
    """90 words are at least 90 tokens, far over the smoke model's 32: without clause splitting
    the CLI would warn that only the first 32 were translated, and with a clause cut between
    words it would warn of that. The smoke model (40 steps) speaks no French, so what its
    translation says is chance and is not asserted here; that a line's translation is its
    pieces' translations joined in order is test_export's
    test_a_long_sentence_is_translated_in_pieces_cut_at_its_clauses."""
    assert len(LONG_ENGLISH.split()) == 90
    result = nmt_translate(smoke_run.root, stdin=f"{LONG_ENGLISH}\n".encode())
    assert result.returncode == 0, result.stderr[-3000:]
    err = result.stderr.decode()
    assert "Line 1 has" not in err and "were translated" not in err, err[-2000:]
    assert result.stdout.decode().strip(), err[-2000:]


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
    assert ("Line 4 has a clause of 60 tokens with no comma or clause boundary within the "
            "model's 32: it was translated in pieces cut between words." in err)
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


def test_worse_candidate_is_not_blessed_and_not_pushed_and_the_log_says_why(smoke_run,
                                                                          smoke_rerun):
    root, result = smoke_run.root, smoke_rerun
    store = open_store(root)
    blessing = latest_artifact(store, "ModelBlessing")
    assert blessing.custom_properties["blessed"].int_value == 0
    assert latest_artifact(store, "PushedModel").custom_properties["pushed"].int_value == 0
    assert versions(root) == [smoke_run.pushed_version]
    # Why: the candidate fell more than --max-metric-drop below the blessed baseline.
    validation = tfma.load_validation_result(latest_artifact(store, "ModelEvaluation").uri)
    assert not validation.validation_ok
    failed = {(f.metric_key.name, f.metric_key.is_diff)
              for s in validation.metric_validations_per_slice for f in s.failures}
    assert failed and all(is_diff for _, is_diff in failed)  # change thresholds, not min BLEU
    assert failed <= {("corpus_bleu_1ref", True), ("corpus_chrf_1ref", True)}
    summary = run_summary(result.stderr, "WARNING")  # no new model: a warning
    verdict = next(line for line in summary if line.startswith("  Blessed: no: "))
    for name, _ in failed:
        assert re.search(rf"{name} changed by -[\d.]+ against the baseline", verdict), verdict
    assert "  Pushed: not pushed" in summary
    assert summary[-1] == (f"  Next: nmt report --pipeline-root {shlex.quote(root)}  (this "
                           "run's metrics next to the previous ones)")


def test_serving_needs_only_core_ops_and_tf_servings_text_ops(smoke_run):
    """Every op of saved_model.pb (graph and all functions), read in a fresh process that never
    imports tensorflow_text: the ops core TensorFlow does not know are exactly the expected
    tf-text ops, each one in TF Serving 2.12's build (TF_SERVING_2_12_TEXT_OPS)."""
    unknown = ops_core_tensorflow_lacks(os.path.join(pushed_path(smoke_run), "saved_model.pb"))
    assert unknown == ["NormalizeUTF8", "SentencepieceOp", "SentencepieceTokenizeOp"]
    assert set(unknown) <= set(TF_SERVING_2_12_TEXT_OPS)

"""`nmt metadata …` and `nmt report` on the session's smoke pipeline root (conftest): three runs,
the first killed during training, the second resuming it (trains, blesses, pushes), the third
a partly cached re-run whose 2-step candidate is worse and not blessed.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import socket
import subprocess
import tempfile
from typing import Any

import ml_metadata as mlmd
import pytest
import sacrebleu
import tensorflow_model_analysis as tfma
from ml_metadata.proto import metadata_store_pb2
from PIL import Image

from conftest import SMOKE_TRAIN_STEPS, SmokeRun
from cli import errors, report
from cli import metadata as metadata_cli
from metadata.runs import list_runs
from metadata.store import connect, sqlite_config
from trainer_module.hparams import PROFILES

UPSTREAM = ("FraTxtExampleGen", "ImportSchemaGen", "StatisticsGen", "StrictExampleValidator",
            "Transform")
RESOLVER = "latest_blessed_model_resolver"
RERUN_TRAIN_STEPS = 2  # conftest.smoke_rerun
MATPLOTLIB_BLUE = (31, 119, 180)  # the first colour of every plot in the report


def nmt(capsys, *argv: str) -> tuple[int, str, str]:
    """`nmt ARGV` in-process, with the sub-commands that cli/main.py adds."""
    parser = argparse.ArgumentParser(prog="nmt")
    commands = parser.add_subparsers(dest="command", required=True)
    metadata_cli.add_parser(commands)
    report.add_parser(commands)
    args = parser.parse_args(argv)
    capsys.readouterr()
    status = errors.run_handler(args)
    out, err = capsys.readouterr()
    return status, out, err


def query(capsys, root: str, *argv: str) -> Any:
    status, out, err = nmt(capsys, "metadata", *argv, "--pipeline-root", root, "--json")
    assert status == 0, err
    return json.loads(out)


def error(capsys, *argv: str) -> str:
    """The one line a failing command prints; it must exit with status 2, no traceback."""
    status, out, err = nmt(capsys, *argv)
    assert (status, out) == (2, ""), err
    assert err.startswith("nmt: error: ") and err.count("\n") == 1, err
    return err[len("nmt: error: "):].strip()


@pytest.fixture(scope="module")
def root(smoke_run: SmokeRun, smoke_rerun) -> str:
    return smoke_run.root


@pytest.fixture(scope="module")
def run_ids(root) -> dict[str, str]:
    """killed, resumed, rerun -> run id (the store's runs, oldest first)."""
    runs = list_runs(connect(sqlite_config(os.path.join(root, "metadata.sqlite"))))
    return dict(zip(("killed", "resumed", "rerun"), [r["run"] for r in reversed(runs)]))


def overall_scores(evaluation_uri: str) -> dict[str, float]:
    """Read with TFMA directly, to check what the commands report."""
    metrics = dict(tfma.load_eval_result(evaluation_uri).slicing_metrics)[()][""][""]
    return {"bleu": metrics["corpus_bleu"]["doubleValue"],
            "chrf": metrics["corpus_chrf"]["doubleValue"],
            "bleu_1ref": metrics["corpus_bleu_1ref"]["doubleValue"],
            "chrf_1ref": metrics["corpus_chrf_1ref"]["doubleValue"]}


def states(run: dict[str, Any]) -> dict[str, str]:
    return {c["component"]: c["state"] for c in run["components"]}


TRAINED = {**dict.fromkeys(UPSTREAM, "cached"), RESOLVER: "executed", "Trainer": "executed",
           "Evaluator": "executed", "AtomicPusher": "executed"}
KILLED = {**dict.fromkeys(UPSTREAM, "executed"), RESOLVER: "executed", "Trainer": "interrupted"}


def test_runs_newest_first_with_executed_cached_and_interrupted_components(capsys, root, run_ids):
    runs = query(capsys, root, "runs")
    assert [r["run"] for r in runs] == [run_ids["rerun"], run_ids["resumed"], run_ids["killed"]]
    assert [r["status"] for r in runs] == ["complete", "complete", "interrupted"]
    rerun, resumed, killed = runs
    assert states(killed) == KILLED
    assert states(resumed) == states(rerun) == TRAINED
    for run in runs:
        assert run["pipeline"] == "nmt-fra-eng"
        assert run["start"] <= run["end"] and run["duration_s"] >= 0
        executions = [c["execution"] for c in run["components"]]
        assert executions == sorted(executions)  # in the order they ran
        assert all(c["duration_s"] >= 0 for c in run["components"] if c["state"] != "interrupted")
    assert {c["component"]: c["duration_s"] for c in killed["components"]}["Trainer"] is None
    trainer = {c["component"]: c for c in resumed["components"]}["Trainer"]
    assert trainer["duration_s"] > max(c["duration_s"] for c in resumed["components"]
                                       if c["state"] == "cached")

    status, table, _ = nmt(capsys, "metadata", "runs", "--pipeline-root", root)
    lines = table.splitlines()
    assert status == 0
    assert lines[0].split() == ["RUN", "STATUS", "STARTED", "SECONDS", "BEAM", "ENGINE",
                                "SPANS", "COMPONENT", "STATE", "SECONDS"]
    assert lines[1].split()[:2] == [run_ids["rerun"], "complete"]
    assert lines[1].split()[-3:-1] == ["FraTxtExampleGen", "cached"]
    assert lines[1][lines[0].index("BEAM ENGINE"):].startswith("direct (in memory)")
    assert len(lines) == 1 + sum(len(r["components"]) for r in runs) + 1  # + blank line
    assert lines[1].index("FraTxtExampleGen") == lines[2].index("ImportSchemaGen") == \
        lines[0].index("COMPONENT")  # aligned


def test_artifacts_show_input_file_splits_and_producers(capsys, root, run_ids, fra_sample,
                                                        smoke_run):
    examples = query(capsys, root, "artifacts", "--type", "Examples")
    assert [(e["producer"], e["run"]) for e in examples] == [
        ("Transform", run_ids["killed"]), ("FraTxtExampleGen", run_ids["killed"])]
    raw = examples[1]["properties"]
    with open(fra_sample, "rb") as f:
        data = f.read()
    assert examples[1]["uri"] == smoke_run.examples_uri
    assert raw["input"] == {"path": fra_sample, "size_bytes": len(data),
                            "sha256": hashlib.sha256(data).hexdigest()}
    assert raw["lines_read"] == len(data.splitlines()) == raw["pairs_kept"] + raw["lines_rejected"]
    assert sorted(raw["splits"]) == ["eval", "test", "train"]
    assert min(raw["splits"].values()) > 0 and sum(raw["splits"].values()) == raw["examples"]
    assert examples[0]["properties"] == {"splits": raw["splits"]}  # Transform keeps every one


def test_artifacts_show_blessings_and_pushes(capsys, root, run_ids, smoke_run):
    blessings = query(capsys, root, "artifacts", "--type", "ModelBlessing")
    models = query(capsys, root, "artifacts", "--type", "Model")
    rerun_model, resumed_model = (m["id"] for m in models)
    assert [(b["run"], b["properties"]["blessed"], b["properties"]["model"],
             b["properties"]["baseline_model"]) for b in blessings] == [
        (run_ids["rerun"], False, rerun_model, resumed_model),
        (run_ids["resumed"], True, resumed_model, None)]
    evaluated = blessings[1]["properties"]
    assert {k: evaluated[k] for k in ("bleu", "chrf", "bleu_1ref", "chrf_1ref")} == \
        overall_scores(smoke_run.evaluation_uri)

    pushed = query(capsys, root, "artifacts", "--type", "PushedModel")
    version = smoke_run.pushed_version
    assert [(p["run"], p["producer"], p["properties"]) for p in pushed] == [
        (run_ids["rerun"], "AtomicPusher", {"pushed": False, "version": None, "destination": None}),
        (run_ids["resumed"], "AtomicPusher", {
            "pushed": True, "version": version,
            "destination": os.path.join(root, "serving", "nmt-fra-eng", version)})]


def test_artifacts_of_a_run_include_what_it_reused_from_the_cache(capsys, root, run_ids):
    rerun = query(capsys, root, "artifacts", "--run", run_ids["rerun"])
    made_by = {(a["type"], a["producer"]): a["run"] for a in rerun}
    assert made_by[("Examples", "FraTxtExampleGen")] == run_ids["killed"]  # cached
    for trained in ("Model", "ModelRun", "ModelEvaluation", "ModelBlessing", "PushedModel"):
        assert [a["run"] for a in rerun if a["type"] == trained] == [run_ids["rerun"]]
    assert {a["id"] for a in rerun} < {a["id"] for a in query(capsys, root, "artifacts")}


def test_lineage_goes_from_the_pushed_version_back_to_the_input_file(capsys, root, run_ids,
                                                                     fra_sample, smoke_run):
    result = query(capsys, root, "lineage", smoke_run.pushed_version)
    chain = result["chain"]
    node = {(n["type"], n["producer"]): n for n in chain}
    pushed, blessing = node[("PushedModel", "AtomicPusher")], node[("ModelBlessing", "Evaluator")]
    model, raw = node[("Model", "Trainer")], node[("Examples", "FraTxtExampleGen")]
    transformed, graph = node[("Examples", "Transform")], node[("TransformGraph", "Transform")]
    schema = node[("Schema", "ImportSchemaGen")]
    assert len(chain) == len(node) == 8 and chain[0] is pushed and result["target"] == pushed["id"]
    assert pushed["properties"]["version"] == smoke_run.pushed_version
    assert (pushed["run"], blessing["run"], model["run"]) == (run_ids["resumed"],) * 3
    assert blessing["properties"]["blessed"] is True
    assert pushed["inputs"] == sorted([model["id"], blessing["id"]], reverse=True)
    assert blessing["inputs"] == sorted([model["id"], raw["id"]], reverse=True)
    assert model["inputs"] == sorted([transformed["id"], graph["id"], schema["id"]], reverse=True)
    assert transformed["inputs"] == graph["inputs"] == sorted([raw["id"], schema["id"]],
                                                               reverse=True)
    assert raw["inputs"] == schema["inputs"] == []
    ids = [n["id"] for n in chain[:-1]]
    assert ids == sorted(ids, reverse=True)  # every artifact before what it was made from
    with open(fra_sample, "rb") as f:
        sha256 = hashlib.sha256(f.read()).hexdigest()
    assert chain[-1] == {"id": None, "type": "File", "uri": fra_sample, "producer": None,
                         "run": None, "created": None, "inputs": [],
                         "properties": {"size_bytes": os.path.getsize(fra_sample),
                                        "sha256": sha256}}
    hparams = result["hyperparameters"]
    assert hparams["train_steps"] == SMOKE_TRAIN_STEPS
    assert hparams["num_layers"] == PROFILES["smoke"].num_layers
    assert hparams["d_model"] == PROFILES["smoke"].d_model

    status, table, _ = nmt(capsys, "metadata", "lineage", smoke_run.pushed_version,
                           "--pipeline-root", root)
    assert status == 0
    assert table.splitlines()[0] == (f"Lineage of artifact {pushed['id']}, back to the input "
                                     "file")
    assert re.search(rf"{re.escape(fra_sample)} +size_bytes={os.path.getsize(fra_sample)}, "
                     rf"sha256={sha256}$", table, re.MULTILINE)
    assert re.search(rf"^train_steps +{SMOKE_TRAIN_STEPS}$", table, re.MULTILINE)


def test_lineage_does_not_follow_the_baseline_model(capsys, root, run_ids):
    blessing = query(capsys, root, "artifacts", "--type", "ModelBlessing",
                     "--run", run_ids["rerun"])[0]
    chain = query(capsys, root, "lineage", str(blessing["id"]))["chain"]
    assert [n["run"] for n in chain if n["type"] == "Model"] == [run_ids["rerun"]]
    assert chain[-1]["type"] == "File"


def test_models_mark_the_serving_one(capsys, root, run_ids, smoke_run):
    rerun, resumed = query(capsys, root, "models")
    assert {k: resumed[k] for k in ("run", "train_steps", "trained_steps", "total_train_steps",
                                    "blessed", "baseline_model", "pushed_version",
                                    "serving")} == {
        "run": run_ids["resumed"], "train_steps": SMOKE_TRAIN_STEPS,
        "trained_steps": SMOKE_TRAIN_STEPS, "total_train_steps": SMOKE_TRAIN_STEPS,
        "blessed": True,
        "baseline_model": None, "pushed_version": smoke_run.pushed_version, "serving": True}
    assert {k: rerun[k] for k in ("run", "train_steps", "trained_steps", "blessed",
                                  "baseline_model", "pushed_version", "serving")} == {
        "run": run_ids["rerun"], "train_steps": RERUN_TRAIN_STEPS,
        "trained_steps": RERUN_TRAIN_STEPS, "blessed": False,
        "baseline_model": resumed["model"], "pushed_version": None, "serving": False}
    assert {k: resumed[k] for k in ("bleu", "chrf", "bleu_1ref", "chrf_1ref")} == \
        overall_scores(smoke_run.evaluation_uri)
    assert rerun["chrf"] < resumed["chrf"]

    status, table, _ = nmt(capsys, "metadata", "models", "--pipeline-root", root)
    serving = [line for line in table.splitlines() if "<- serving" in line]
    assert status == 0 and len(serving) == 1
    # Every BLEU names its references and signature: the title says which is which.
    assert table.splitlines()[1].split()[2:9] == ["STEPS", "OF", "TOTAL", "BLEU-1REF",
                                                  "CHRF-1REF", "BLEU-ALL", "CHRF-ALL"]
    assert f"(BLEU nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{sacrebleu.__version__}" \
           in table.splitlines()[0]
    assert serving[0].split()[:2] == [str(resumed["model"]), run_ids["resumed"]]


def test_diff_reports_the_changed_hyperparameter(capsys, root, run_ids):
    result = query(capsys, root, "diff", run_ids["resumed"], run_ids["rerun"])
    assert (result["run_a"], result["run_b"]) == (run_ids["resumed"], run_ids["rerun"])
    changes = result["changes"]
    assert [c for c in changes if c["section"] != "metrics"] == [
        {"section": "config", "key": "Trainer.custom_config.hparams.decode_loop_ngram",
         "a": None, "b": 0},  # conftest.smoke_rerun's --hparam
        {"section": "config", "key": "Trainer.train_args.num_steps",
         "a": SMOKE_TRAIN_STEPS, "b": RERUN_TRAIN_STEPS},
        {"section": "hyperparameters", "key": "checkpoint_every",
         "a": PROFILES["smoke"].checkpoint_every, "b": RERUN_TRAIN_STEPS},
        {"section": "hyperparameters", "key": "decode_loop_ngram",
         "a": PROFILES["smoke"].decode_loop_ngram, "b": 0},
        {"section": "hyperparameters", "key": "train_steps",
         "a": SMOKE_TRAIN_STEPS, "b": RERUN_TRAIN_STEPS}]
    metrics = {c["key"]: (c["a"], c["b"]) for c in changes if c["section"] == "metrics"}
    rerun, resumed = query(capsys, root, "models")
    assert metrics["blessing.blessed"] == (True, False)
    assert metrics["evaluation.overall.chrf"] == (resumed["chrf"], rerun["chrf"])
    assert metrics["training.loss"][0] < metrics["training.loss"][1]
    assert all(a != b for a, b in metrics.values())


def test_diff_shows_what_a_killed_run_did_not_do(capsys, root, run_ids):
    changes = query(capsys, root, "diff", run_ids["killed"][:23], run_ids["resumed"])["changes"]
    # Same input and config; the killed run has no hyperparameters or metrics to compare.
    assert changes == [
        {"section": "components", "key": name, "a": KILLED.get(name), "b": state}
        for name, state in sorted(TRAINED.items()) if KILLED.get(name) != state]


def test_clear_errors_for_missing_or_empty_stores_and_unknown_ids(capsys, root, tmp_path):
    missing = tmp_path / "nowhere"
    assert error(capsys, "metadata", "runs", "--pipeline-root", str(missing)) == (
        f"No ML Metadata store at {missing}/metadata.sqlite: run the pipeline first "
        "(`nmt run`), or pass the --pipeline-root of an existing one.")
    assert not missing.exists()  # inspecting never creates a store

    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = str(tmp_path / "metadata.sqlite")
    mlmd.MetadataStore(config)  # a store with no runs
    assert error(capsys, "metadata", "models", "--pipeline-root", str(tmp_path)).startswith(
        "The ML Metadata store holds no pipeline runs yet")
    not_a_store = tmp_path / "empty"
    not_a_store.mkdir()
    (not_a_store / "metadata.sqlite").write_bytes(b"")
    assert error(capsys, "metadata", "runs", "--pipeline-root", str(not_a_store)).startswith(
        "Cannot read the ML Metadata store (")
    assert (not_a_store / "metadata.sqlite").read_bytes() == b""

    assert error(capsys, "metadata", "diff", "nope", "2", "--pipeline-root", root).startswith(
        "'nope' is not a known run (e.g. ")
    assert error(capsys, "metadata", "artifacts", "--run", "20", "--pipeline-root",
                 root).startswith("'20' is ambiguous")
    assert error(capsys, "metadata", "lineage", "987654", "--pipeline-root", root) == (
        "'987654' is neither a pushed version nor an artifact id in the store: see "
        "`nmt metadata models` and `nmt metadata artifacts`.")
    assert error(capsys, "metadata", "artifacts", "--type", "Modle", "--pipeline-root",
                 root).startswith("No artifacts of type 'Modle'; types in the store: ")


def test_connection_flags_reach_grpc_and_mysql(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    assert "Connection refused" in error(capsys, "metadata", "runs", "--grpc-host",
                                         "127.0.0.1", "--grpc-port", str(port))
    parser = argparse.ArgumentParser()
    metadata_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["metadata", "runs", "--mysql-host", "db", "--mysql-port", "3307",
                              "--mysql-database", "kubeflow_metadata", "--mysql-user", "u",
                              "--mysql-password", "p"])
    mysql = metadata_cli.store_config(args).mysql
    assert (mysql.host, mysql.port, mysql.database, mysql.user, mysql.password,
            mysql.skip_db_creation) == ("db", 3307, "kubeflow_metadata", "u", "p", True)
    assert error(capsys, "metadata", "runs", "--grpc-host", "a", "--mysql-host", "b") == (
        "Pass --grpc-host or --mysql-host, not both.")


def chromium(*args: str) -> str:
    """Debian's headless Chromium, isolated from the network and any profile."""
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", *args],
            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_report_renders_in_headless_chromium(capsys, root, run_ids, tmp_path):
    output = tmp_path / "report"
    status, out, err = nmt(capsys, "report", run_ids["resumed"][:23], "--pipeline-root", root,
                           "--output", str(output))
    assert status == 0, err
    assert out == f"{output / 'report.html'}\n"
    pngs = ["attention-1.png", "attention-2.png", "attention-3.png", "bleu_by_length.png",
            "loss.png"]
    assert sorted(os.listdir(output)) == sorted(pngs + ["report.html"])

    dom = chromium("--dump-dom", (output / "report.html").as_uri())
    assert re.findall(r"<h1>(.*?)</h1>", dom) == [f"Run {run_ids['resumed']}"]
    assert re.findall(r"<h2>(.*?)</h2>", dom) == [
        "Summary", "Components", "Training and validation loss", "BLEU by sentence length",
        "Sample translations", "Attention"]
    images = re.findall(r'<img src="data:image/png;base64,([^"]+)"', dom)
    assert dom.count("<img") == len(images) == len(pngs)
    assert sorted(base64.b64decode(i) for i in images) == sorted(
        (output / name).read_bytes() for name in pngs)  # self-contained: the PNGs inlined
    samples = dom.split("<h2>Sample translations</h2>")[1].split("</table>")[0]
    assert samples.count("<tr>") == 1 + 8  # header + --samples default

    screenshot = tmp_path / "screenshot.png"
    chromium(f"--screenshot={screenshot}", "--window-size=1280,6000",
             (output / "report.html").as_uri())
    pixels = list(Image.open(screenshot).convert("RGB").getdata())
    assert pixels.count(MATPLOTLIB_BLUE) > 500  # the plots were decoded and painted


def test_report_of_a_run_without_a_model_says_so(capsys, root, run_ids, tmp_path):
    assert error(capsys, "report", run_ids["killed"], "--pipeline-root", root, "--output",
                 str(tmp_path / "r")) == (
        f"Run {run_ids['killed']} has no Model, ModelRun, ModelEvaluation, ModelBlessing "
        "artifact: its Trainer or Evaluator did not finish. Report a run that evaluated a model "
        "(see `nmt metadata runs`).")
    assert not (tmp_path / "r").exists()

"""`nmt metadata` on the stores other than `nmt run`'s SQLite file: one in the layout Kubeflow
Pipelines v2 writes (kfp_store: this pipeline's compiled spec played through KFP's driver and
launcher calls, with a cached, an executed and a failed task), and live MySQL-backed stores on
a MariaDB server of the test's own (mysql_server), read by the real CLI with its --mysql-*
flags. Every expected value comes from what the fixture wrote, or from the SQLite original.
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
from typing import Any, Iterator

import ml_metadata as mlmd
import pytest
import tensorflow as tf
from ml_metadata.proto import metadata_store_pb2

import kfp_store
import mysql_server
from conftest import run_nmt
from metadata.store import connect, sqlite_config
from test_metadata import error, nmt, query

TRAINED, WORSE, BROKEN = kfp_store.SCENARIO_NAMES
PIPELINE = "nmt-fra-eng"
TIMES = frozenset({"start", "end", "duration_s", "created"})  # MLMD stamps rows as written


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[Any, str]:
    """The pipeline compiled for open-source KFP, its pipeline root a local directory holding
    the input file."""
    root = str(tmp_path_factory.mktemp("kfp"))
    data = kfp_store.write_data(root)
    return kfp_store.compile_spec(root, data), data


@pytest.fixture(scope="module")
def kfp(compiled) -> kfp_store.KfpStore:
    """The scenario's runs in KFP's layout, in <pipeline root>/metadata.sqlite."""
    spec, data = compiled
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = os.path.join(spec.default_pipeline_root, "metadata.sqlite")
    return kfp_store.write_store(config, spec, data)


def tfx_type(artifact: metadata_store_pb2.Artifact) -> str:
    """The TFX type that KubeflowV2DagRunner titled the artifact's schema with."""
    assert artifact.type.startswith("tfx."), artifact.type
    return artifact.type[len("tfx."):]


def custom(artifact: metadata_store_pb2.Artifact, key: str) -> Any:
    """A scalar custom property as stored (KFP's numbers are doubles)."""
    value = artifact.custom_properties[key]
    return getattr(value, value.WhichOneof("value"))


def read_json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def hparams(kfp: kfp_store.KfpStore, run: str) -> dict[str, Any]:
    return read_json(os.path.join(kfp.artifact(run, "Trainer", "model_run").uri, "hparams.json"))


def steps(run: str) -> int:
    return dict((name, n) for name, n, _ in kfp_store.SCENARIO)[run]


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON text, so that 3 and 3.0 differ (KFP stores every number as a double)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_the_fixture_has_executed_cached_and_failed_tasks(kfp, compiled):
    spec, _ = compiled
    assert set(kfp.run(TRAINED).tasks) == set(spec.root.dag.tasks)
    assert {t.state for t in kfp.run(TRAINED).tasks.values()} == {"executed"}
    assert {t.state for t in kfp.run(WORSE).tasks.values()} == {"cached", "executed"}
    assert kfp.run(BROKEN).tasks["Trainer"].state == "failed"
    assert not custom(kfp.artifact(WORSE, "Evaluator", "blessing"), "blessed")


def test_kfp_runs_show_executed_cached_and_failed_tasks(capsys, kfp):
    runs = query(capsys, kfp.root, "runs")
    written = list(reversed(kfp.runs))  # newest first
    assert [(r["run"], r["status"], r["pipeline"]) for r in runs] == [
        (run.id, run.status, PIPELINE) for run in written]
    assert [r["status"] for r in runs] == ["failed", "complete", "complete"]
    for shown, run in zip(runs, written):
        # Tasks only: the run's own system.DAGExecution is not a component.
        assert [(c["component"], c["execution"], c["state"]) for c in shown["components"]] == [
            (name, task.execution, task.state) for name, task in run.tasks.items()]
        assert all(c["duration_s"] >= 0 for c in shown["components"])
        assert shown["start"] <= shown["end"]

    status, table, _ = nmt(capsys, "metadata", "runs", "--pipeline-root", kfp.root)
    assert status == 0
    lines, broken = table.splitlines(), kfp.run(BROKEN)
    assert lines[1].split()[:2] == [broken.id, "failed"]
    assert [tuple(line.split()[-3:-1]) for line in lines[1:1 + len(broken.tasks)]] == [
        (name, task.state) for name, task in broken.tasks.items()]


def split_sizes(examples: metadata_store_pb2.Artifact) -> dict[str, int]:
    """Records per split, read with TensorFlow."""
    return {split: sum(1 for _ in tf.data.TFRecordDataset(
        glob.glob(os.path.join(examples.uri, f"Split-{split}", "*")), compression_type="GZIP"))
            for split in json.loads(custom(examples, "split_names"))}


def test_kfp_artifacts_have_tfx_types_producers_and_properties(capsys, kfp):
    trained = kfp.run(TRAINED).id
    raw = kfp.artifact(TRAINED, "FraTxtExampleGen", "examples")
    transformed = kfp.artifact(TRAINED, "Transform", "transformed_examples")
    # ExampleGen is never cached on KFP (it reads a file KFP cannot fingerprint): later runs
    # have Examples of their own, so look at the trained run's.
    examples = query(capsys, kfp.root, "artifacts", "--type", "Examples", "--run", trained)
    assert [(e["id"], e["type"], e["producer"], e["run"], e["uri"]) for e in examples] == [
        (transformed.id, "Examples", "Transform", trained, transformed.uri),
        (raw.id, "Examples", "FraTxtExampleGen", trained, raw.uri)]
    report = json.loads(custom(raw, "parse_report"))
    splits = split_sizes(raw)
    assert min(splits.values()) > 0 and sum(splits.values()) == report["examples"]
    assert same_json(examples[1]["properties"], {
        "splits": splits, "input": kfp.data,
        **{key: report[key] for key in ("lines_read", "pairs_kept", "lines_rejected",
                                        "examples")}})
    assert report["input"] == kfp.data
    assert examples[0]["properties"] == {"splits": splits}

    blessings = query(capsys, kfp.root, "artifacts", "--type", "ModelBlessing")
    expected = []
    for run in (WORSE, TRAINED):
        blessing = kfp.artifact(run, "Evaluator", "blessing")
        expected.append({"id": blessing.id, "run": kfp.run(run).id, "producer": "Evaluator",
                         "properties": {
                             "blessed": bool(custom(blessing, "blessed")),
                             "model": kfp.artifact(run, "Trainer", "model").id,
                             "baseline_model": None,  # open-source KFP: no resolver
                             "evaluation": kfp.artifact(run, "Evaluator", "evaluation").id,
                             **kfp_store.scores(steps(run))["overall"]}})
    assert [{k: b[k] for k in ("id", "run", "producer", "properties")} for b in blessings] == \
        expected
    assert [b["properties"]["blessed"] for b in blessings] == [False, True]

    pushed = query(capsys, kfp.root, "artifacts", "--type", "PushedModel")
    push = kfp.artifact(TRAINED, "AtomicPusher", "pushed_model")
    assert [(p["run"], p["producer"], p["properties"]) for p in pushed] == [
        (kfp.run(WORSE).id, "AtomicPusher", {"pushed": False, "version": None,
                                             "destination": None}),
        (trained, "AtomicPusher", {"pushed": True, "version": custom(push, "pushed_version"),
                                   "destination": custom(push, "pushed_destination")})]


def test_kfp_artifacts_of_a_run_include_what_it_reused_from_the_cache(capsys, kfp):
    shown = query(capsys, kfp.root, "artifacts", "--run", kfp.run(WORSE).id)
    worse = kfp.run(WORSE)
    assert sorted(a["id"] for a in shown) == sorted(
        a for task in worse.tasks.values() for a in task.outputs.values())
    made_by = {a["id"]: a["run"] for a in shown}
    for name, task in worse.tasks.items():
        for artifact_id in task.outputs.values():
            assert made_by[artifact_id] == (kfp.run(TRAINED).id if task.state == "cached"
                                            else worse.id), name
    assert query(capsys, kfp.root, "artifacts", "--run", kfp.run(BROKEN).id[:8]) == [
        a for a in query(capsys, kfp.root, "artifacts")
        if a["id"] in {a for t in kfp.run(BROKEN).tasks.values() for a in t.outputs.values()}]


def written_lineage(kfp: kfp_store.KfpStore, target: int) -> dict[int, list[int]]:
    """Artifact id -> the ids its producing task read, for the target and everything upstream,
    from the fixture's own record of each task's inputs and outputs."""
    made_by = {a: task for run in kfp.runs for task in run.tasks.values()
               if task.state == "executed" for a in task.outputs.values()}
    chain, todo = {}, [target]
    while todo:
        current = todo.pop()
        chain[current] = sorted(set(made_by[current].inputs.values()), reverse=True)
        todo.extend(a for a in chain[current] if a not in chain)
    return chain


def test_kfp_lineage_goes_from_the_pushed_version_back_to_the_input_file(capsys, kfp):
    push = kfp.artifact(TRAINED, "AtomicPusher", "pushed_model")
    result = query(capsys, kfp.root, "lineage", custom(push, "pushed_version"))
    expected = written_lineage(kfp, push.id)
    chain = result["chain"]
    assert result["target"] == push.id
    assert [(n["id"], n["type"], n["uri"], n["inputs"]) for n in chain[:-1]] == [
        (a, tfx_type(kfp.artifacts[a]), kfp.artifacts[a].uri, expected[a])
        for a in sorted(expected, reverse=True)]
    assert {n["producer"] for n in chain[:-1]} == {
        "AtomicPusher", "Evaluator", "Trainer", "Transform", "FraTxtExampleGen",
        "ImportSchemaGen"}
    assert chain[-1] == {"id": None, "type": "File", "uri": kfp.data["path"], "producer": None,
                         "run": None, "created": None, "inputs": [],
                         "properties": {"size_bytes": kfp.data["size_bytes"],
                                        "sha256": kfp.data["sha256"]}}
    assert result["hyperparameters"] == hparams(kfp, TRAINED)


def test_kfp_models_mark_the_serving_one(capsys, kfp):
    models = query(capsys, kfp.root, "models")
    expected = []
    for run in (WORSE, TRAINED):
        model = kfp.artifact(run, "Trainer", "model")
        push = kfp.artifact(run, "AtomicPusher", "pushed_model")
        pushed = bool(custom(push, "pushed"))  # one push in all: the one being served
        expected.append({
            "model": model.id, "run": kfp.run(run).id, "train_steps": steps(run),
            **kfp_store.scores(steps(run))["overall"],
            "blessed": bool(custom(kfp.artifact(run, "Evaluator", "blessing"), "blessed")),
            "baseline_model": None, "uri": model.uri, "serving": pushed,
            "pushed_version": custom(push, "pushed_version") if pushed else None})
    assert [{k: m[k] for k in expected[0]} for m in models] == expected
    assert [m["serving"] for m in models] == [False, True]


def changed(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    return [(key, a.get(key), b.get(key)) for key in sorted(a.keys() | b.keys())
            if a.get(key) != b.get(key)]


def test_kfp_diff_of_two_trained_runs(capsys, kfp):
    result = query(capsys, kfp.root, "diff", kfp.run(TRAINED).id, kfp.run(WORSE).id[:13])
    assert (result["run_a"], result["run_b"]) == (kfp.run(TRAINED).id, kfp.run(WORSE).id)
    changes = result["changes"]
    assert [(c["key"], c["a"], c["b"]) for c in changes if c["section"] == "config"] == [
        ("Trainer.train_args.num_steps", steps(TRAINED), steps(WORSE))]
    assert [(c["key"], c["a"], c["b"]) for c in changes if c["section"] == "hyperparameters"] \
        == changed(hparams(kfp, TRAINED), hparams(kfp, WORSE))
    states = [{name: task.state for name, task in kfp.run(run).tasks.items()}
              for run in (TRAINED, WORSE)]
    assert [(c["key"], c["a"], c["b"]) for c in changes if c["section"] == "components"] == \
        changed(*states)  # the upstream tasks were cached the second time
    assert not [c for c in changes if c["section"] == "input"]
    metrics = {c["key"]: (c["a"], c["b"]) for c in changes if c["section"] == "metrics"}
    scores = [kfp_store.scores(steps(run))["overall"] for run in (TRAINED, WORSE)]
    assert metrics["evaluation.overall.bleu"] == tuple(s["bleu"] for s in scores)
    assert metrics["evaluation.overall.chrf"] == tuple(s["chrf"] for s in scores)
    assert metrics["blessing.blessed"] == (True, False)
    histories = [read_json(os.path.join(kfp.artifact(run, "Trainer", "model_run").uri,
                                        "history.json"))[-1] for run in (TRAINED, WORSE)]
    assert metrics["training.loss"] == tuple(h["loss"] for h in histories)


def test_kfp_diff_shows_what_a_failed_run_did_not_do(capsys, kfp):
    worse, broken = kfp.run(WORSE), kfp.run(BROKEN)
    changes = query(capsys, kfp.root, "diff", worse.id, broken.id)["changes"]
    states = [{name: task.state for name, task in run.tasks.items()} for run in (worse, broken)]
    assert [(c["key"], c["a"], c["b"]) for c in changes if c["section"] == "components"] == \
        changed(*states)
    assert ("Trainer", "failed") in states[1].items() and "Evaluator" not in states[1]
    assert [(c["section"], c["key"], c["a"], c["b"]) for c in changes
            if c["section"] != "components"] == [
        ("config", "Trainer.train_args.num_steps", steps(WORSE), steps(BROKEN))]


def test_kfp_clear_errors_for_unknown_ids_and_types(capsys, kfp):
    root = kfp.root
    assert error(capsys, "metadata", "diff", "nope", kfp.run(WORSE).id, "--pipeline-root",
                 root).startswith("'nope' is not a known run (e.g. ")
    assert error(capsys, "metadata", "lineage", "987654", "--pipeline-root", root).startswith(
        "'987654' is neither a pushed version nor an artifact id")
    types = sorted({tfx_type(a) for a in kfp.artifacts.values()})
    assert error(capsys, "metadata", "artifacts", "--type", "tfx.Model", "--pipeline-root",
                 root) == (f"No artifacts of type 'tfx.Model'; types in the store: "
                           f"{', '.join(types)}.")


# --- MySQL ----------------------------------------------------------------------------------

@contextlib.contextmanager
def mariadb() -> Iterator[mysql_server.MariaDB]:
    """A MariaDB server of the test's own. Without one the test fails: CI installs it."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(mysql_server.mariadb())
        except mysql_server.MariaDBError as err:
            pytest.fail(f"A MySQL-backed store cannot be tested: {err}", pytrace=False)
        yield server


def mysql_flags(server: mysql_server.MariaDB, database: str) -> list[str]:
    """The CLI's flags for the store; the password comes from $NMT_MYSQL_PASSWORD or a flag."""
    return ["--mysql-host", server.host, "--mysql-port", str(server.port),
            "--mysql-database", database, "--mysql-user", server.user]


def cli(server: mysql_server.MariaDB, database: str, *argv: str) -> Any:
    """`nmt metadata ARGV --json` in a fresh process, as a user runs it against MySQL."""
    result = run_nmt("metadata", *argv, "--json", *mysql_flags(server, database),
                     env={"NMT_MYSQL_PASSWORD": server.password}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_kfp_store_in_mysql_read_by_the_cli(compiled, capsys):
    spec, data = compiled
    with mariadb() as server:
        written = kfp_store.write_store(server.config("kubeflow_metadata"), spec, data)
        runs = cli(server, "kubeflow_metadata", "runs")
        assert [(r["run"], r["status"]) for r in runs] == [
            (run.id, run.status) for run in reversed(written.runs)]
        assert [[(c["component"], c["state"]) for c in r["components"]] for r in runs] == [
            [(name, task.state) for name, task in run.tasks.items()]
            for run in reversed(written.runs)]

        push = written.artifact(TRAINED, "AtomicPusher", "pushed_model")
        version = custom(push, "pushed_version")
        lineage = cli(server, "kubeflow_metadata", "lineage", version)
        assert lineage["target"] == push.id
        assert [n["id"] for n in lineage["chain"][:-1]] == sorted(
            written_lineage(written, push.id), reverse=True)
        assert lineage["chain"][-1]["properties"] == {"size_bytes": written.data["size_bytes"],
                                                      "sha256": written.data["sha256"]}

        flags = [*mysql_flags(server, "kubeflow_metadata"), "--mysql-password", server.password]
        status, out, err = nmt(capsys, "metadata", "models", "--json", *flags)
        assert status == 0, err
        assert [(m["run"], m["pushed_version"], m["serving"]) for m in json.loads(out)] == [
            (written.run(WORSE).id, None, False), (written.run(TRAINED).id, version, True)]

        assert error(capsys, "metadata", "runs", *mysql_flags(server, "kubeflow_metadata"),
                     "--mysql-password", "wrong").startswith(
            "Cannot read the ML Metadata store (")
        assert "Unknown database 'nowhere'" in error(
            capsys, "metadata", "runs", *mysql_flags(server, "nowhere"),
            "--mysql-password", server.password)


def copy_store(source: mlmd.MetadataStore, target: mlmd.MetadataStore) -> None:
    """Everything in `source` into the empty `target`, inserted in id order so that every id
    stays the same (MLMD numbers rows as it inserts them); only the times are the copy's."""
    type_ids = {}
    for kind in ("artifact", "execution", "context"):
        for old in getattr(source, f"get_{kind}_types")():
            new = type(old)()
            new.CopyFrom(old)
            new.ClearField("id")
            type_ids[old.id] = getattr(target, f"put_{kind}_type")(new)

    def fresh(node: Any) -> Any:
        copy = type(node)()
        copy.CopyFrom(node)
        for field in ("id", "type", "create_time_since_epoch", "last_update_time_since_epoch"):
            copy.ClearField(field)
        copy.type_id = type_ids[node.type_id]
        return copy

    contexts = sorted(source.get_contexts(), key=lambda c: c.id)
    executions = sorted(source.get_executions(), key=lambda e: e.id)
    artifacts = sorted(source.get_artifacts(), key=lambda a: a.id)
    assert target.put_contexts(list(map(fresh, contexts))) == [c.id for c in contexts]
    assert target.put_executions(list(map(fresh, executions))) == [e.id for e in executions]
    assert target.put_artifacts(list(map(fresh, artifacts))) == [a.id for a in artifacts]
    target.put_events(source.get_events_by_execution_ids([e.id for e in executions]))
    for context in contexts:
        target.put_attributions_and_associations(
            [metadata_store_pb2.Attribution(artifact_id=a.id, context_id=context.id)
             for a in source.get_artifacts_by_context(context.id)],
            [metadata_store_pb2.Association(execution_id=e.id, context_id=context.id)
             for e in source.get_executions_by_context(context.id)])
    target.put_parent_contexts([
        metadata_store_pb2.ParentContext(child_id=context.id, parent_id=parent.id)
        for context in contexts for parent in source.get_parent_contexts_by_context(context.id)])


def timeless(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if k not in TIMES}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


def test_local_store_copied_into_mysql_gives_the_same_answers(capsys, smoke_run, smoke_rerun):
    """The smoke pipeline's own store, copied into MySQL: every command answers as from the
    SQLite file (times aside), and the models JSON comes from a fresh `nmt` process."""
    root = smoke_run.root
    source = connect(sqlite_config(os.path.join(root, "metadata.sqlite")))
    runs = query(capsys, root, "runs")
    run_ids = [r["run"] for r in runs]
    commands = [("runs",), ("artifacts",), ("artifacts", "--run", run_ids[0]),
                ("lineage", smoke_run.pushed_version), ("diff", run_ids[1], run_ids[0])]
    with mariadb() as server:
        copy_store(source, mlmd.MetadataStore(server.config("metadb")))
        flags = [*mysql_flags(server, "metadb"), "--mysql-password", server.password]
        for command in commands:
            status, out, err = nmt(capsys, "metadata", *command, "--json", *flags)
            assert status == 0, err
            assert timeless(json.loads(out)) == timeless(query(capsys, root, *command)), command
        assert timeless(cli(server, "metadb", "models")) == timeless(
            query(capsys, root, "models"))

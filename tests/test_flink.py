"""The data half on Apache Flink (`nmt run --beam-runner flink`): Beam's real Flink job server
with an embedded Flink cluster, real SDK worker processes, against the DirectRunner's outputs
on the same sample; and the engine's faults: no cluster, no Java, a worker killed mid-run.
The Evaluator's Flink job runs in tests/test_flink_cluster.py's complete run (the same job
on another cluster): here the runs end at Transform, which keeps the suite's time down."""
from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
from tensorflow_metadata.proto.v0 import statistics_pb2

from helpers import REPO, last_line, latest_artifact, open_store, run_nmt, smoke_args, \
    split_records
from engines import flink

FLINK = ("--beam-runner", "flink")
TRAIN_STEPS = 20  # the model only has to train, be evaluated and pushed
DATA_AND_TRANSFORM = ("--to", "Transform")


def _processes(*words: str) -> list[int]:
    """Pids of the processes whose command line has all of `words`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if all(word in command for word in words):
            found.append(int(pid))
    return found


def _sdk_workers() -> list[int]:
    """The worker pool starts each SDK worker as `python -c '...SdkHarness(...).run()'`."""
    return _processes("SdkHarness(")


def _engine_processes(root: str) -> list[int]:
    """The job server of a run under `root` (its artifacts directory is there), and any
    worker pool or SDK worker (the tests of this module run one at a time, and never beside
    test_flink_cluster.py's: tests/conftest.py, FLINK_MODULES)."""
    return (_processes(flink.LAUNCHER_JAR, root) + _processes("-m", "engines.worker_pool")
            + _sdk_workers())


def _statistics(examples_stats_uri: str) -> dict[str, statistics_pb2.DatasetFeatureStatistics]:
    """Per split: the dataset statistics, histograms and quantiles left out (sketches whose
    bucket edges depend on how the data was partitioned)."""
    found = {}
    for path in glob.glob(os.path.join(examples_stats_uri, "Split-*", "FeatureStats.pb")):
        stats = statistics_pb2.DatasetFeatureStatisticsList()
        with open(path, "rb") as f:
            stats.ParseFromString(f.read())
        dataset = stats.datasets[0]
        for feature in dataset.features:
            for common in (feature.string_stats.common_stats, feature.num_stats.common_stats):
                common.ClearField("num_values_histogram")
                common.ClearField("feature_list_length_histogram")
                common.ClearField("weighted_common_stats")
            feature.num_stats.ClearField("histograms")
            feature.string_stats.ClearField("rank_histogram")
            feature.string_stats.ClearField("top_values")
        found[os.path.basename(os.path.dirname(path))] = dataset
    return found


def _outputs(root: str) -> dict:
    store = open_store(root)
    transform_graph = latest_artifact(store, "TransformGraph").uri
    assets = sorted(glob.glob(os.path.join(transform_graph, "transform_fn", "assets", "*")))
    transformed = latest_artifact(store, "Examples", "Transform").uri
    return {
        "examples": {split: sorted(records) for split, records in split_records(
            latest_artifact(store, "Examples", "FraTxtExampleGen").uri).items()},
        "statistics": _statistics(latest_artifact(store, "ExampleStatistics").uri),
        "vocabulary": {os.path.basename(a): open(a, "rb").read() for a in assets},
        "transformed": {split: len(records)
                        for split, records in split_records(transformed).items()},
    }


@dataclasses.dataclass(frozen=True)
class FlinkRun:
    root: str
    killed_log: str  # the first run's: an SDK worker killed during StatisticsGen's job
    killed_worker: int
    killed_status: int
    rerun: subprocess.CompletedProcess  # the same command again, through Transform
    most_workers: int  # the most SDK workers alive at once during the re-run
    worker_environments: list[dict[str, str]]  # of the SDK workers it saw


def _environment(pid: int) -> dict[str, str]:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as f:
        return dict(item.decode(errors="replace").partition("=")[::2]
                    for item in f.read().split(b"\0") if item)
    return {}


def _run_watching_workers(args: list[str]) -> tuple[subprocess.CompletedProcess, int, list]:
    """`nmt ARGS`, the most SDK worker processes alive at once while it ran, and the
    environments of those it saw."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "cli", *args], cwd=REPO, stdout=out,
                                stderr=err, text=True)
        most, environments = 0, {}
        while proc.poll() is None:
            workers = _sdk_workers()
            most = max(most, len(workers))
            environments.update((pid, _environment(pid)) for pid in workers
                                if pid not in environments)
            time.sleep(0.5)
        out.seek(0)
        err.seek(0)
        return (subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read()),
                most, [e for e in environments.values() if e])


@pytest.fixture(scope="module")
def flink_run(fra_sample, tmp_path_factory) -> FlinkRun:
    """The smoke pipeline's data half on Flink: killed once (an SDK worker of StatisticsGen's
    job), then run again through Transform."""
    root = str(tmp_path_factory.mktemp("flink"))
    args = [*smoke_args(fra_sample, root, TRAIN_STEPS), *FLINK, *DATA_AND_TRANSFORM]
    proc = subprocess.Popen([sys.executable, "-m", "cli", *args], cwd=REPO,
                            stderr=subprocess.PIPE, text=True)
    log = []
    for line in proc.stderr:  # ExampleGen finishes on Flink; StatisticsGen's job starts
        log.append(line)
        if "Component StatisticsGen is running." in line:
            break
    earlier = set(_sdk_workers())  # ExampleGen's, if the pool has not stopped them yet
    deadline = time.monotonic() + 300
    while not set(_sdk_workers()) - earlier and time.monotonic() < deadline \
            and proc.poll() is None:
        time.sleep(0.1)
    victims = sorted(set(_sdk_workers()) - earlier)
    assert victims, "no SDK worker started for StatisticsGen's job"
    os.kill(victims[0], signal.SIGKILL)
    log += proc.stderr.readlines()
    status = proc.wait()
    assert _engine_processes(root) == []
    rerun, most_workers, environments = _run_watching_workers(args)
    assert rerun.returncode == 0, rerun.stderr[-5000:]
    return FlinkRun(root, "".join(log), victims[0], status, rerun, most_workers, environments)


def test_flink_gives_the_directrunners_data_outputs(flink_run, direct_run):
    on_flink, on_direct = _outputs(flink_run.root), _outputs(direct_run)
    assert set(on_flink["examples"]) == {"train", "eval", "test"}
    assert on_flink["examples"] == on_direct["examples"]
    assert on_flink["statistics"] == on_direct["statistics"]
    assert on_flink["vocabulary"] and on_flink["vocabulary"] == on_direct["vocabulary"]
    assert on_flink["transformed"] == on_direct["transformed"]


def test_the_summary_lists_the_flink_jobs_and_metadata_names_the_engine(flink_run):
    root, run = flink_run.root, flink_run.rerun
    assert "Beam engine: flink (embedded, " in run.stderr
    # The re-run's Beam components: FraTxtExampleGen's output is the killed run's (cached)
    for component in ("StatisticsGen", "Transform"):
        assert f"Flink job nmt-{component}: " in run.stderr, component
    assert "Flink job nmt-FraTxtExampleGen: " not in run.stderr
    listed = run_nmt("metadata", "runs", "--pipeline-root", root)
    assert listed.returncode == 0, listed.stderr
    assert "flink (embedded, " in listed.stdout
    assert glob.glob(os.path.join(root, "flink", "job-server-*.log"))


def test_no_engine_process_outlives_the_run(flink_run):
    assert _engine_processes(flink_run.root) == []


def test_a_finished_jobs_sdk_workers_stop_before_later_jobs_pile_up(flink_run):
    # The re-run runs two Beam jobs (StatisticsGen, Transform) on one engine, one SDK worker
    # per slot each. Kept until the run's end, their workers would add up;
    # a job's workers may only overlap the next job's start.
    slots = os.cpu_count() or 1
    assert 0 < flink_run.most_workers <= 2 * slots


def test_the_sdk_workers_run_with_the_engines_malloc_arenas(flink_run, monkeypatch):
    assert flink_run.worker_environments
    for environment in flink_run.worker_environments:
        assert environment["MALLOC_ARENA_MAX"] == os.environ.get("MALLOC_ARENA_MAX",
                                                                 flink.MALLOC_ARENAS)
        assert environment["PATH"].startswith(os.path.dirname(sys.executable))
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")  # a user's own setting is kept
    assert flink.engine_env()["MALLOC_ARENA_MAX"] == "8"


def test_a_rerun_on_other_ports_reuses_every_finished_component(flink_run, fra_sample):
    """The engine's ports stay out of TFX's cache keys (engines/flink.py,
    JOB_ENDPOINT_VARIABLE): with the job server's and the worker pool's preferred ports taken,
    the same run gets other ports and runs nothing again."""
    args = [*smoke_args(fra_sample, flink_run.root, TRAIN_STEPS), *FLINK, *DATA_AND_TRANSFORM]
    with socket.socket() as job_port, socket.socket() as pool_port:
        for taken, port in ((job_port, flink.JOB_PORT), (pool_port, flink.WORKER_POOL_PORT)):
            with contextlib.suppress(OSError):  # already taken by another program: as good
                taken.bind(("localhost", port))
        rerun = run_nmt(*args)
    assert rerun.returncode == 0, rerun.stderr[-5000:]
    for component in ("FraTxtExampleGen", "StatisticsGen", "Transform"):
        assert re.search(rf"{component} +[\d.]+ s  cached", rerun.stderr), component
    assert "Flink job nmt-" not in rerun.stderr
    assert _engine_processes(flink_run.root) == []


def test_a_port_taken_as_the_server_starts_is_left_to_its_owner(tmp_path, monkeypatch):
    """Two runs starting at one moment can both find the preferred port free (flink.port
    checks, the server binds later). Here a worker pool holds the port that `port` reports
    free to a second one: the second starts again on another port, and each holds its own."""
    log, find_port = str(tmp_path / "log"), flink.port
    first, taken = flink.start_server(flink.worker_pool_command, 0, "Beam SDK worker pool", log)
    try:
        monkeypatch.setattr(flink, "port", lambda preferred: taken if preferred
                            else find_port(0))
        second, chosen = flink.start_server(flink.worker_pool_command, flink.WORKER_POOL_PORT,
                                            "Beam SDK worker pool", log)
        try:
            assert chosen != taken
            assert flink.owns_listener(second.pid, chosen)
            assert flink.owns_listener(first.pid, taken)
            assert not flink.owns_listener(second.pid, taken)  # not shared (SO_REUSEPORT)
        finally:
            second.terminate()
            second.wait(timeout=30)
    finally:
        first.terminate()
        first.wait(timeout=30)


def test_unreachable_flink_master_fails_at_once_and_writes_nothing(fra_sample, tmp_path):
    root = tmp_path / "never"
    run = run_nmt(*smoke_args(fra_sample, str(root), TRAIN_STEPS), *FLINK,
                  "--flink-master", "localhost:9", timeout=60)
    assert run.returncode == 2, run.stderr
    assert "The Flink cluster at localhost:9 cannot be reached" in last_line(run.stderr)
    assert not root.exists()


@pytest.mark.parametrize("java_home, says", [
    ("/nonexistent-jdk", "there is no /nonexistent-jdk/bin/java (from JAVA_HOME=/nonexistent-jdk)"),
    ("/usr/lib/jvm/temurin-25-jdk-amd64", "is Java 25"),
])
def test_a_missing_or_wrong_java_is_named_in_one_sentence(fra_sample, tmp_path, java_home,
                                                          says):
    if not os.path.exists(java_home) and java_home != "/nonexistent-jdk":
        # a machine without a second JDK: a stand-in `java` that reports Java 8, as Java 8 does
        fake = tmp_path / "jdk" / "bin" / "java"
        fake.parent.mkdir(parents=True)
        fake.write_text('#!/bin/sh\necho \'openjdk version "1.8.0_392"\' >&2\n')
        fake.chmod(0o755)
        java_home, says = str(tmp_path / "jdk"), "is Java 8"
    root = tmp_path / "never"
    run = run_nmt(*smoke_args(fra_sample, str(root), TRAIN_STEPS), *FLINK,
                  env={"JAVA_HOME": java_home}, timeout=60)
    assert run.returncode == 2, run.stderr
    assert says in last_line(run.stderr) and "Java" in last_line(run.stderr)
    assert not root.exists()


def test_a_killed_sdk_worker_fails_the_run_naming_the_component_and_a_rerun_completes(
        flink_run):
    assert flink_run.killed_status == 1, flink_run.killed_log[-5000:]
    assert last_line(flink_run.killed_log).startswith(
        "nmt: error: StatisticsGen failed on Flink (its SDK worker process "
        f"{flink_run.killed_worker} died)")
    assert re.search(r"FraTxtExampleGen +[\d.]+ s  cached", flink_run.rerun.stderr)  # reused
    assert re.search(r"StatisticsGen +[\d.]+ s  executed", flink_run.rerun.stderr)


def test_ctrl_c_stops_the_job_server_and_the_workers(fra_sample, tmp_path):
    root = str(tmp_path / "interrupted")
    proc = subprocess.Popen([sys.executable, "-m", "cli",
                             *smoke_args(fra_sample, root, TRAIN_STEPS), *FLINK],
                            cwd=REPO, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:  # the engine is up and ExampleGen's job is on it
        if "Component FraTxtExampleGen is running." in line:
            break
    # The job server's JVM runs with the engine's bounded heap (the machine has no
    # JDK_JAVA_OPTIONS of its own here: see the next test).
    assert _processes(flink.LAUNCHER_JAR, root, f"-Xmx{flink.JOB_SERVER_HEAP} ")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert _engine_processes(root) == []


def test_a_heap_set_in_jdk_java_options_wins_over_the_engines(monkeypatch):
    monkeypatch.delenv("JDK_JAVA_OPTIONS", raising=False)
    command = flink.job_server_command("server.jar", "[local]", 8099, "/tmp/a", java="java")
    assert command.index(f"-Xmx{flink.JOB_SERVER_HEAP}") < command.index("-jar")
    monkeypatch.setenv("JDK_JAVA_OPTIONS", flink.java_options())  # the image's: no heap
    assert f"-Xmx{flink.JOB_SERVER_HEAP}" in flink.job_server_command(
        "server.jar", "[local]", 8099, "/tmp/a", java="java")
    for variable, options in (("JDK_JAVA_OPTIONS", "-XX:+UseSerialGC -Xmx4g"),
                              ("JAVA_TOOL_OPTIONS", "-XX:MaxRAMPercentage=50")):
        monkeypatch.delenv("JDK_JAVA_OPTIONS", raising=False)
        monkeypatch.setenv(variable, options)
        command = flink.job_server_command("server.jar", "[local]", 8099, "/tmp/a", java="java")
        assert not [arg for arg in command if arg.startswith("-Xmx")]  # the JVM reads theirs

"""`--flink-master` against real standalone Flink 1.16 session clusters on this machine
(engines/flink_cluster.py: a JobManager, TaskManagers and Beam's worker pool as separate
processes, started with the shipped engines/flink-conf.yaml), shared by the module: the smoke
pipeline with a TaskManager killed mid-Transform and the compiled Kubeflow spec's Beam tasks on
one cluster; no TaskManager left, then the JobManager gone, on a second one (issue #66)."""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Iterator

import pytest

from helpers import REPO, last_line, live_artifacts, run_nmt, smoke_args, versions
from test_flink import TRAIN_STEPS, _outputs
from engines import flink_cluster, flink_conf, flink_jobs
from engines import flink

pytestmark = pytest.mark.flink

# Not Flink's defaults: a user's own cluster, or another test module's engine (which takes
# 50000 when free), is left alone; the runs name their cluster's worker pool.
REST_PORT, RPC_PORT, WORKER_POOL_PORT = 18081, 16123, 50100
SPARE_REST_PORT, SPARE_RPC_PORT, SPARE_WORKER_POOL_PORT = 18083, 16125, 50102


def _started(directory: str, taskmanagers: int, rest_port: int, rpc_port: int,
             worker_pool_port: int) -> Iterator[flink_cluster.Cluster]:
    """A session cluster for the module, stopped at its end (and checked stopped)."""
    started = flink_cluster.start(directory, taskmanagers=taskmanagers, rest_port=rest_port,
                                  worker_pool_port=worker_pool_port, rpc_port=rpc_port)
    yield started
    members = flink_cluster.Cluster.load(started.directory).members
    flink_cluster.stop(started.directory)
    assert not [m for m in members if m.alive()]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[flink_cluster.Cluster]:
    """Two TaskManagers: one is killed mid-Transform, the other takes the job."""
    yield from _started(str(tmp_path_factory.mktemp("flink-cluster")), 2, REST_PORT, RPC_PORT,
                        WORKER_POOL_PORT)


def _pool(cluster: flink_cluster.Cluster) -> str:
    return f"--beam-arg=--environment_config=localhost:{cluster.worker_pool_port}"


def _flink(cluster: flink_cluster.Cluster) -> tuple[str, ...]:
    return ("--beam-runner", "flink", "--flink-master", cluster.master, _pool(cluster))


def _start_nmt(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cli", *args], cwd=REPO,
                            stderr=subprocess.PIPE, text=True)


def _running_job(cluster: flink_cluster.Cluster, component: str, proc: subprocess.Popen,
                 seconds: float = 300) -> dict:
    """The cluster's job of `component` once its tasks run (from the REST API)."""
    job = flink_jobs.running_job(cluster.master, f"nmt-{component}",
                                 lambda: proc.poll() is None, seconds)
    assert job, f"no running Flink job for {component}"
    return job


def _busy_taskmanager(cluster: flink_cluster.Cluster) -> flink_cluster.Member:
    """The TaskManager whose slot is taken (one slot each: the job's)."""
    busy = flink_jobs.busy_taskmanagers(cluster.master)
    assert len(busy) == 1, busy
    return flink_cluster.Cluster.load(cluster.directory).member(busy[0])


def _read_rest(proc: subprocess.Popen, lines: list[str]) -> subprocess.CompletedProcess:
    lines += proc.stderr.readlines()
    return subprocess.CompletedProcess(proc.args, proc.wait(), "", "".join(lines))


def _until(proc: subprocess.Popen, marker: str) -> list[str]:
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if marker in line:
            break
    return lines


# Set once the first cluster's run has its job server up; the spare cluster's runs start after
# it. Two runs starting at one moment both find the job server's preferred port free, and one
# of them starts its server again on another port (flink.start_server, tested in
# test_flink.py): here each run's path stays the same from one suite to the next.
_ENGINE_UP = threading.Event()


@dataclasses.dataclass(frozen=True)
class KilledRun:
    root: str
    run: subprocess.CompletedProcess
    killed: flink_cluster.Member
    transform_job: str  # its Flink job id


@pytest.fixture(scope="module")
def killed_run(cluster, fra_sample, tmp_path_factory) -> KilledRun:
    """The smoke pipeline on the cluster, the TaskManager running Transform's job killed
    (SIGKILL) 15 s into it; the other TaskManager is there. A replacement joins after."""
    root = str(tmp_path_factory.mktemp("cluster-run"))
    proc = _start_nmt(*smoke_args(fra_sample, root, TRAIN_STEPS), *_flink(cluster))
    lines = _until(proc, "Component FraTxtExampleGen is running.")
    _ENGINE_UP.set()  # its job server listens: the spare cluster's runs may start theirs
    lines += _until(proc, "Component Transform is running.")
    job = _running_job(cluster, "Transform", proc)
    time.sleep(15)  # its SDK worker is importing or transforming
    victim = _busy_taskmanager(cluster)
    os.kill(victim.pid, signal.SIGKILL)
    run = _read_rest(proc, lines)
    flink_cluster.add_taskmanager(cluster.directory)  # two again, for the next tests
    return KilledRun(root, run, victim, job["jid"])


def test_the_clusters_run_the_shipped_conf_on_localhost(cluster, spare):
    """(It starts the spare cluster's runs, which go on beside the tests below.)"""
    conf = flink_conf.read_conf()
    assert "--add-exports=java.base/sun.net.util=ALL-UNNAMED" in conf["env.java.opts"]
    for started in (cluster, spare.cluster):
        with open(os.path.join(started.directory, "conf", "flink-conf.yaml"),
                  encoding="utf-8") as used, open(flink_conf.CONF, encoding="utf-8") as shipped:
            assert used.read() == shipped.read()
        jm = {e["key"]: e["value"] for e in flink_jobs.rest(started.master,
                                                               "/jobmanager/config")}
        assert jm["restart-strategy"] == "fixed-delay"
        assert jm["jobmanager.execution.failover-strategy"] == "full"
        assert jm["rest.bind-address"] == "localhost"
    listed = flink_jobs.rest(cluster.master, "/taskmanagers")["taskmanagers"]
    assert len(listed) == 2
    for tm in listed:  # the measured network memory reached each TaskManager
        assert tm["memoryConfiguration"]["networkMemory"] == 384 * 2 ** 20
    assert flink_cluster.main(["status", "--dir", cluster.directory]) == 0


def test_a_killed_taskmanager_restarts_transforms_job_and_the_run_pushes_a_model(killed_run):
    run = killed_run.run
    assert run.returncode == 0, run.stderr[-5000:]
    assert versions(killed_run.root)
    assert not killed_run.killed.alive()
    # Flink restarted the job (the JobManager's own record of it), once
    failures = flink_jobs.job_failures(f"127.0.0.1:{REST_PORT}", killed_run.transform_job)
    lost = [e for e in failures if killed_run.killed.role in flink_jobs.failure_text(e)]
    assert len(failures) == 1 and lost, failures
    # the summary lists the four jobs, read from the cluster's REST API
    assert f"Beam engine: flink (127.0.0.1:{REST_PORT})" in run.stderr
    for component in ("FraTxtExampleGen", "StatisticsGen", "Transform", "Evaluator"):
        assert re.search(rf"Flink job nmt-{component}: [\d.]+ s, finished", run.stderr), \
            component
    listed = run_nmt("metadata", "runs", "--pipeline-root", killed_run.root)
    assert listed.returncode == 0, listed.stderr
    assert f"flink (127.0.0.1:{REST_PORT})" in listed.stdout


def test_the_cluster_gives_the_directrunners_outputs_despite_the_lost_taskmanager(
        killed_run, direct_run):
    assert killed_run.run.returncode == 0
    on_cluster, on_direct = _outputs(killed_run.root), _outputs(direct_run)
    assert set(on_cluster["examples"]) == {"train", "eval", "test"}
    assert on_cluster["examples"] == on_direct["examples"]
    assert on_cluster["statistics"] == on_direct["statistics"]
    assert on_cluster["vocabulary"] and on_cluster["vocabulary"] == on_direct["vocabulary"]
    assert on_cluster["transformed"] == on_direct["transformed"]


def test_kubeflow_flink_tasks_run_on_the_cluster_with_the_launcher(cluster, fra_sample,
                                                                   tmp_path):
    """`nmt kubeflow compile --beam-runner flink --flink-master`, its ExampleGen and
    StatisticsGen tasks run by tests/kfp_launcher.py. Substituted, as the image provides
    them: the image's job-server launcher path by this venv's (flink.LAUNCHER_JAR), and the
    image's JDK_JAVA_OPTIONS (Java 17's flags) for the job server Beam's FlinkRunner starts."""
    from kfp_launcher import LocalPipelineRun, read_spec

    spec_path, root = str(tmp_path / "flink.yaml"), str(tmp_path / "root")
    compiled = run_nmt("kubeflow", "compile", "--image", "nmt-fra-eng:cluster-test",
                       "--profile", "smoke", "--data", fra_sample, "--pipeline-root", root,
                       "--output", spec_path, "--beam-runner", "flink", "--flink-master",
                       cluster.master, _pool(cluster))
    assert compiled.returncode == 0, compiled.stderr
    text = open(spec_path, encoding="utf-8").read()
    assert flink.IMAGE_LAUNCHER_JAR in text
    with open(spec_path, "w", encoding="utf-8") as f:
        f.write(text.replace(flink.IMAGE_LAUNCHER_JAR, flink.LAUNCHER_JAR))
    before = {job["jid"] for job in flink_jobs.rest(cluster.master, "/jobs/overview")["jobs"]}
    tasks = LocalPipelineRun(read_spec(spec_path), root, {},
                             env={"JDK_JAVA_OPTIONS": flink.java_options()}
                             ).run(only="StatisticsGen")
    assert tasks["StatisticsGen"].state == "executed"
    ran = [job for job in flink_jobs.rest(cluster.master, "/jobs/overview")["jobs"]
           if job["jid"] not in before]
    assert sorted(job["state"] for job in ran) == ["FINISHED", "FINISHED"], ran
    stats = tasks["StatisticsGen"].artifact("statistics").uri
    assert os.path.exists(os.path.join(stats, "Split-train", "FeatureStats.pb"))


@dataclasses.dataclass(frozen=True)
class NoTaskManagerRun:
    failed: subprocess.CompletedProcess
    waited: float  # seconds from the kill to the run's end
    statistics: list  # the live ExampleStatistics once it failed
    rerun: subprocess.CompletedProcess


@dataclasses.dataclass(frozen=True)
class NoJobManagerRun:
    failed: subprocess.CompletedProcess
    examples: list  # the live Examples once it failed
    versions: list[str]


def _no_taskmanager_left(spare: flink_cluster.Cluster, fra_sample: str,
                         root: str) -> NoTaskManagerRun:
    """Through StatisticsGen, every TaskManager killed while its job runs; then one
    TaskManager again and the same command."""
    args = [*smoke_args(fra_sample, root, TRAIN_STEPS), *_flink(spare), "--to",
            "StatisticsGen"]
    proc = _start_nmt(*args)
    lines = _until(proc, "Component StatisticsGen is running.")
    _running_job(spare, "StatisticsGen", proc)
    for tm in flink_cluster.Cluster.load(spare.directory).taskmanagers:
        if tm.alive():
            os.kill(tm.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    failed = _read_rest(proc, lines)
    waited = time.monotonic() - killed_at
    statistics = live_artifacts(root, "ExampleStatistics")
    flink_cluster.add_taskmanager(spare.directory)
    return NoTaskManagerRun(failed, waited, statistics, run_nmt(*args))


def _jobmanager_gone(spare: flink_cluster.Cluster, fra_sample: str,
                     root: str) -> NoJobManagerRun:
    """The smoke pipeline, the JobManager killed while ExampleGen's job runs (the cluster's
    last run: the module's fixture then stops the rest)."""
    proc = _start_nmt(*smoke_args(fra_sample, root, TRAIN_STEPS), *_flink(spare))
    lines = _until(proc, "Component FraTxtExampleGen is running.")
    _running_job(spare, "FraTxtExampleGen", proc)
    os.kill(flink_cluster.Cluster.load(spare.directory).member("jobmanager").pid,
            signal.SIGKILL)
    failed = _read_rest(proc, lines)
    return NoJobManagerRun(failed, live_artifacts(root, "Examples"), versions(root))


@dataclasses.dataclass(frozen=True)
class Spare:
    cluster: flink_cluster.Cluster
    runs: concurrent.futures.Future  # of (NoTaskManagerRun, NoJobManagerRun)


@pytest.fixture(scope="module")
def spare(tmp_path_factory, fra_sample) -> Iterator[Spare]:
    """A second cluster, of one TaskManager, whose runs lose every TaskManager, then the
    JobManager. They wait on Flink's timers for minutes (restart attempts, the job server's
    REST retries), so they run in a thread of their own while the first cluster's tests run:
    the waits overlap work instead of adding to the suite's time."""
    work = str(tmp_path_factory.mktemp("spare-runs"))
    for started in _started(str(tmp_path_factory.mktemp("flink-spare")), 1, SPARE_REST_PORT,
                            SPARE_RPC_PORT, SPARE_WORKER_POOL_PORT):
        def runs() -> tuple[NoTaskManagerRun, NoJobManagerRun]:
            _ENGINE_UP.wait(timeout=120)  # (not set when the killed run's tests are deselected)
            return (_no_taskmanager_left(started, fra_sample, os.path.join(work, "no-tm")),
                    _jobmanager_gone(started, fra_sample, os.path.join(work, "no-jm")))

        with concurrent.futures.ThreadPoolExecutor(1) as thread:
            yield Spare(started, thread.submit(runs))


def test_no_taskmanager_left_fails_naming_the_component_and_a_rerun_completes(spare):
    run, _ = spare.runs.result()
    assert run.failed.returncode == 1, run.failed.stderr[-5000:]
    # attempts x (delay + slot.request.timeout) = 2 x 50 s, then the job server's report
    assert run.waited < 150, run.waited
    assert last_line(run.failed.stderr).startswith(
        "nmt: error: StatisticsGen failed on Flink (no TaskManager offered a slot within the "
        "cluster's slot.request.timeout")
    assert not run.statistics
    assert run.rerun.returncode == 0, run.rerun.stderr[-5000:]
    assert re.search(r"FraTxtExampleGen +[\d.]+ s  cached", run.rerun.stderr)
    assert re.search(r"StatisticsGen +[\d.]+ s  executed", run.rerun.stderr)


def test_the_jobmanager_gone_is_one_clear_error_and_nothing_is_published(spare):
    _, run = spare.runs.result()
    assert run.failed.returncode == 1, run.failed.stderr[-5000:]
    error = [line for line in run.failed.stderr.splitlines() if line.startswith("nmt: error:")]
    assert error == [last_line(run.failed.stderr)]
    assert error[0].startswith(
        "nmt: error: FraTxtExampleGen failed on Flink (the Flink cluster's JobManager at "
        f"{spare.cluster.master} stopped answering while the job ran); nothing was published.")
    assert not run.examples
    assert not run.versions


def test_the_command_line_stops_exactly_what_it_started(tmp_path):
    """`start` with no TaskManager (the JobManager and the worker pool), `stop`: both gone,
    and a second `start` while one runs is refused in a sentence."""
    directory = str(tmp_path / "cli")
    env = {**os.environ, "PYTHONPATH": REPO}
    command = [sys.executable, "-m", "engines.flink_cluster"]
    flags = ["--dir", directory, "--rest-port", "18082", "--rpc-port", "16124",
             "--worker-pool-port", "50101", "--taskmanagers", "0"]
    started = subprocess.run([*command, "start", *flags], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr
    assert "The Flink session cluster is up" in started.stderr
    members = flink_cluster.Cluster.load(directory).members
    assert {m.role for m in members} == {"jobmanager", "worker-pool"}
    assert all(m.alive() for m in members)
    again = subprocess.run([*command, "start", *flags], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 1
    assert last_line(again.stderr).startswith(
        f"flink_cluster: error: A Flink cluster started from {directory} is running")
    stopped = subprocess.run([*command, "stop", "--dir", directory], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert not [m for m in members if m.alive()]
    assert "Stopped the Flink cluster" in stopped.stderr

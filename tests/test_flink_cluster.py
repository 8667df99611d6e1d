"""`--flink-master` against a real standalone Flink 1.16 session cluster on this machine
(engines/flink_cluster.py: a JobManager, two TaskManagers and Beam's worker pool as separate
processes, started with the shipped engines/flink-conf.yaml), shared by the module: the smoke
pipeline with a TaskManager killed mid-Transform, no TaskManager left, the JobManager gone,
and the compiled Kubeflow spec's Beam tasks (issue #66)."""
from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from helpers import REPO, last_line, live_artifacts, run_nmt, smoke_args, versions
from test_flink import TRAIN_STEPS, _outputs
from engines import flink_cluster, flink_conf, flink_jobs
from engines import flink

pytestmark = pytest.mark.flink

# Not Flink's defaults: a user's own cluster, or another test module's engine (which takes
# 50000 when free), is left alone; the runs name this worker pool.
REST_PORT, RPC_PORT, WORKER_POOL_PORT = 18081, 16123, 50100
POOL = f"--beam-arg=--environment_config=localhost:{WORKER_POOL_PORT}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> flink_cluster.Cluster:
    """One session cluster for the module, stopped at its end (and checked stopped)."""
    started = flink_cluster.start(str(tmp_path_factory.mktemp("flink-cluster")),
                                  taskmanagers=2, rest_port=REST_PORT,
                                  worker_pool_port=WORKER_POOL_PORT, rpc_port=RPC_PORT)
    yield started
    members = flink_cluster.Cluster.load(started.directory).members
    flink_cluster.stop(started.directory)
    assert not [m for m in members if m.alive()]


def _flink(cluster: flink_cluster.Cluster) -> tuple[str, ...]:
    return ("--beam-runner", "flink", "--flink-master", cluster.master, POOL)


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
    lines = _until(proc, "Component Transform is running.")
    job = _running_job(cluster, "Transform", proc)
    time.sleep(15)  # its SDK worker is importing or transforming
    victim = _busy_taskmanager(cluster)
    os.kill(victim.pid, signal.SIGKILL)
    run = _read_rest(proc, lines)
    flink_cluster.add_taskmanager(cluster.directory)  # two again, for the next tests
    return KilledRun(root, run, victim, job["jid"])


def test_the_cluster_runs_the_shipped_conf_on_localhost(cluster):
    conf = flink_conf.read_conf()
    with open(os.path.join(cluster.directory, "conf", "flink-conf.yaml"),
              encoding="utf-8") as used, open(flink_conf.CONF, encoding="utf-8") as shipped:
        assert used.read() == shipped.read()
    assert "--add-exports=java.base/sun.net.util=ALL-UNNAMED" in conf["env.java.opts"]
    taskmanagers = flink_jobs.rest(cluster.master, "/taskmanagers")["taskmanagers"]
    assert len(taskmanagers) == 2
    for tm in taskmanagers:  # the measured network memory reached each TaskManager
        assert tm["memoryConfiguration"]["networkMemory"] == 384 * 2 ** 20
    jm = {e["key"]: e["value"] for e in flink_jobs.rest(cluster.master,
                                                           "/jobmanager/config")}
    assert jm["restart-strategy"] == "fixed-delay"
    assert jm["jobmanager.execution.failover-strategy"] == "full"
    assert jm["rest.bind-address"] == "localhost"
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
                       cluster.master, POOL)
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


def test_no_taskmanager_left_fails_naming_the_component_and_a_rerun_completes(
        cluster, fra_sample, tmp_path):
    root = str(tmp_path / "no-taskmanager")
    args = [*smoke_args(fra_sample, root, TRAIN_STEPS), *_flink(cluster), "--to",
            "StatisticsGen"]
    proc = _start_nmt(*args)
    lines = _until(proc, "Component StatisticsGen is running.")
    _running_job(cluster, "StatisticsGen", proc)
    members = flink_cluster.Cluster.load(cluster.directory)
    for tm in members.taskmanagers:
        if tm.alive():
            os.kill(tm.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    failed = _read_rest(proc, lines)
    waited = time.monotonic() - killed_at
    for _ in range(2):
        flink_cluster.add_taskmanager(cluster.directory)
    assert failed.returncode == 1, failed.stderr[-5000:]
    # attempts x (delay + slot.request.timeout) = 2 x 50 s, then the job server's report
    assert waited < 150, waited
    assert last_line(failed.stderr).startswith(
        "nmt: error: StatisticsGen failed on Flink (no TaskManager offered a slot within the "
        "cluster's slot.request.timeout")
    assert not live_artifacts(root, "ExampleStatistics")
    rerun = run_nmt(*args)
    assert rerun.returncode == 0, rerun.stderr[-5000:]
    assert re.search(r"FraTxtExampleGen +[\d.]+ s  cached", rerun.stderr)
    assert re.search(r"StatisticsGen +[\d.]+ s  executed", rerun.stderr)


def test_the_jobmanager_gone_is_one_clear_error_and_nothing_is_published(
        cluster, fra_sample, tmp_path):
    """Last of the cluster's tests (pytest keeps the file's order): it kills the JobManager,
    and the module's fixture then stops the rest."""
    root = str(tmp_path / "no-jobmanager")
    proc = _start_nmt(*smoke_args(fra_sample, root, TRAIN_STEPS), *_flink(cluster))
    lines = _until(proc, "Component FraTxtExampleGen is running.")
    _running_job(cluster, "FraTxtExampleGen", proc)
    jobmanager = flink_cluster.Cluster.load(cluster.directory).member("jobmanager")
    os.kill(jobmanager.pid, signal.SIGKILL)
    failed = _read_rest(proc, lines)
    assert failed.returncode == 1, failed.stderr[-5000:]
    error = [line for line in failed.stderr.splitlines() if line.startswith("nmt: error:")]
    assert error == [last_line(failed.stderr)]
    assert error[0].startswith(
        "nmt: error: FraTxtExampleGen failed on Flink (the Flink cluster's JobManager at "
        f"{cluster.master} stopped answering while the job ran); nothing was published.")
    assert not live_artifacts(root, "Examples")
    assert not versions(root)


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

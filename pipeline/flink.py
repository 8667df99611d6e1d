"""Apache Flink as the run's Beam engine, through Beam's portable runner (docs/scaling.md).

For a whole `nmt run --beam-runner flink`, `flink_engine` starts one Beam Flink job server (a
JVM with an embedded Flink cluster, or one that submits to `--flink-master`) and, locally, one
pool of Python SDK workers; every Beam component submits its job to them, and both stop when
the run ends, also on failure or Ctrl-C. Nothing is downloaded here: `make flink` resolved the
job server's jars with Maven and wrote their classpath beside the venv's Python.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Iterator

# Written by `make flink` (Makefile): the job server's jars in the local Maven repository.
CLASSPATH_FILE = os.path.join(sys.prefix, "share", "nmt", "flink-job-server.classpath")
JOB_SERVER_MAIN = "org.apache.beam.runners.flink.FlinkJobServerDriver"
# Flink 1.16 supports Java 8 and 11; on 17 it runs with the module openings below (the ones
# Flink 1.18's own configuration passes for Java 17), tested here.
JAVA_VERSIONS = range(11, 18)
JAVA_OPENS = ("java.base/java.lang", "java.base/java.net", "java.base/java.io",
              "java.base/java.nio", "java.base/sun.nio.ch", "java.base/java.lang.reflect",
              "java.base/java.text", "java.base/java.time", "java.base/java.util",
              "java.base/java.util.concurrent", "java.base/java.util.concurrent.atomic",
              "java.base/java.util.concurrent.locks")
# Where the SDK workers listen on a Flink cluster: the worker pool runs beside each
# TaskManager (a sidecar from the project's image: docs/scaling.md).
CLUSTER_WORKER_POOL = "localhost:50000"
_START_SECONDS = 90  # the JVM's start with Flink's classes, on a slow machine
_REACH_SECONDS = 5.0
_PR_SET_PDEATHSIG = 1


class EngineError(RuntimeError):
    """The engine cannot start or was lost; the message says what and what to do."""


def java_command() -> str:
    """$JAVA_HOME/bin/java, else `java` on PATH."""
    home = os.environ.get("JAVA_HOME")
    return os.path.join(home, "bin", "java") if home else "java"


def check_java(java: str | None = None) -> int:
    """The Java major version, or EngineError naming what is missing or wrong."""
    java = java or java_command()
    if shutil.which(java) is None:
        raise EngineError(f"--beam-runner flink needs Java 11 or 17, and {java!r} was not "
                          "found: install OpenJDK 17 (apt-get install openjdk-17-jre-headless) "
                          "or set JAVA_HOME.")
    shown = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    found = re.search(r'version "(\d+)(?:\.(\d+))?', shown.stderr + shown.stdout)
    major = int(found.group(2) if found and found.group(1) == "1" else found.group(1)) \
        if found else 0
    if major not in JAVA_VERSIONS:
        raise EngineError(f"--beam-runner flink needs Java 11 or 17 (Flink 1.16), but {java} is "
                          f"Java {major or 'of an unknown version'}: set JAVA_HOME to a Java 17.")
    return major


def job_server_classpath(path: str = CLASSPATH_FILE) -> str:
    """The classpath `make flink` wrote, every jar of it present, or EngineError."""
    try:
        with open(path, encoding="utf-8") as f:
            classpath = f.read().strip()
    except FileNotFoundError:
        raise EngineError("The Flink job server is not installed: run `make flink` (it needs "
                          "Maven and Java 17) and try again.") from None
    missing = [jar for jar in classpath.split(os.pathsep) if not os.path.exists(jar)]
    if missing:
        raise EngineError(f"The Flink job server's jar {missing[0]} is gone (and "
                          f"{len(missing) - 1} more): run `make flink` again.")
    return classpath


def check_reachable(address: str, seconds: float = _REACH_SECONDS) -> None:
    """EngineError unless a TCP connection to HOST:PORT opens within `seconds`."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise EngineError(f"--flink-master {address!r} is not HOST:PORT (e.g. "
                          "flink-jobmanager:8081, Flink's REST address).")
    try:
        socket.create_connection((host, int(port)), timeout=seconds).close()
    except OSError as err:
        why = err.strerror or str(err) or type(err).__name__
        raise EngineError(f"The Flink cluster at {address} cannot be reached ({why}); nothing "
                          "was run. Check --flink-master, or drop it to run Flink on this "
                          "machine.") from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child: the kernel sends it SIGTERM if nmt dies, even by SIGKILL."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclasses.dataclass(frozen=True)
class FlinkEngine:
    """A started engine: what the Beam components are told, and where its log is."""
    job_endpoint: str
    worker_pool: str  # the SDK workers' pool (EXTERNAL environment)
    parallelism: int
    master: str  # "[local]" or the cluster's HOST:PORT
    log_path: str

    @property
    def beam_args(self) -> tuple[str, ...]:
        return ("--runner=PortableRunner", f"--job_endpoint={self.job_endpoint}",
                "--environment_type=EXTERNAL", f"--environment_config={self.worker_pool}",
                f"--parallelism={self.parallelism}",
                # one SDK worker process per slot, so the cores work in parallel
                f"--sdk_worker_parallelism={self.parallelism}")

    @property
    def description(self) -> str:
        where = "embedded" if self.master == "[local]" else self.master
        return f"flink ({where}, {self.parallelism} slots)"


def _wait_for_port(process: subprocess.Popen, port: int, what: str, log_path: str) -> None:
    deadline = time.monotonic() + _START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EngineError(f"The {what} stopped as it started (exit status "
                              f"{process.returncode}): see {log_path}.")
        with contextlib.suppress(OSError):
            socket.create_connection(("localhost", port), timeout=1).close()
            return
        time.sleep(0.2)
    raise EngineError(f"The {what} did not listen on port {port} within {_START_SECONDS} s: "
                      f"see {log_path}.")


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the process group (the worker pool's SDK workers too), SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _start(command: list[str], log_path: str, env: dict[str, str] | None = None
           ) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_die_with_parent)


def worker_pool_command(port: int) -> list[str]:
    """Beam's worker pool: it starts one `python` SDK worker process per request."""
    return [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
            f"--service_port={port}"]


def job_server_command(classpath: str, master: str, job_port: int, artifacts_dir: str,
                       java: str | None = None) -> list[str]:
    return [java or java_command(), *(f"--add-opens={m}=ALL-UNNAMED" for m in JAVA_OPENS),
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSZ",
            # Flink's per-task lines would be most of the log: its warnings, and the jobs'
            # and tasks' states (jobs_in_log reads them)
            "-Dorg.slf4j.simpleLogger.log.org.apache.flink=warn",
            "-Dorg.slf4j.simpleLogger.log.org.apache.flink.runtime.executiongraph=info",
            "-cp", classpath, JOB_SERVER_MAIN, f"--flink-master={master}",
            f"--job-port={job_port}", "--artifact-port=0", "--expansion-port=0",
            f"--artifacts-dir={artifacts_dir}"]


def check(flink_master: str | None) -> str:
    """All that can be checked before a run writes anything; returns the classpath."""
    if flink_master:
        check_reachable(flink_master)
    check_java()
    return job_server_classpath()


@contextlib.contextmanager
def flink_engine(work_dir: str, flink_master: str | None = None,
                 parallelism: int | None = None) -> Iterator[FlinkEngine]:
    """A running engine for the block; its processes are stopped when the block ends, however
    it ends. `work_dir` gets the job server's log and its staged artifacts."""
    classpath = check(flink_master)
    os.makedirs(work_dir, exist_ok=True)
    log_path = os.path.join(work_dir, f"job-server-{time.strftime('%Y%m%d-%H%M%S')}.log")
    master = flink_master or "[local]"
    job_port = free_port()
    processes = []
    try:
        if flink_master:
            worker_pool = CLUSTER_WORKER_POOL
        else:
            pool_port = free_port()
            # The pool starts workers as `python`: this venv's, so they import what nmt does.
            env = {**os.environ,
                   "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
            processes.append(_start(worker_pool_command(pool_port), log_path, env))
            worker_pool = f"localhost:{pool_port}"
            _wait_for_port(processes[-1], pool_port, "Beam SDK worker pool", log_path)
        processes.append(_start(job_server_command(classpath, master, job_port,
                                                   os.path.join(work_dir, "artifacts")),
                                log_path))
        _wait_for_port(processes[-1], job_port, "Flink job server", log_path)
        yield FlinkEngine(job_endpoint=f"localhost:{job_port}", worker_pool=worker_pool,
                          parallelism=parallelism or os.cpu_count() or 1, master=master,
                          log_path=log_path)
    finally:
        for process in reversed(processes):
            _stop(process)


@dataclasses.dataclass(frozen=True)
class FlinkJob:
    name: str
    state: str  # Flink's final state: FINISHED, FAILED, CANCELED
    seconds: float


_JOB_STATE = re.compile(r"^(\S+) \[[^\]]*\] INFO \S+ExecutionGraph - Job (\S+) \(\w+\) "
                        r"switched from state (\w+) to (\w+)\.")


def jobs_in_log(log_path: str) -> list[FlinkJob]:
    """The Flink jobs the job server ran, in order, with their running time."""
    from datetime import datetime

    started: dict[str, datetime] = {}
    jobs = []
    with open(log_path, encoding="utf-8", errors="replace") as log:
        for line in log:
            found = _JOB_STATE.match(line)
            if not found:
                continue
            when, name, _, state = found.groups()
            at = datetime.strptime(when, "%Y-%m-%dT%H:%M:%S.%f%z")
            if state == "RUNNING":
                started[name] = at
            elif state in ("FINISHED", "FAILED", "CANCELED") and name in started:
                jobs.append(FlinkJob(name, state, (at - started.pop(name)).total_seconds()))
    return jobs

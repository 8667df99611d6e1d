"""Apache Flink as the run's Beam engine, through Beam's portable runner (docs/scaling.md).

For a whole `nmt run --beam-runner flink`, `flink_engine` starts one Beam Flink job server (a
JVM with an embedded Flink cluster, or one that submits to `--flink-master`) and, locally, one
pool of Python SDK workers; every Beam component submits its job to them, and both stop when
the run ends, also on failure or Ctrl-C. Nothing is downloaded here: `make flink` resolved the
job server's jars with Maven and wrote a launcher jar (a manifest naming them) beside the
venv's Python. The project's image carries the same launcher for Beam's own FlinkRunner,
which `nmt kubeflow compile --beam-runner flink` names (`cluster_beam_args`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import zipfile
from typing import Callable, Iterator

# Written by `make flink` (Makefile): a jar whose manifest names the job server's jars in the
# local Maven repository and its main class, so `java -jar` runs it as Beam's own shaded job
# server jar would run.
LAUNCHER_JAR = os.path.join(sys.prefix, "share", "nmt", "flink-job-server.jar")
IMAGE_LAUNCHER_JAR = "/opt/nmt/flink/flink-job-server.jar"  # the Dockerfile's copy
JOB_SERVER_MAIN = "org.apache.beam.runners.flink.FlinkJobServerDriver"
FLINK_VERSION = "1.16"  # of the Beam 2.59.0 runner the registry serves (the pom says why)
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
WORKER_POOL_PORT = 50000
CLUSTER_WORKER_POOL = f"localhost:{WORKER_POOL_PORT}"
JOB_PORT = 8099  # Beam's job servers' default
# Where a run's Beam components find its engine: environment variables that `flink_engine`
# sets and TFX reads when a component runs (placeholders in the Beam flags). The ports are
# the preferred ones only when those are free, and TFX's cache keys include the Beam flags as
# written: with the ports in them, a run whose preferred port was taken (another run's engine,
# the session cluster's worker pool, any program) re-ran every finished component.
JOB_ENDPOINT_VARIABLE = "NMT_FLINK_JOB_ENDPOINT"
WORKER_POOL_VARIABLE = "NMT_FLINK_WORKER_POOL"
# The job server's JVM heap, unless JDK_JAVA_OPTIONS sets one: Java's default is a quarter of
# the machine's memory, which Flink's heap then grows into; batch jobs sort and spill in
# Flink's own managed memory, outside it (BENCHMARKS.md, "Beam engines").
JOB_SERVER_HEAP = "1g"
# How long a job's SDK workers outlive their last task. Beam stops a job's workers only this
# long after its last task closed, even once the job has finished: an hour kept every earlier
# component's workers, each holding its data, until the run's end. Ten seconds keeps them
# from one stage of a job to the next and stops them before the next component's job starts.
_ENVIRONMENT_CACHE_MS = 10_000
_START_SECONDS = 90  # the JVM's start with Flink's classes, on a slow machine
_PORT_ATTEMPTS = 3
_REACH_SECONDS = 5.0
_PR_SET_PDEATHSIG = 1


_LOG = logging.getLogger(__name__)


class EngineError(RuntimeError):
    """The engine cannot start or was lost; the message says what and what to do."""


def java_command() -> str:
    """$JAVA_HOME/bin/java, else `java` on PATH."""
    home = os.environ.get("JAVA_HOME")
    return os.path.join(home, "bin", "java") if home else "java"


def check_java(java: str | None = None) -> int:
    """The Java major version, or EngineError naming what is missing or wrong."""
    java = java or java_command()
    where = f"JAVA_HOME={os.environ['JAVA_HOME']}" if os.environ.get("JAVA_HOME") else "PATH"
    if shutil.which(java) is None:
        raise EngineError(f"--beam-runner flink needs Java 11 or 17, and there is no {java} "
                          f"(from {where}): install OpenJDK 17 (apt-get install "
                          "openjdk-17-jre-headless) or set JAVA_HOME to one.")
    try:
        shown = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise EngineError(f"--beam-runner flink needs Java 11 or 17, and `{java} -version` "
                          f"(from {where}) failed: {err}.") from None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', shown.stderr + shown.stdout)
    major = int(found.group(2) if found and found.group(1) == "1" else found.group(1)) \
        if found else 0
    if major not in JAVA_VERSIONS:
        raise EngineError(f"--beam-runner flink needs Java 11 or 17 (Flink 1.16), but {java} "
                          f"(from {where}) is Java {major or 'of an unknown version'}: set "
                          "JAVA_HOME to a Java 17.")
    return major


def _manifest_jars(jar: str) -> list[str]:
    with zipfile.ZipFile(jar) as z:
        manifest = z.read("META-INF/MANIFEST.MF").decode("utf-8").replace("\r\n ", "")
    manifest = manifest.replace("\n ", "")
    class_path = next(line.split(":", 1)[1] for line in manifest.splitlines()
                      if line.startswith("Class-Path:"))
    return [urllib.parse.unquote(urllib.parse.urlparse(url).path) for url in class_path.split()]


def write_launcher_jar(classpath: str, jar: str) -> None:
    """A jar of one manifest: JOB_SERVER_MAIN, and `classpath`'s jars as file: URLs (its lines
    wrapped at 72 bytes, as the jar format wants)."""
    jars = classpath.strip().split(os.pathsep)
    urls = " ".join(pathlib.Path(path).resolve().as_uri() for path in jars)
    lines = ["Manifest-Version: 1.0", f"Main-Class: {JOB_SERVER_MAIN}",
             "Created-By: nmt-fra-eng make flink"]
    text = f"Class-Path: {urls}".encode()
    lines += [text[:72].decode()] + [" " + text[i:i + 71].decode()
                                     for i in range(72, len(text), 71)]
    os.makedirs(os.path.dirname(os.path.abspath(jar)), exist_ok=True)
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "\r\n".join(lines) + "\r\n")


def job_server_jar(jar: str = LAUNCHER_JAR) -> str:
    """The launcher `make flink` wrote, every jar it names present, or EngineError."""
    if not os.path.exists(jar):
        raise EngineError("The Flink job server is not installed: run `make flink` (it needs "
                          "Maven and Java 17) and try again.")
    missing = [path for path in _manifest_jars(jar) if not os.path.exists(path)]
    if missing:
        raise EngineError(f"The Flink job server's jar {missing[0]} is gone (and "
                          f"{len(missing) - 1} more): run `make flink` again.")
    return jar


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


def port(preferred: int) -> int:
    """`preferred` if it is free, else any free port (the Beam flags name it through an
    environment variable, so finished components stay cached whichever: JOB_ENDPOINT_VARIABLE)."""
    for wanted in (preferred, 0):
        with socket.socket() as s, contextlib.suppress(OSError):
            s.bind(("localhost", wanted))
            return s.getsockname()[1]
    raise EngineError("No free TCP port on this machine for the Flink job server.")


def _die_with_parent() -> None:
    """In the child: the kernel sends it SIGTERM if nmt dies, even by SIGKILL."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _failed_children(pid: int) -> set[int]:
    """The children of process `pid` that died by a signal or a non-zero exit and are not
    reaped yet, from /proc: after the state (field 3, Z for a zombie) and the parent (4), a
    dead process's wait status is the last field (52)."""
    failed = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] == "Z" and int(fields[-1]) != 0:
                failed.add(int(entry))
    return failed


class WorkerWatchdog:
    """Fails the running Flink jobs when an SDK worker dies.

    Beam's Flink runner waits for a worker that died while starting, and asks for another
    when one dies mid-bundle, so the run would hang. A worker the pool stops exits with status
    0 and is reaped; one killed by a signal or failing stays a zombie with that status until
    its job ends. Seen so on two looks in a row, the watchdog cancels the running jobs, and
    `lost` says why for the run's error.
    """

    def __init__(self, pool: subprocess.Popen, job_endpoint: str, every: float = 1.0) -> None:
        self.lost: str | None = None
        self._pool, self._job_endpoint, self._every = pool, job_endpoint, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="flink-watchdog", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        seen: set[int] = set()
        while not self._stop.wait(self._every):
            dead = _failed_children(self._pool.pid)
            if dead & seen and not self.lost:
                try:
                    if self._cancel_running_jobs():
                        self.lost = f"its SDK worker process {min(dead & seen)} died"
                except Exception as err:  # noqa: BLE001  the watchdog must not die silently
                    _LOG.warning("Could not cancel the Flink job whose SDK worker died: %s",
                                 err)
            seen = dead

    def _cancel_running_jobs(self) -> int:
        """Cancels the job service's running jobs; how many there were."""
        import grpc
        from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc

        with grpc.insecure_channel(self._job_endpoint) as channel:
            jobs = beam_job_api_pb2_grpc.JobServiceStub(channel)
            running = [job.job_id for job in jobs.GetJobs(
                beam_job_api_pb2.GetJobsRequest(), timeout=30).job_info
                if job.state == beam_job_api_pb2.JobState.RUNNING]
            for job_id in running:
                jobs.Cancel(beam_job_api_pb2.CancelJobRequest(job_id=job_id), timeout=30)
        return len(running)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@dataclasses.dataclass(frozen=True)
class FlinkEngine:
    """A started engine: what the Beam components are told, and where its log is."""
    job_endpoint: str
    worker_pool: str  # the SDK workers' pool (EXTERNAL environment)
    parallelism: int
    master: str  # "[local]" or the cluster's HOST:PORT
    log_path: str
    watchdog: WorkerWatchdog | None = None  # on a cluster, Flink's own restarts apply

    @property
    def lost(self) -> str | None:
        """Why the engine failed the running job itself (a dead SDK worker), if it did."""
        return self.watchdog.lost if self.watchdog else None

    @property
    def beam_args(self) -> tuple:
        """The Beam flags of the run's components, the endpoints as placeholders that TFX
        resolves from `environment` (JOB_ENDPOINT_VARIABLE says why). On a cluster, its own
        parallelism and SDK workers per TaskManager apply."""
        from tfx.dsl.placeholder import placeholder as ph

        sized = () if self.master != "[local]" else (
            f"--parallelism={self.parallelism}",
            # one SDK worker process per slot, so the cores work in parallel
            f"--sdk_worker_parallelism={self.parallelism}")
        return ("--runner=PortableRunner",
                "--job_endpoint=" + ph.environment_variable(JOB_ENDPOINT_VARIABLE),
                "--environment_type=EXTERNAL",
                "--environment_config=" + ph.environment_variable(WORKER_POOL_VARIABLE),
                *sized,
                # and kept from stage to stage: Flink runs a batch job stage after stage, and
                # without a cache each stage starts new workers, each importing TensorFlow
                f"--environment_cache_millis={_ENVIRONMENT_CACHE_MS}")

    @property
    def environment(self) -> dict[str, str]:
        """The variables that beam_args' placeholders read: set while the run runs."""
        return {JOB_ENDPOINT_VARIABLE: self.job_endpoint, WORKER_POOL_VARIABLE: self.worker_pool}

    @property
    def description(self) -> str:
        if self.master == "[local]":
            return f"flink (embedded, {self.parallelism} slots)"
        return f"flink ({self.master})"


def _wait_for_port(process: subprocess.Popen, port: int, what: str, log_path: str) -> None:
    deadline = time.monotonic() + _START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EngineError(f"The {what} stopped as it started (exit status "
                              f"{process.returncode}): see {log_path}.")
        if listening(port):
            return
        time.sleep(0.2)
    raise EngineError(f"The {what} did not listen on port {port} within {_START_SECONDS} s: "
                      f"see {log_path}.")


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the process group (the worker pool's SDK workers too, even if the pool itself
    is gone), SIGKILL if it lingers."""
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


def owns_listener(pid: int, port: int) -> bool:
    """Whether process `pid` holds the socket listening on TCP `port` (Linux's /proc; True
    where there is none to ask)."""
    tables = [t for t in ("/proc/net/tcp", "/proc/net/tcp6") if os.path.exists(t)]
    if not tables:
        return True
    inodes = set()
    for table in tables:
        with contextlib.suppress(OSError), open(table, encoding="ascii") as f:
            for fields in (line.split() for line in f.readlines()[1:]):
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")  # 0A: LISTEN
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return True
    return False


def start_server(command: Callable[[int], list[str]], preferred: int, what: str,
                 log_path: str, env: dict[str, str] | None = None
                 ) -> tuple[subprocess.Popen, int]:
    """The process of `command(port)` once it listens on `port`: `preferred` if free, else one
    the kernel picks. `port` only checks: a server of another run started at the same moment
    may bind the same port first. Then this one stops (the port in use) or another answers
    there, and it starts again on another port, up to _PORT_ATTEMPTS times."""
    chosen = port(preferred)
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        process = _start(command(chosen), log_path, env)
        try:
            _wait_for_port(process, chosen, what, log_path)
        except EngineError:
            # Stopped as it started with another program on its port: the race. Else (or a
            # server that never listened) the error stands.
            if process.poll() is None or not listening(chosen) or attempt == _PORT_ATTEMPTS:
                _stop(process)
                raise
        except BaseException:  # Ctrl-C: flink_engine stops only the servers it was given
            _stop(process)
            raise
        else:
            if owns_listener(process.pid, chosen):
                return process, chosen
            _stop(process)
        _LOG.info("Port %d was taken as the %s started; trying another.", chosen, what)
        chosen = port(0)
    raise EngineError(f"The {what} found no port of its own in {_PORT_ATTEMPTS} attempts "
                      f"(other programs took each one as it started): see {log_path}.")


def listening(port: int) -> bool:
    """Whether a program listens on localhost's TCP `port`."""
    with contextlib.suppress(OSError):
        socket.create_connection(("localhost", port), timeout=1).close()
        return True
    return False


def worker_pool_command(port: int) -> list[str]:
    """Beam's worker pool, on localhost only (engines/worker_pool.py): it starts one
    `python` SDK worker process per request."""
    return [sys.executable, "-m", "engines.worker_pool", f"--port={port}"]


def java_options() -> str:
    """The JVM flags Flink needs on Java 17, as JDK_JAVA_OPTIONS (the Dockerfile sets it so,
    for the JVM that Beam's FlinkRunner starts in a Kubeflow task)."""
    return " ".join(f"--add-opens={module}=ALL-UNNAMED" for module in JAVA_OPENS)


_HEAP_FLAGS = ("-Xmx", "-XX:MaxHeapSize", "-XX:MaxRAMPercentage", "-XX:MaxRAMFraction")


def heap_options() -> list[str]:
    """-Xmx JOB_SERVER_HEAP, unless JDK_JAVA_OPTIONS or JAVA_TOOL_OPTIONS (which the JVM
    reads) sets the heap: then theirs."""
    given = " ".join(os.environ.get(name, "") for name in ("JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS"))
    return [] if any(flag in given for flag in _HEAP_FLAGS) else [f"-Xmx{JOB_SERVER_HEAP}"]


# glibc's malloc arenas per process, unless the environment sets them: by default a process
# gets up to 8 per core, and the JVM's and TensorFlow's many threads each keep freed memory in
# their own. Two arenas lowered the engine's peak at the same speed (BENCHMARKS.md, "Beam
# engines").
MALLOC_ARENAS = "2"


def engine_env() -> dict[str, str]:
    """The environment of the job server and the worker pool (and so of the SDK workers):
    nmt's, with this venv's `bin` first on PATH, as the pool starts workers as `python` (they
    import what nmt does), and MALLOC_ARENAS unless MALLOC_ARENA_MAX is set."""
    return {**os.environ, "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", MALLOC_ARENAS),
            "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}


def job_server_command(jar: str, master: str, job_port: int, artifacts_dir: str,
                       java: str | None = None) -> list[str]:
    return [java or java_command(), *java_options().split(), *heap_options(),
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSZ",
            # Flink's per-task lines would be most of the log: its warnings, and the jobs'
            # and tasks' states (jobs_in_log reads them)
            "-Dorg.slf4j.simpleLogger.log.org.apache.flink=warn",
            "-Dorg.slf4j.simpleLogger.log.org.apache.flink.runtime.executiongraph=info",
            "-jar", jar, f"--flink-master={master}",
            "--job-host=localhost", f"--job-port={job_port}", "--artifact-port=0",
            "--expansion-port=0",
            f"--artifacts-dir={artifacts_dir}"]


def check(flink_master: str | None) -> str:
    """All that can be checked before a run writes anything; returns the launcher jar."""
    if flink_master:
        check_reachable(flink_master)
    check_java()
    return job_server_jar()


def cluster_beam_args(flink_master: str) -> tuple[str, ...]:
    """The Beam flags of a Kubeflow task on a Flink cluster: Beam's FlinkRunner starts the
    image's job server (IMAGE_LAUNCHER_JAR) in the task's pod and submits to `flink_master`;
    the SDK workers are the worker pools beside the TaskManagers (docs/scaling.md)."""
    return ("--runner=FlinkRunner", f"--flink_master={flink_master}",
            f"--flink_version={FLINK_VERSION}", f"--flink_job_server_jar={IMAGE_LAUNCHER_JAR}",
            "--environment_type=EXTERNAL", f"--environment_config={CLUSTER_WORKER_POOL}",
            f"--environment_cache_millis={_ENVIRONMENT_CACHE_MS}")


@contextlib.contextmanager
def flink_engine(work_dir: str, jar: str, flink_master: str | None = None,
                 parallelism: int | None = None) -> Iterator[FlinkEngine]:
    """A running engine for the block; its processes are stopped when the block ends, however
    it ends. `jar` is what `check` returned; `work_dir` gets the job server's log and its
    staged artifacts."""
    os.makedirs(work_dir, exist_ok=True)
    log_path = os.path.join(work_dir, f"job-server-{time.strftime('%Y%m%d-%H%M%S')}.log")
    master = flink_master or "[local]"
    processes = []
    watchdog = None
    saved: dict[str, str | None] = {}  # the environment's values before the engine's

    def interrupted(signum, frame) -> None:
        # Ctrl-C stops the engine first: a KeyboardInterrupt raised where Python swallows it
        # (a __del__, a library's handler) still fails the job that runs on it.
        for process in reversed(processes):
            _stop(process)
        raise KeyboardInterrupt

    on_main_thread = threading.current_thread() is threading.main_thread()
    previous_handler = signal.signal(signal.SIGINT, interrupted) if on_main_thread else None
    try:
        if flink_master:
            worker_pool = CLUSTER_WORKER_POOL
        else:
            pool, pool_port = start_server(worker_pool_command, WORKER_POOL_PORT,
                                           "Beam SDK worker pool", log_path, engine_env())
            processes.append(pool)
            worker_pool = f"localhost:{pool_port}"
        job_server, job_port = start_server(
            lambda chosen: job_server_command(jar, master, chosen,
                                              os.path.join(work_dir, "artifacts")),
            JOB_PORT, "Flink job server", log_path, engine_env())
        processes.append(job_server)
        job_endpoint = f"localhost:{job_port}"
        if not flink_master:
            watchdog = WorkerWatchdog(processes[0], job_endpoint)
        engine = FlinkEngine(job_endpoint=job_endpoint, worker_pool=worker_pool,
                             parallelism=parallelism or os.cpu_count() or 1, master=master,
                             log_path=log_path, watchdog=watchdog)
        saved.update((name, os.environ.get(name)) for name in engine.environment)
        os.environ.update(engine.environment)
        yield engine
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if on_main_thread:
            signal.signal(signal.SIGINT, previous_handler)
        if watchdog:
            watchdog.stop()
        for process in reversed(processes):
            _stop(process)

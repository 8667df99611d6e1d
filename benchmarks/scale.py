"""How the data half's cost grows with the data (issue #28 item 8): time and peak memory of
each component, per corpus size and Beam mode.

Usage:
  PYTHONPATH=. .venv/bin/python benchmarks/scale.py --sizes 1,4,16 \
      --modes multi_processing,in_memory --data-root /work/scale_data \
      --out scale.json [--components ...] [--lines N] [--gzip] [--one-run]

For each size K (a K x fra.txt corpus from benchmarks/make_corpus.py, DATA_ROOT/fra_xK,
generated first if missing) and each Beam mode:

  in_memory         nmt's default Beam arguments (--direct_running_mode=in_memory
                    --direct_num_workers=1); no --beam-arg is passed
  multi_processing  --beam-arg=--direct_running_mode=multi_processing
                    --beam-arg=--direct_num_workers=W (W = --workers, default 2); --beam-arg
                    replaces nmt's defaults, it does not add to them (cli/run.py)
  flink             --beam-runner flink: Beam's Flink job server with an embedded Flink
                    cluster of one slot per core, and one SDK worker process per slot
                    (engines/flink.py); the JVM's memory counts in peak_rss_mb. Its JVM
                    heap: flink.JOB_SERVER_HEAP (Java's default in scale_engines*.json)
  flink_heap_1g     the same with JDK_JAVA_OPTIONS=-Xmx1g: a 1 GiB heap whatever the default
  flink_heap_512m   the same with JDK_JAVA_OPTIONS=-Xmx512m
  flink_heap_512m_serial  the same with JDK_JAVA_OPTIONS="-Xmx512m -XX:+UseSerialGC"
  flink_one_sdk_worker  flink with --sdk_worker_parallelism=1: one SDK worker for both slots
  flink_hour_cache  flink as it was before 2026-11-28: a job's SDK workers kept an hour after
                    it (--environment_cache_millis=3600000), glibc's default malloc arenas
  flink_cluster     --beam-runner flink --flink-master: the run's job server submits to a
                    standalone session cluster (engines/flink_cluster.py: a JobManager, 2
                    TaskManagers of one slot, Beam's worker pool, each a process of its own, with
                    engines/flink-conf.yaml) that scale.py starts before the mode's runs and
                    stops after them, however they end; on ports of its own (CLUSTER_*_PORT).
                    Its jobs run at parallelism 2 (--parallelism=2: both TaskManagers' slots),
                    as the embedded engine runs at one per core
  flink_cluster_lost_taskmanager  the same, a TaskManager running Transform's job killed
                    (SIGKILL) --lose-after seconds (default 30) after the job's tasks start, and
                    a replacement started, as tests/test_flink_cluster.py does: Flink restarts
                    the job. What a lost TaskManager costs: this mode's component_s less
                    flink_cluster's

it runs `python -m cli run --data CORPUS --profile smoke --pipeline-root ROOT
--to C` for each component C in pipeline order (FraTxtExampleGen, StatisticsGen,
ImportSchemaGen, StrictExampleValidator, Transform), each in its own process, on a fresh
pipeline root (RUNS_ROOT/xK_MODE, deleted first): each invocation reuses the cached outputs
of the ones before it, so it executes C alone. A component left out of --components is
executed by the next invocation that needs it, inside that invocation's time and memory.

With --one-run, the data half is one `nmt run --to` its last component instead, as a user
runs it: one Flink engine serves all its jobs, where a process per component starts an engine
per component and hides what a finished job leaves running (its SDK workers). The one row
(component "data half") has the run's peak and the sum of its components' seconds from ML
Metadata as component_s (each component's in components_in_run).

Per component it records:
  component_s      the component's execution time, from the pipeline root's ML Metadata
                   (pipeline/run_summary.collect, as at the end of `nmt run`): from the
                   execution's creation to its last update; time_source says "mlmd", or
                   "subprocess" if the store could not be read (then component_s is the
                   whole process's time)
  subprocess_s     the whole invocation: Python and TFX start-up (~8-10 s), the cache
                   lookups of the upstream components (ExampleGen fingerprints its input
                   files), the component, the run summary
  peak_rss_mb      the peak, over samples every 0.5 s, of the summed RSS of the nmt process
                   and all its descendants (Beam's worker processes); pages shared between
                   processes are counted once per process, and a peak shorter than 0.5 s
                   can be missed
  peak_root_rss_mb the peak of the nmt process alone: in memory, everything; with
                   multi_processing, the runner, which holds Beam's shuffle (GroupByKey)
                   buffers in memory
  peak_worker_rss_mb  the peak of its largest descendant: one Beam worker process
  cpu_s            user + system CPU seconds of the process and the descendants it waited
                   for (getrusage of children): cpu_s / subprocess_s is the parallelism;
                   it misses processes nobody waited for (Flink's SDK workers)
  at_peak_runner_mb, at_peak_workers_mb, at_peak_jvm_mb  peak_rss_mb split by process kind
                   (as the CPU seconds below): what each held at the summed peak
  cpu_runner_s, cpu_workers_s, cpu_jvm_s  user + system CPU seconds of every process of
                   the tree, read at each one's last sample and summed by kind: the nmt
                   process, the Python processes under it (Beam workers), the JVM
  (cluster modes)  peak_rss_mb, peak_worker_rss_mb (the largest process but nmt's) and the
                   CPU seconds count the session cluster's processes too, which are not under
                   the nmt process (cpu_s misses them), as kinds of their own:
                   at_peak_jobmanager_mb, at_peak_taskmanagers_mb, at_peak_worker_pool_mb (the
                   pool and its SDK workers), cpu_jobmanager_s, cpu_taskmanagers_s,
                   cpu_worker_pool_s; "jvm" is the run's job server. cluster: its master,
                   directory (logs in DIR/log/) and TaskManagers
  taskmanager_loss (flink_cluster_lost_taskmanager, the run of Transform) the TaskManager
                   killed (None, and the reason, if none was), when (killed_s_into_job,
                   killed_s_into_run), its replacement and how long after the kill
                   flink_cluster.add_taskmanager returned (replacement_started_s: once the
                   JobManager counts as many TaskManagers as are alive, the lost one perhaps
                   among them until its heartbeat times out); and, from the cluster's REST
                   API, Transform's job: its final state, seconds, parallelism, and the
                   failures its JobManager recorded (/jobs/JID/exceptions: each one restarted
                   the job, or failed it)
  examples_per_split, parse counts (after ExampleGen; repeated on the later rows),
  transform_files_per_split and bytes (Transform's transformed_examples/*/Split-*/)
  learners, learning_sum_s, learning_span_s  (Transform) each vocabulary learner's seconds
                   from its "Learned ..." log line, their sum, and the span from the first
                   one's start to the last one's end: below the sum when they ran at once

--run-arg FLAG (repeatable) gives every `nmt run` a flag, e.g. --run-arg=--tokenizer=sentencepiece.

Results go to --out, a result file (benchmarks/results.py) whose figures are
{"sessions": [machine info, command, date ...], "rows": [...]}, rewritten after every
component, so a killed run keeps the rows it completed; rows of
earlier invocations are kept (benchmarks/scale_report.py uses the newest row per size, mode
and component). Progress, with an ETA, goes to stderr, one line per component run.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import glob
import importlib.metadata
import json
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Iterator

import psutil

from benchmarks import results
from engines import flink_cluster, flink_jobs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPONENTS = ("FraTxtExampleGen", "StatisticsGen", "ImportSchemaGen", "StrictExampleValidator",
              "Transform")
# The session cluster of the cluster modes: its own ports (neither Flink's and Beam's defaults,
# nor tests/test_flink_cluster.py's), so that a user's cluster or a test's is left alone.
CLUSTER_REST_PORT, CLUSTER_RPC_PORT, CLUSTER_POOL_PORT = 18091, 16133, 50110
CLUSTER_TASKMANAGERS = 2
LOST_JOB = "nmt-Transform"  # the Flink job whose TaskManager flink_cluster_lost_taskmanager kills
# Flink modes: `--beam-runner flink`, with these environment variables.
FLINK_MODES: dict[str, dict] = {
    "flink": {},
    # The JVM's heap set through the java launcher's JDK_JAVA_OPTIONS: measured against
    # Java's default heap (a quarter of the machine's memory), the engine's until then;
    # engines/flink.py now sets the same heap by default (JOB_SERVER_HEAP).
    "flink_heap_1g": {"env": {"JDK_JAVA_OPTIONS": "-Xmx1g"}},
    # Half that heap, against the memory bound of two multi_processing workers.
    "flink_heap_512m": {"env": {"JDK_JAVA_OPTIONS": "-Xmx512m"}},
    # and with the serial collector instead of G1.
    "flink_heap_512m_serial": {"env": {"JDK_JAVA_OPTIONS": "-Xmx512m -XX:+UseSerialGC"}},
    # One SDK worker process for both slots (its bundles run in threads): against the memory
    # bound, Flink's Python side being the most of its peak.
    "flink_one_sdk_worker": {"beam_args": ["--sdk_worker_parallelism=1"]},
    # The engine as it was before its workers stopped with their job: a job's SDK workers
    # kept an hour after it, and glibc's default malloc arenas (8 per core).
    "flink_hour_cache": {"beam_args": ["--environment_cache_millis=3600000"],
                         "env": {"MALLOC_ARENA_MAX": str(8 * (os.cpu_count() or 1))}},
    # A standalone session cluster (engines/flink_cluster.py), started by scale.py for the
    # mode's runs; its worker pool is on CLUSTER_POOL_PORT, not the 50000 runs assume.
    "flink_cluster": {"cluster": True,
                      "beam_args": [f"--environment_config=localhost:{CLUSTER_POOL_PORT}",
                                    "--parallelism=2"]},
    # and the TaskManager running Transform's job killed mid-job (TaskManagerLoss)
    "flink_cluster_lost_taskmanager": {
        "cluster": True, "lose_taskmanager": True,
        "beam_args": [f"--environment_config=localhost:{CLUSTER_POOL_PORT}", "--parallelism=2"]},
}
MODES = ("in_memory", "multi_processing", *FLINK_MODES)
DATA_HALF = "data half"  # the component of a --one-run row
SAMPLE_S = 0.5
MEASURED = ("time and peak memory of each data-half component per corpus size (x fra.txt) "
            "and Beam mode")


def beam_args(mode: str, workers: int) -> list[str]:
    if mode == "multi_processing":
        return ["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]
    # nmt's defaults: in memory, one worker; Flink's engine sets its own, and a mode's come
    # after them (the last of a flag wins)
    return list(FLINK_MODES.get(mode, {}).get("beam_args", []))


def is_cluster(mode: str) -> bool:
    """A mode whose runs go to a session cluster scale.py starts."""
    return bool(FLINK_MODES.get(mode, {}).get("cluster"))


def engine_args(mode: str) -> tuple[str, ...]:
    """`nmt run`'s engine flags: Flink is started and stopped by each invocation (its JVM and
    SDK workers are in the measured process tree); a cluster mode's job server submits to the
    session cluster scale.py started (sampled apart: PeakMemory)."""
    if is_cluster(mode):
        return ("--beam-runner", "flink", "--flink-master", f"127.0.0.1:{CLUSTER_REST_PORT}")
    return ("--beam-runner", "flink") if mode in FLINK_MODES else ()


def mode_env(mode: str) -> dict[str, str]:
    """Environment variables a mode adds to `nmt run`'s."""
    return dict(FLINK_MODES.get(mode, {}).get("env", {}))


def machine_info() -> dict:
    info = {"hostname": platform.node(), "python": platform.python_version(),
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            **results.machine()}
    for package in ("tfx", "apache-beam", "tensorflow", "tensorflow-transform"):
        try:
            info[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            info[package] = None
    return info


# --- the corpus -----------------------------------------------------------------------------

def corpus_dir(data_root: str, size: int, lines: int | None, use_gzip: bool) -> str:
    name = f"fra_x{size}" + (f"_lines{lines}" if lines else "") + ("_gz" if use_gzip else "")
    return os.path.join(data_root, name)


def ensure_corpus(path: str, source: str, size: int, lines: int | None, use_gzip: bool,
                  seed: int) -> dict:
    """The corpus's manifest, generating the corpus first (benchmarks/make_corpus.py, in its
    own process) if it is missing."""
    manifest_path = path + ".manifest.json"
    if not (os.path.isdir(path) and os.path.isfile(manifest_path)):
        print(f"generating {path} ({size} x {source})", file=sys.stderr, flush=True)
        command = [sys.executable, os.path.join(REPO, "benchmarks", "make_corpus.py"),
                   "--source", source, "--copies", str(size), "--out", path,
                   "--seed", str(seed), *(["--lines", str(lines)] if lines else []),
                   *(["--gzip"] if use_gzip else [])]
        subprocess.run(command, check=True)
    with open(manifest_path) as f:
        manifest = json.load(f)
    expected = {"copies": size, "seed": seed, "gzip": use_gzip,
                "lines_per_copy_requested": lines}
    wrong = {k: manifest.get(k) for k, v in expected.items() if manifest.get(k) != v}
    if wrong:
        sys.exit(f"scale.py: {path} was made with {wrong}, not {expected}: delete it (and "
                 f"{manifest_path}) or pass another --data-root")
    return manifest


# --- one component run ----------------------------------------------------------------------

def _tree(process: psutil.Process) -> list[psutil.Process]:
    """A process (first) and its live descendants."""
    try:
        return [process, *process.children(recursive=True)]
    except psutil.Error:
        return []


def process_kind(member: psutil.Process, root_pid: int) -> str:
    """Whose CPU a process's is: the nmt process ("runner": with the in-memory DirectRunner,
    all of Beam's work), a JVM ("jvm": Flink's job server and its embedded cluster), or any
    other process under the runner ("workers": multi_processing workers, Flink's SDK worker
    pool and its workers)."""
    if member.pid == root_pid:
        return "runner"
    try:
        name = os.path.basename((member.cmdline() or [member.name()])[0])
    except psutil.Error:
        name = ""
    return "jvm" if name == "java" else "workers"


KINDS = ("runner", "workers", "jvm")
# A session cluster's processes by role (engines/flink_cluster.py), each with its tree: the
# worker pool's holds the SDK workers it started.
CLUSTER_KINDS = ("jobmanager", "taskmanagers", "worker_pool")


def cluster_kind(role: str) -> str:
    """A cluster member's kind: "jobmanager", "taskmanagers" or "worker_pool"."""
    return "taskmanagers" if role.startswith("taskmanager-") else role.replace("-", "_")


class PeakMemory(threading.Thread):
    """Samples a process tree every SAMPLE_S seconds until stopped, and with `cluster_dir` the
    trees of the session cluster started there (not under the run: the cluster's own
    processes, read from its cluster.json at each sample, a replacement TaskManager too): the
    peaks of their summed RSS (and what each kind held then: `process_kind`, `cluster_kind`),
    of the root process alone (with multi_processing, the runner, which holds Beam's
    in-memory shuffle) and of the largest other process (a Beam worker or a JVM); and each
    process's CPU time at its last sample, summed by kind: what a process spends after its
    last sample, or in a life shorter than SAMPLE_S, is missed."""

    def __init__(self, pid: int, cluster_dir: str | None = None) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.cluster_dir = cluster_dir
        self.kinds = KINDS + (CLUSTER_KINDS if cluster_dir else ())
        self.peak_bytes = 0
        self.peak_root_bytes = 0
        self.peak_descendant_bytes = 0
        self.peak_processes = 0
        self.peak_by_kind: dict[str, int] = {}  # the summed RSS's peak, split by kind
        self.samples = 0
        self._cpu: dict[int, tuple[str, float]] = {}
        self._halt = threading.Event()

    def _members(self) -> list[tuple[psutil.Process, str]]:
        """Every process to sample, with its kind."""
        # Each sample: a child forked by Python is "workers" until it execs java.
        found = [(p, process_kind(p, self.process.pid)) for p in _tree(self.process)]
        cluster = flink_cluster.Cluster.load(self.cluster_dir) if self.cluster_dir else None
        for member in cluster.members if cluster else ():
            if member.alive():
                with contextlib.suppress(psutil.Error):
                    found += [(p, cluster_kind(member.role))
                              for p in _tree(psutil.Process(member.pid))]
        return found

    def run(self) -> None:
        while not self._halt.is_set():
            total = root = largest = processes = 0
            by_kind = dict.fromkeys(self.kinds, 0)
            for member, kind in self._members():
                try:
                    rss = member.memory_info().rss
                    times = member.cpu_times()
                except psutil.Error:  # ended between the listing and the reading
                    continue
                self._cpu[member.pid] = (kind, times.user + times.system)
                total += rss
                by_kind[kind] += rss
                processes += 1
                if member.pid == self.process.pid:
                    root = rss
                else:
                    largest = max(largest, rss)
            if total > self.peak_bytes:
                self.peak_bytes, self.peak_by_kind = total, by_kind
            self.peak_root_bytes = max(self.peak_root_bytes, root)
            self.peak_descendant_bytes = max(self.peak_descendant_bytes, largest)
            self.peak_processes = max(self.peak_processes, processes)
            self.samples += 1
            self._halt.wait(SAMPLE_S)

    def cpu_by_kind(self) -> dict[str, float]:
        """Sampled CPU seconds per kind."""
        totals = dict.fromkeys(self.kinds, 0.0)
        for kind, seconds in self._cpu.values():
            totals[kind] += seconds
        return totals

    def stop(self) -> None:
        self._halt.set()
        self.join()


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_component(corpus: str, root: str, component: str, args: list[str], log_path: str,
                  timeout_s: float | None, run_args: tuple[str, ...] = (),
                  extra_env: dict[str, str] | None = None, cluster_dir: str | None = None,
                  watch: Callable[[subprocess.Popen], Callable[[], dict]] | None = None
                  ) -> dict:
    """One `nmt run --to component` (with `run_args`) in its own process (group): its status,
    wall time, peak memory of its process tree (and of the session cluster's started in
    `cluster_dir`) and CPU time. `watch`, given the started process, acts beside it and
    returns what gives its facts for the result once the process has ended."""
    command = [sys.executable, "-m", "cli", "run", "--data", corpus, "--profile",
               "smoke", "--pipeline-root", root, "--to", component, *run_args,
               *[f"--beam-arg={a}" for a in args]]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO, *filter(None, [env.get("PYTHONPATH")])])
    for name, value in (extra_env or {}).items():  # after the machine's own, which it keeps
        env[name] = f"{env[name]} {value}" if env.get(name) else value
    cpu_before = _children_cpu_s()
    with open(log_path, "w") as log:
        log.write(" ".join(command) + "\n")
        log.flush()
        started = time.monotonic()
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        sampler = PeakMemory(process.pid, cluster_dir)
        sampler.start()
        watched = watch(process) if watch else None
        status = "ok"
        try:
            returncode = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # this run's own process group only
            returncode = process.wait()
            status = "timeout"
        except BaseException:  # Ctrl-C or SIGTERM: the run, in a session of its own, too
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            raise
        wall_s = time.monotonic() - started
        sampler.stop()
    if status == "ok" and returncode != 0:
        status = "failed"
    result = {"status": status, "returncode": returncode, "command": " ".join(command[1:]),
              "subprocess_s": round(wall_s, 2),
              "peak_rss_mb": round(sampler.peak_bytes / 2**20, 1),
              "peak_root_rss_mb": round(sampler.peak_root_bytes / 2**20, 1),
              "peak_worker_rss_mb": round(sampler.peak_descendant_bytes / 2**20, 1),
              "peak_processes": sampler.peak_processes, "rss_samples": sampler.samples,
              "cpu_s": round(_children_cpu_s() - cpu_before, 2),
              **{f"cpu_{kind}_s": round(seconds, 1)
                 for kind, seconds in sampler.cpu_by_kind().items()},
              **{f"at_peak_{kind}_mb": round(size / 2**20, 1)
                 for kind, size in sampler.peak_by_kind.items()},
              "log": log_path, **(watched() if watched else {})}
    if status != "ok":
        with open(log_path, errors="replace") as f:
            result["error_tail"] = f.read()[-3000:]
    return result


_LEARNED = re.compile(r"^(\d\d):(\d\d):(\d\d) INFO Learned (\S+): .* in (\d+) s\.$")


def vocabulary_learning(log_path: str) -> dict:
    """From Transform's log: each vocabulary learner's seconds and when it ended (its "Learned
    ..." line), and the span from the first learner's start to the last one's end, which is
    less than their sum when they ran at once."""
    learners = []
    with open(log_path, errors="replace") as f:
        for line in f:
            if found := _LEARNED.match(line.strip()):
                hours, minutes, seconds, name, took = found.groups()
                ended = int(hours) * 3600 + int(minutes) * 60 + int(seconds)
                learners.append({"name": name, "seconds": int(took), "ended_s": ended})
    if not learners:
        return {}
    span = max(l["ended_s"] for l in learners) - min(l["ended_s"] - l["seconds"]
                                                     for l in learners)
    return {"learners": learners, "learning_sum_s": sum(l["seconds"] for l in learners),
            "learning_span_s": span}


def component_time(corpus: str, root: str, component: str, wall_s: float) -> dict:
    """The component's execution time from ML Metadata, read as `nmt run` reads it for its
    summary (pipeline/run_summary.collect); the process's wall time if that fails."""
    try:
        from pipeline import config as config_lib
        from runners import run_summary

        config = config_lib.PipelineConfig(data_path=corpus, pipeline_root=root)
        facts = run_summary.collect(config, wall_s, component)
        times = {c.name: c for c in facts.components}
        mine = times[component]
        return {"component_s": round(mine.seconds, 2), "component_state": mine.state,
                "time_source": "mlmd",
                "components_in_run": {c.name: [c.state, round(c.seconds, 2)]
                                      for c in facts.components}}
    except Exception as err:  # noqa: BLE001 - any failure: fall back, and say so
        return {"component_s": round(wall_s, 2), "component_state": None,
                "time_source": "subprocess", "mlmd_error": f"{type(err).__name__}: {err}"[:300]}


def examples_facts(root: str) -> dict:
    """Examples per split and the parse counts of the newest ExampleGen output."""
    from metadata.artifacts import list_artifacts
    from metadata.store import connect, sqlite_config

    store = connect(sqlite_config(os.path.join(root, "metadata.sqlite")))
    newest = list_artifacts(store, "Examples")[0]["properties"]
    return {"examples_per_split": newest.get("splits"),
            **{k: newest[k] for k in ("lines_read", "pairs_kept", "lines_rejected", "examples")
               if k in newest}}


def transform_files(root: str) -> dict:
    """Transform's output files per split (transformed_examples/*/Split-*/), and bytes."""
    counts: dict[str, int] = {}
    size = 0
    for split_dir in sorted(glob.glob(os.path.join(root, "Transform", "transformed_examples",
                                                   "*", "Split-*"))):
        files = [f for f in glob.glob(os.path.join(split_dir, "*")) if os.path.isfile(f)]
        split = os.path.basename(split_dir).removeprefix("Split-")
        counts[split] = counts.get(split, 0) + len(files)
        size += sum(os.path.getsize(f) for f in files)
    return {"transform_files_per_split": counts, "transform_bytes": size}


# --- the session cluster of the cluster modes -----------------------------------------------

@contextlib.contextmanager
def session_cluster(mode: str, directory: str) -> Iterator[flink_cluster.Cluster | None]:
    """A cluster mode's session cluster of CLUSTER_TASKMANAGERS TaskManagers, started in
    `directory` for the block and stopped however the block ends (a failed run, Ctrl-C,
    SIGTERM: main makes it an exit); None for the other modes."""
    if not is_cluster(mode):
        yield None
        return
    flink_cluster.stop(directory, quiet=True)  # one a killed scale.py left running
    shutil.rmtree(directory, ignore_errors=True)
    try:  # a cluster that does not start stops itself: no mode after it would run
        cluster = flink_cluster.start(directory, CLUSTER_TASKMANAGERS,
                                      rest_port=CLUSTER_REST_PORT,
                                      worker_pool_port=CLUSTER_POOL_PORT,
                                      rpc_port=CLUSTER_RPC_PORT)
    except flink_cluster.ClusterError as err:
        sys.exit(f"scale.py: {mode}: {err}")
    try:
        yield cluster
    finally:
        flink_cluster.stop(directory, quiet=True)


class TaskManagerLoss(threading.Thread):
    """Loses a TaskManager as tests/test_flink_cluster.py does: `after_s` seconds after
    Transform's job (LOST_JOB) starts running tasks on the cluster, kills (SIGKILL) the
    TaskManager that runs them and starts a replacement; the shipped conf makes Flink restart
    the job. `facts` says what happened and what the JobManager recorded of the job."""

    def __init__(self, cluster: flink_cluster.Cluster, process: subprocess.Popen,
                 after_s: float) -> None:
        super().__init__(daemon=True)
        self.cluster, self.process, self.after_s = cluster, process, after_s
        self.started = time.monotonic()
        self.loss: dict = {"killed": None, "after_s": after_s}
        self.jid: str | None = None

    def _running(self) -> bool:
        return self.process.poll() is None

    def run(self) -> None:
        try:
            self._lose()
        except (OSError, ValueError, KeyError, StopIteration, flink_cluster.ClusterError) as err:
            self.loss["reason"] = f"{type(err).__name__}: {err}"[:300]

    def _lose(self) -> None:
        job = flink_jobs.running_job(self.cluster.master, LOST_JOB, self._running)
        if job is None:
            self.loss["reason"] = f"the run ended before {LOST_JOB} ran"
            return
        self.jid, tasks_at = job["jid"], time.monotonic()
        busy: list[str] = []
        # after_s, then a look every SAMPLE_S for as long again: a slot may be free for a
        # moment between two of the job's tasks.
        while self._running() and not busy and time.monotonic() < tasks_at + 2 * self.after_s:
            time.sleep(SAMPLE_S)
            if time.monotonic() >= tasks_at + self.after_s:
                busy = flink_jobs.busy_taskmanagers(self.cluster.master)
        if not busy:
            when = f"{time.monotonic() - tasks_at:.0f} s into {LOST_JOB}"
            self.loss["reason"] = (f"no busy TaskManager {when}" if self._running()
                                   else f"the run ended {when}")
            return
        victim = flink_cluster.Cluster.load(self.cluster.directory).member(busy[0])
        os.kill(victim.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        self.loss.update(killed=victim.role, killed_s_into_job=round(killed_at - tasks_at, 1),
                         killed_s_into_run=round(killed_at - self.started, 1))
        replacement = flink_cluster.add_taskmanager(self.cluster.directory)
        self.loss.update(replacement=replacement.role,
                         replacement_started_s=round(time.monotonic() - killed_at, 1))

    def facts(self) -> dict:
        """What happened ("killed": None, and why, if nothing was killed), with the job's final
        state, seconds, parallelism and the failures the JobManager recorded (each restarted
        the job, or failed it): read once the run has ended, before the cluster stops."""
        self.join()
        if self.jid:
            master = self.cluster.master
            try:
                failures = flink_jobs.job_failures(master, self.jid)
                job = flink_jobs.rest(master, f"/jobs/{self.jid}")
                self.loss.update(
                    job=self.jid, job_state=job["state"], job_s=job["duration"] / 1000,
                    job_parallelism=max(v["parallelism"] for v in job["vertices"]),
                    failures=len(failures),
                    failure_exceptions=[f["exceptionName"] for f in failures],
                    failures_name_the_killed=bool(self.loss["killed"]) and any(
                        self.loss["killed"] in flink_jobs.failure_text(f) for f in failures))
            except (OSError, ValueError, KeyError) as err:
                self.loss["job_error"] = f"{type(err).__name__}: {err}"[:300]
        return {"taskmanager_loss": self.loss}


def lose_taskmanager(cluster: flink_cluster.Cluster, after_s: float
                     ) -> Callable[[subprocess.Popen], Callable[[], dict]]:
    """run_component's `watch` that loses a TaskManager during the run (TaskManagerLoss)."""
    def watch(process: subprocess.Popen) -> Callable[[], dict]:
        loss = TaskManagerLoss(cluster, process, after_s)
        loss.start()
        return loss.facts
    return watch


# --- the results file -----------------------------------------------------------------------

class Results:
    """The result file, rewritten (atomically) after every row."""

    def __init__(self, path: str, session: dict, overwrite: bool,
                 measured: str = MEASURED) -> None:
        self.path, self.measured = path, measured
        self.data = {"sessions": [], "rows": []}
        if os.path.isfile(results.path(path)) and not overwrite:
            self.data = results.read(path)["figures"]
        self.session = len(self.data["sessions"])
        self.data["sessions"].append(session)
        self.save()

    def add(self, row: dict) -> None:
        self.data["rows"].append({"session": self.session, **row})
        self.save()

    def save(self) -> None:
        results.write(self.path, self.measured, self.data)


def _loss_said(loss: dict | None) -> str:
    """A lost TaskManager in a progress line."""
    if loss is None:
        return ""
    if not loss["killed"]:
        return f"; NO TaskManager killed ({loss.get('reason')})"
    return (f"; {loss['killed']} killed {loss['killed_s_into_job']:.0f} s into {LOST_JOB}, "
            f"the job {str(loss.get('job_state')).lower()} after {loss.get('failures')} "
            "failure(s)")


def duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 120:
        return f"{seconds} s"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"


def _memory(mb: float) -> str:
    return f"{mb / 1024:.1f} GB" if mb >= 1024 else f"{mb:.0f} MB"


def estimate_s(step: tuple[int, str, str], done: dict[tuple[int, str, str], float]) -> float | None:
    """A guess of a step's subprocess time: a measured one of the same component (same mode
    first) scaled linearly with the size; else the mean per size unit of all measured ones."""
    size, mode, component = step
    for same_mode in (True, False):
        known = [(s, t) for (s, m, c), t in done.items()
                 if c == component and (m == mode) == same_mode]
        if known:
            s, t = min(known, key=lambda st: abs(st[0] - size))
            return t * size / s
    if done:
        return sum(t / s for (s, _, _), t in done.items()) / len(done) * size
    return None


def add_corpus_arguments(parser: argparse.ArgumentParser, sizes: str) -> None:
    """The sizes, Beam modes and corpora of a scaling benchmark."""
    parser.add_argument("--sizes", default=sizes, help="corpus sizes K (x fra.txt)")
    parser.add_argument("--modes", default="multi_processing,in_memory",
                        help="Beam modes: " + ", ".join(MODES))
    parser.add_argument("--data-root", default="/work/scale_data",
                        help="where the corpora are (generated if missing)")
    parser.add_argument("--source", default=os.environ.get("FRA_TXT",
                                                           "/work/shared/data/fra-eng/fra.txt"),
                        help="fra.txt, to generate corpora (default: $FRA_TXT)")
    parser.add_argument("--lines", type=int, default=None,
                        help="corpora of about N lines of fra.txt per copy (smoke tests)")
    parser.add_argument("--workers", type=int, default=2,
                        help="--direct_num_workers of multi_processing (default 2)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_corpus_arguments(parser, sizes="1,4,16")
    parser.add_argument("--components", default=",".join(COMPONENTS),
                        help="components to measure (run in pipeline order)")
    parser.add_argument("--runs-root", default=None,
                        help="pipeline roots and logs (default: DATA_ROOT/runs)")
    parser.add_argument("--gzip", action="store_true", help="corpora of .txt.gz parts")
    parser.add_argument("--seed", type=int, default=0, help="make_corpus's seed")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per component run before it is killed")
    parser.add_argument("--keep-roots", action="store_true",
                        help="keep each size x mode's pipeline root (default: deleted once "
                             "measured; 16x ones take several GB)")
    parser.add_argument("--out", default="scale.json",
                        help="a result file (a bare name: in benchmarks/results/)")
    parser.add_argument("--run-arg", action="append", default=[], metavar="FLAG",
                        help="a flag for every `nmt run`, e.g. --run-arg=--tokenizer="
                             "sentencepiece (repeatable)")
    parser.add_argument("--overwrite", action="store_true",
                        help="start --out afresh instead of adding to its rows")
    parser.add_argument("--lose-after", type=float, default=30, metavar="S",
                        help="flink_cluster_lost_taskmanager: kill the TaskManager S seconds "
                             f"after {LOST_JOB}'s tasks start (default 30)")
    parser.add_argument("--one-run", action="store_true",
                        help=f"the data half as one `nmt run --to` its last component, as a "
                             f"user runs it (one Flink engine for all its jobs): one row, "
                             f"component {DATA_HALF!r}")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    modes = args.modes.split(",")
    components = [c for c in COMPONENTS if c in args.components.split(",")]
    unknown = (set(modes) - set(MODES)) | (set(args.components.split(",")) - set(COMPONENTS))
    if unknown or not components or min(sizes) < 1:
        parser.error(f"unknown modes/components {sorted(unknown)} (modes: {', '.join(MODES)}; "
                     f"components: {', '.join(COMPONENTS)}) or a size < 1")
    runs_root = args.runs_root or os.path.join(args.data_root, "runs")
    os.makedirs(os.path.join(runs_root, "logs"), exist_ok=True)
    # SIGTERM or a closed terminal as an exit, so that a cluster mode's cluster is stopped
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda number, _: sys.exit(128 + number))

    results = Results(args.out, {"machine": machine_info(), "argv": sys.argv[1:],
                                 "nice": os.nice(0)}, args.overwrite)
    parts = [DATA_HALF] if args.one_run else components
    steps = [(k, m, c) for k in sizes for m in modes for c in parts]
    done: dict[tuple[int, str, str], float] = {}
    started = time.monotonic()
    number = 0
    for size in sizes:
        corpus = corpus_dir(args.data_root, size, args.lines, args.gzip)
        manifest = ensure_corpus(corpus, args.source, size, args.lines, args.gzip, args.seed)
        label = f"{size}x" + (f" ({args.lines} lines/copy)" if args.lines else "")
        corpus_facts = {"size": size, "lines_per_copy": args.lines, "corpus": corpus,
                        "corpus_lines": manifest["lines_written"],
                        "corpus_bytes": manifest["bytes"],
                        "corpus_distinct_english": manifest["distinct_english"],
                        "corpus_distinct_words": manifest["distinct_words"]}
        for mode in modes:
            root = os.path.join(runs_root, os.path.basename(corpus) + "_" + mode)
            shutil.rmtree(root, ignore_errors=True)
            examples: dict = {}
            failed = None
            cluster_dir = os.path.join(runs_root, "flink-cluster", os.path.basename(root))
            with session_cluster(mode, cluster_dir) as cluster:
                for component in parts:
                    number += 1
                    target = components[-1] if component == DATA_HALF else component
                    row = {**corpus_facts, "mode": mode,
                           "beam_args": beam_args(mode, args.workers), "env": mode_env(mode),
                           "component": component, "pipeline_root": root,
                           "started": datetime.datetime.now().astimezone().isoformat(
                               timespec="seconds")}
                    if cluster:
                        row["cluster"] = {"master": cluster.master, "directory": cluster_dir,
                                          "taskmanagers": len(cluster.taskmanagers)}
                    if failed:
                        results.add({**row, "status": "skipped", "reason": f"{failed} failed"})
                        print(f"[{number}/{len(steps)}] {label} {mode} {component}: skipped "
                              f"({failed} failed)", file=sys.stderr, flush=True)
                        continue
                    log_name = f"{os.path.basename(corpus)}_{mode}_{component}.log"
                    log_path = os.path.join(runs_root, "logs", log_name.replace(" ", "_"))
                    loses = cluster and FLINK_MODES[mode].get("lose_taskmanager") \
                        and target == "Transform"
                    run = run_component(corpus, root, target, beam_args(mode, args.workers),
                                        log_path, args.timeout,
                                        (*engine_args(mode), *args.run_arg), mode_env(mode),
                                        cluster_dir if cluster else None,
                                        lose_taskmanager(cluster, args.lose_after)
                                        if loses else None)
                    row.update(run)
                    if run["status"] == "ok":
                        row.update(component_time(corpus, root, target, run["subprocess_s"]))
                        if component == DATA_HALF:  # every component of the run, summed
                            row["component_s"] = round(sum(
                                seconds for _, seconds in row.get("components_in_run",
                                                                  {}).values()),
                                2) if row["time_source"] == "mlmd" else run["subprocess_s"]
                        if component == "FraTxtExampleGen" or not examples:
                            try:
                                examples = examples_facts(root)
                            except Exception as err:  # noqa: BLE001 - a count, not the timing
                                examples = {"examples_error": str(err)[:300]}
                        row.update(examples)
                        if target == "Transform":
                            row.update(transform_files(root))
                            row.update(vocabulary_learning(log_path))
                        done[(size, mode, component)] = run["subprocess_s"]
                    else:
                        failed = component
                    results.add(row)
                    remaining = [estimate_s(s, done) for s in steps[number:]]
                    eta = ("unknown" if None in remaining else duration(sum(remaining)))
                    what = (f"{run['subprocess_s']:.0f} s (component "
                            f"{row.get('component_s', 0):.1f} s {row.get('time_source', '')}), "
                            f"peak {_memory(run['peak_rss_mb'])}"
                            if run["status"] == "ok" else
                            f"{run['status'].upper()} after {run['subprocess_s']:.0f} s, "
                            f"see {log_path}") + _loss_said(run.get("taskmanager_loss"))
                    print(f"[{number}/{len(steps)}] {label} {mode} {component}: {what}; "
                          f"elapsed {duration(time.monotonic() - started)}, ETA {eta}",
                          file=sys.stderr, flush=True)
            if not args.keep_roots:
                shutil.rmtree(root, ignore_errors=True)
    print(f"results: {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""A standalone Flink 1.16 session cluster on this machine, for `nmt run --beam-runner flink
--flink-master` (docs/scaling.md, "Apache Flink").

    python -m engines.flink_cluster start [--taskmanagers N] [--dir DIR]
    python -m engines.flink_cluster status [--dir DIR]
    python -m engines.flink_cluster stop [--dir DIR]

`start` runs, each as its own process group, one JobManager
(StandaloneSessionClusterEntrypoint), N TaskManagers (TaskManagerRunner) and Beam's worker pool
on localhost:50000 beside them, from the jars `make flink` resolved (the job server's
classpath holds Flink's runtime), with the settings of `engines/flink-conf.yaml`: the file a
real cluster's conf/ can take as it is. As Flink's own bin/ scripts do, the JVM flags come from
that file (`env.java.opts`) and each process's memory flags from Flink's BashJavaUtils; only
where to listen (localhost) is added, as -D flags. Everything listens on localhost only.
What was started is recorded in DIR/cluster.json (pid and start time of each process), and
`stop` stops exactly that, the worker pool's SDK workers with it.

The run's side lives here too: the Flink jobs of a run read from the cluster's REST API
(`jobs`), and a failed job's cause said in one sentence (`failure_reason`).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Sequence

from engines import flink
from engines import flink_conf
from engines.flink_jobs import rest

DEFAULT_DIR = os.path.join("nmt_runs", "flink-cluster")
REST_PORT = 8081  # Flink's default, which `--flink-master 127.0.0.1:8081` names
RPC_PORT = 6123  # the JobManager's (Flink's default)
JOBMANAGER_MAIN = "org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint"
TASKMANAGER_MAIN = "org.apache.flink.runtime.taskexecutor.TaskManagerRunner"
_STATE_FILE = "cluster.json"
_START_SECONDS = 120  # JVMs starting side by side on a loaded 2-core machine
_STOP_SECONDS = 15


# The processes this Python process started (kept, so no Popen is collected while its process
# runs): `stop` reaps them. A `start` from the command line exits and leaves them to init.
_CHILDREN: dict[int, subprocess.Popen] = {}


class ClusterError(RuntimeError):
    """The cluster cannot start, or is not there; the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class Member:
    """A process the cluster started: its role, pid and start time (in clock ticks since boot,
    from /proc: a pid reused by another process later has another), and its log."""
    role: str  # "jobmanager", "taskmanager-1", ..., "worker-pool"
    pid: int
    started: int
    log: str

    def alive(self) -> bool:
        return _start_ticks(self.pid) == self.started


@dataclasses.dataclass
class Cluster:
    """A started cluster, as DIR/cluster.json records it."""
    directory: str
    rest_port: int
    rpc_port: int
    worker_pool_port: int
    members: list[Member]

    @property
    def master(self) -> str:
        """What `--flink-master` takes."""
        return f"127.0.0.1:{self.rest_port}"

    def member(self, role: str) -> Member:
        return next(m for m in self.members if m.role == role)

    @property
    def taskmanagers(self) -> list[Member]:
        return [m for m in self.members if m.role.startswith("taskmanager-")]

    def save(self) -> None:
        path = os.path.join(self.directory, _STATE_FILE)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"rest_port": self.rest_port, "rpc_port": self.rpc_port,
                       "worker_pool_port": self.worker_pool_port,
                       "members": [dataclasses.asdict(m) for m in self.members]}, f, indent=1)
        os.replace(path + ".tmp", path)

    @classmethod
    def load(cls, directory: str) -> Cluster | None:
        directory = os.path.abspath(directory)
        try:
            with open(os.path.join(directory, _STATE_FILE), encoding="utf-8") as f:
                state = json.load(f)
        except FileNotFoundError:
            return None
        return cls(directory, state["rest_port"], state["rpc_port"], state["worker_pool_port"],
                   [Member(**m) for m in state["members"]])


def _start_ticks(pid: int) -> int | None:
    """The process's start time (field 22 of /proc/PID/stat), None if it is gone or a
    zombie (dead, not yet reaped by the process that started it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in "ZX" else int(fields[19])


def _port_free(port: int) -> bool:
    """No server listens on it (connections of a stopped cluster in TIME_WAIT do not count:
    Flink's servers bind with SO_REUSEADDR, as this check does)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("localhost", port))
        except OSError:
            return False
    return True


class _Starter:
    """Starts the cluster's processes, each in a process group of its own, logging to
    DIR/log/ROLE.log; they outlive the command that starts them (no parent-death signal)."""

    def __init__(self, directory: str, rest_port: int, rpc_port: int,
                 overrides: Sequence[str]) -> None:
        self.directory = directory
        self.conf_dir = os.path.join(directory, "conf")
        self.java = flink.java_command()
        try:
            flink.check_java(self.java)
            jar = flink.job_server_jar()
        except flink.EngineError as err:
            raise ClusterError(str(err).replace("--beam-runner flink", "The Flink cluster")
                               ) from None
        self.classpath = os.pathsep.join(flink._manifest_jars(jar))
        self.conf = flink_conf.read_conf(os.path.join(self.conf_dir, "flink-conf.yaml"))
        self.flags = flink_conf.local_flags(directory, rest_port, rpc_port) + [f"-D{o}"
                                                                      for o in overrides]
        self._taskmanager_params: tuple[list[str], list[str]] | None = None

    def _spawn(self, role: str, command: list[str], env: dict[str, str] | None = None
               ) -> Member:
        log = os.path.join(self.directory, "log", f"{role}.log")
        with open(log, "ab") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env=env, cwd=self.directory,
                                       start_new_session=True)
        _CHILDREN[process.pid] = process  # reaped by `stop` when it runs in this process
        started = _start_ticks(process.pid)
        return Member(role, process.pid, started or 0, log)

    def _jvm(self, role: str, kind: str, main: str, memory: tuple[list[str], list[str]],
             extra: Sequence[str] = ()) -> Member:
        jvm_memory, sizes = memory
        command = [self.java, *flink_conf.java_opts(self.conf, kind), *jvm_memory,
                   # Flink's own lines at INFO (slf4j-simple, the job server's logger), dated
                   "-Dorg.slf4j.simpleLogger.showDateTime=true",
                   "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSZ",
                   "-cp", self.classpath, main, "--configDir", self.conf_dir,
                   *flink_conf.dynamic_flags(self.flags), *sizes, *extra]
        return self._spawn(role, command, flink.engine_env())

    def jobmanager(self) -> Member:
        memory = flink_conf.resource_params(self.java, self.classpath, self.conf_dir,
                                  "GET_JM_RESOURCE_PARAMS", flink_conf.dynamic_flags(self.flags))
        return self._jvm("jobmanager", "jobmanager", JOBMANAGER_MAIN, memory)

    def taskmanager(self, number: int) -> Member:
        if self._taskmanager_params is None:
            self._taskmanager_params = flink_conf.resource_params(
                self.java, self.classpath, self.conf_dir, "GET_TM_RESOURCE_PARAMS",
                flink_conf.dynamic_flags(self.flags))
        return self._jvm(f"taskmanager-{number}", "taskmanager", TASKMANAGER_MAIN,
                         self._taskmanager_params,
                         ["-D", f"taskmanager.resource-id=taskmanager-{number}"])

    def worker_pool(self, port: int) -> Member:
        return self._spawn("worker-pool", flink.worker_pool_command(port), flink.engine_env())


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _wait(cluster: Cluster, taskmanagers: int, since: float) -> None:
    """Until the REST API counts `taskmanagers` registered TaskManagers and the worker pool
    listens; ClusterError naming the process that stopped, or what did not come up."""
    deadline = since + _START_SECONDS
    registered = -1
    while time.monotonic() < deadline:
        for member in cluster.members:
            if not member.alive():
                raise ClusterError(f"The Flink cluster's {member.role} stopped as it started: "
                                   f"see {member.log}.")
        with contextlib.suppress(OSError, ValueError):
            registered = rest(cluster.master, "/overview", 2)["taskmanagers"]
        if registered >= taskmanagers and flink.listening(cluster.worker_pool_port):
            return
        time.sleep(0.5)
    what = ("the JobManager's REST API did not answer" if registered < 0 else
            f"{registered} of {taskmanagers} TaskManagers registered")
    raise ClusterError(f"The Flink cluster did not come up within {_START_SECONDS} s ({what}): "
                       f"see the logs in {os.path.join(cluster.directory, 'log')}.")


def start(directory: str = DEFAULT_DIR, taskmanagers: int = 2, rest_port: int = REST_PORT,
          worker_pool_port: int = flink.WORKER_POOL_PORT, rpc_port: int = RPC_PORT,
          overrides: Sequence[str] = (), conf: str = flink_conf.CONF) -> Cluster:
    """Starts the cluster and returns once every TaskManager has registered. `overrides` are
    KEY=VALUE settings over `conf`'s (as Flink's -D). A worker pool on another port than
    50000 needs `--beam-arg=--environment_config=localhost:PORT` in the runs."""
    directory = os.path.abspath(directory)
    running = Cluster.load(directory)
    if running and any(m.alive() for m in running.members):
        raise ClusterError(f"A Flink cluster started from {directory} is running (REST at "
                           f"http://{running.master}): stop it first with `python -m "
                           f"engines.flink_cluster stop --dir {directory}`.")
    for port, what in ((rest_port, "REST"), (rpc_port, "RPC"),
                       (worker_pool_port, "Beam worker pool")):
        if not _port_free(port):
            raise ClusterError(f"Port {port} (the Flink cluster's {what} port) is in use on "
                               "this machine, by another Flink cluster or job server perhaps: "
                               "stop it, or choose another port.")
    for sub in ("conf", "log", "tmp"):
        os.makedirs(os.path.join(directory, sub), exist_ok=True)
    # The shipped file as it is: the cluster runs with what a user copies.
    with open(conf, "rb") as src, open(os.path.join(directory, "conf", "flink-conf.yaml"),
                                       "wb") as dst:
        dst.write(src.read())
    starter = _Starter(directory, rest_port, rpc_port, overrides)
    cluster = Cluster(directory, rest_port, rpc_port, worker_pool_port, [])
    since = time.monotonic()
    try:
        for spawn in (lambda: starter.worker_pool(worker_pool_port), starter.jobmanager,
                      *[lambda n=n: starter.taskmanager(n) for n in range(1, taskmanagers + 1)]):
            member = spawn()
            cluster.members.append(member)
            cluster.save()  # at once: a start that fails half way is still stopped by `stop`
            _say(f"Started the Flink cluster's {member.role} (pid {member.pid}, log "
                 f"{member.log}).")
        _wait(cluster, taskmanagers, since)
    except BaseException:
        stop(directory, quiet=True)
        raise
    _say(f"The Flink session cluster is up in {time.monotonic() - since:.0f} s: "
         f"{taskmanagers} TaskManager(s), REST and web UI at http://localhost:{rest_port}, "
         f"Beam's worker pool at localhost:{worker_pool_port}. Run on it: nmt run "
         f"--beam-runner flink --flink-master {cluster.master}")
    return cluster


def add_taskmanager(directory: str = DEFAULT_DIR, overrides: Sequence[str] = ()) -> Member:
    """One more TaskManager for the running cluster (a lost one's replacement), registered."""
    cluster = Cluster.load(directory)
    if cluster is None or not cluster.member("jobmanager").alive():
        raise ClusterError(f"No Flink cluster started from {directory} is running: start one "
                           "first.")
    number = 1 + max((int(m.role.split("-")[1]) for m in cluster.taskmanagers), default=0)
    member = _Starter(cluster.directory, cluster.rest_port, cluster.rpc_port,
                      overrides).taskmanager(number)
    cluster.members.append(member)
    cluster.save()
    _say(f"Started the Flink cluster's {member.role} (pid {member.pid}, log {member.log}).")
    alive = sum(m.alive() for m in cluster.taskmanagers)
    _wait(Cluster(cluster.directory, cluster.rest_port, cluster.rpc_port,
                  cluster.worker_pool_port,
                  [m for m in cluster.members if m.alive() or m is member]),
          alive, time.monotonic())
    return member


def _signal_group(member: Member, signum: int) -> None:
    """To the member's process group (the worker pool's SDK workers are in it), if the
    member is still the process that was started."""
    if member.alive():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(member.pid, signum)


def stop(directory: str = DEFAULT_DIR, quiet: bool = False) -> list[Member]:
    """Stops what `start` recorded in DIR (TaskManagers first, the worker pool last), each
    with SIGTERM, then SIGKILL after a while; returns the members that were still running."""
    cluster = Cluster.load(directory)
    if cluster is None:
        if not quiet:
            _say(f"No Flink cluster was started from {os.path.abspath(directory)}: nothing "
                 "to stop.")
        return []
    running = [m for m in cluster.members if m.alive()]
    order = sorted(running, key=lambda m: ("taskmanager" not in m.role, m.role == "worker-pool"))
    for member in order:
        _signal_group(member, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_SECONDS
    while any(m.alive() for m in order) and time.monotonic() < deadline:
        time.sleep(0.2)
    for member in order:
        if member.alive():
            _signal_group(member, signal.SIGKILL)
    for member in order:  # and the worker pool's SDK workers, which share its group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if member.role == "worker-pool":
                os.killpg(member.pid, signal.SIGKILL)
    for member in cluster.members:
        child = _CHILDREN.pop(member.pid, None)
        if child is not None:
            child.poll()
    os.remove(os.path.join(cluster.directory, _STATE_FILE))
    if not quiet:
        gone = [m.role for m in cluster.members if m not in running]
        _say(f"Stopped the Flink cluster of {cluster.directory}: "
             f"{', '.join(m.role for m in order) or 'nothing was running'}"
             + (f" ({', '.join(gone)} had already stopped)." if gone else "."))
    return running


def status(directory: str = DEFAULT_DIR) -> list[str]:
    """One line per process the cluster started (running or not), then the REST API's
    count of TaskManagers, slots and jobs."""
    cluster = Cluster.load(directory)
    if cluster is None:
        return [f"No Flink cluster was started from {os.path.abspath(directory)}."]
    lines = [f"{m.role}: {'running' if m.alive() else 'stopped'} (pid {m.pid}, log {m.log})"
             for m in cluster.members]
    try:
        seen = rest(cluster.master, "/overview")
        lines.append(f"REST at http://{cluster.master}: {seen['taskmanagers']} TaskManager(s), "
                     f"{seen['slots-available']} of {seen['slots-total']} slots free, "
                     f"{seen['jobs-running']} job(s) running, {seen['jobs-finished']} "
                     f"finished, {seen['jobs-failed']} failed.")
    except OSError as err:
        lines.append(f"REST at http://{cluster.master} does not answer ({err}).")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engines.flink_cluster",
        description="A standalone Flink 1.16 session cluster on localhost for nmt's Beam "
                    "components, with engines/flink-conf.yaml's settings.")
    parser.add_argument("command", choices=("start", "stop", "status", "add-taskmanager"))
    parser.add_argument("--dir", default=DEFAULT_DIR,
                        help="where the cluster keeps its conf, logs, files and pids "
                             f"(default {DEFAULT_DIR})")
    parser.add_argument("--taskmanagers", type=int, default=2, metavar="N",
                        help="start: how many TaskManagers (default 2)")
    parser.add_argument("--rest-port", type=int, default=REST_PORT)
    parser.add_argument("--rpc-port", type=int, default=RPC_PORT)
    parser.add_argument("--worker-pool-port", type=int, default=flink.WORKER_POOL_PORT,
                        help="Beam's worker pool (default 50000, which runs name; another "
                             "needs --beam-arg=--environment_config=localhost:PORT)")
    parser.add_argument("-D", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="a setting over flink-conf.yaml's, as "
                                                  "Flink's own -D")
    args = parser.parse_args(argv)
    if args.taskmanagers < 0:
        parser.error("--taskmanagers takes 0 or more")
    try:
        if args.command == "start":
            start(args.dir, args.taskmanagers, args.rest_port, args.worker_pool_port,
                  args.rpc_port, args.overrides)
        elif args.command == "add-taskmanager":
            add_taskmanager(args.dir, args.overrides)
        elif args.command == "stop":
            stop(args.dir)
        else:
            print("\n".join(status(args.dir)))
    except (ClusterError, flink_conf.ConfError) as err:
        _say(f"flink_cluster: error: {err}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

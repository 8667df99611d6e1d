"""The shipped flink-conf.yaml, and the JVM flags Flink's bin/ scripts build from it: each
process's Java options and memory sizes (BashJavaUtils, as Flink's scripts ask it), and where a
local cluster listens and keeps its files."""
from __future__ import annotations

import os
import shlex
import subprocess
from typing import Iterable, Sequence

CONF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flink-conf.yaml")
# What Flink's bin/jobmanager.sh and taskmanager.sh ask for each process's memory flags.
BASH_JAVA_UTILS = "org.apache.flink.runtime.util.bash.BashJavaUtils"
_RESULT = "BASH_JAVA_UTILS_EXEC_RESULT:"


class ConfError(RuntimeError):
    """Flink cannot size the processes from the configuration; the message says what to fix."""


def read_conf(path: str = CONF) -> dict[str, str]:
    """Flink 1.16's flink-conf.yaml: one `key: value` a line (not YAML: no nesting, no
    multi-line values), `#` comments."""
    conf = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, colon, value = line.split("#", 1)[0].strip().partition(": ")
            if colon:
                conf[key.strip()] = value.strip()
    return conf


def java_opts(conf: dict[str, str], role: str) -> list[str]:
    """The JVM flags Flink's scripts pass a process: env.java.opts, then the role's own
    (env.java.opts.jobmanager / .taskmanager)."""
    return shlex.split(conf.get("env.java.opts", "")) + shlex.split(
        conf.get(f"env.java.opts.{role}", ""))


def resource_params(java: str, classpath: str, conf_dir: str, command: str,
                     dynamic: Sequence[str]) -> tuple[list[str], list[str]]:
    """(JVM memory flags, -D flags fixing every memory size) for a JobManager
    (GET_JM_RESOURCE_PARAMS) or a TaskManager (GET_TM_RESOURCE_PARAMS), as Flink's scripts
    get them: a TaskManagerRunner started without the sizes refuses to start."""
    done = subprocess.run([java, "-cp", classpath, BASH_JAVA_UTILS, command,
                           "--configDir", conf_dir, *dynamic],
                          capture_output=True, text=True, timeout=120)
    results = [line[len(_RESULT):] for line in done.stdout.splitlines()
               if line.startswith(_RESULT)]
    if done.returncode != 0 or len(results) < 2:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfError(f"Flink could not size the {command.split('_')[1].lower()} "
                           f"processes' memory from {conf_dir}/flink-conf.yaml ({why}): fix "
                           "the memory settings there.")
    return results[-2].split(), results[-1].split()


def local_flags(directory: str, rest_port: int, rpc_port: int) -> list[str]:
    """Where this machine's cluster listens and keeps its files: localhost only (the REST
    API and Beam's worker pool take anyone's jobs), under DIR."""
    tmp = os.path.join(directory, "tmp")
    return [f"-D{key}={value}" for key, value in (
        ("jobmanager.rpc.address", "localhost"), ("jobmanager.bind-host", "localhost"),
        ("jobmanager.rpc.port", rpc_port),
        ("rest.address", "localhost"), ("rest.bind-address", "localhost"),
        ("rest.port", rest_port),
        ("taskmanager.host", "localhost"), ("taskmanager.bind-host", "localhost"),
        ("io.tmp.dirs", tmp), ("web.tmpdir", tmp), ("blob.storage.directory", tmp))]


def dynamic_flags(flags: Iterable[str]) -> list[str]:
    """-Dkey=value as the entrypoints' parsers want it: `-D key=value`."""
    out = []
    for flag in flags:
        out += ["-D", flag[2:]] if flag.startswith("-D") and flag != "-D" else [flag]
    return out

"""The one layout of a result file in benchmarks/results/, and the one function that writes it.

A result file is a JSON object:

  schema    1
  measured  what was measured, in one sentence
  command   the command line that produced it
  commit    the git commit of the code that ran (with "+dirty" if the tree had changes)
  date      when, ISO 8601 with the time zone
  machine   cpu_model, cpu_features (the matrix/vector ones of FEATURES it has), cores,
            memory_gb, gpu (None without one)
  figures   the measurement itself: a dict, whose keys the script chooses
  migrated_from  (files written before this layout only) the old file(s), and where the
            commit, date and machine came from

benchmarks/figures.py renders README's and BENCHMARKS' tables from these files.
"""
from __future__ import annotations

import datetime
import json
import os
import shlex
import subprocess
import sys

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = 1
# The CPU flags that decide which kernels and precisions TensorFlow can use here.
FEATURES = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16",
            "amx_int8")


def _run(command: list[str], cwd: str = REPO) -> str | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, check=True,
                              cwd=cwd).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def commit(checkout: str = REPO) -> str | None:
    """HEAD's hash of a checkout (this one by default), marked "+dirty" when tracked files
    differ from it."""
    head = _run(["git", "rev-parse", "--short=7", "HEAD"], checkout)
    if head and _run(["git", "status", "--porcelain", "--untracked-files=no"], checkout):
        head += "+dirty"
    return head


def machine(cpuinfo: str = "/proc/cpuinfo") -> dict:
    """The facts about this machine that change a figure: CPU, its features, cores, GPU."""
    model, flags = None, set()
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model is None:
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            memory_gb = round(int(f.readline().split()[1]) / 2**20, 1)
    except (OSError, IndexError, ValueError):
        memory_gb = None
    gpus = _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
    return {"cpu_model": model, "cpu_features": [f for f in FEATURES if f in flags],
            "cores": os.cpu_count(), "memory_gb": memory_gb,
            "gpu": gpus.replace("\n", ", ") if gpus else None}


def path(name: str) -> str:
    """Where a result file is: a bare name is in benchmarks/results/."""
    return name if os.sep in name else os.path.join(RESULTS, name)


def write(name: str, measured: str, figures: dict, argv: list[str] | None = None,
          at_commit: str | None = None) -> dict:
    """Writes `figures` as a result file (see path), atomically, so a killed run leaves the
    previous file whole. Returns what it wrote. Its commit is this checkout's, or `at_commit`
    when what it measured ran at another (a pipeline run started before later commits)."""
    target = path(name)
    record = {"schema": SCHEMA, "measured": measured,
              "command": shlex.join([os.path.relpath(sys.argv[0], REPO) if sys.argv[0] else
                                     "python", *(sys.argv[1:] if argv is None else argv)]),
              "commit": at_commit or commit(),
              "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
              "machine": machine(), "figures": figures}
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    tmp = target + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, target)
    return record


def emit(name: str | None, measured: str, figures: dict) -> None:
    """Prints `figures` as JSON for whoever ran the script and, given a name, writes them as a
    result file too."""
    if name:
        write(name, measured, figures)
    print(json.dumps(figures, indent=1, ensure_ascii=False))


def read(name: str) -> dict:
    """A result file (see path)."""
    with open(path(name), encoding="utf-8") as f:
        return json.load(f)

"""The test suite's time as a result file: how many tests passed and in how many minutes, from
the log of `make test` (pytest's last summary line), and the CPU it used: in all and for its
costliest modules (tests/conftest.py's `--cpu-durations` table), which say where a slower
machine's minutes go.

Usage: bash .ci/run 2>&1 | tee suite.log
       PYTHONPATH=. .venv/bin/python -m benchmarks.suite_time --log suite.log \
           [--output test_suite.json]
"""
from __future__ import annotations

import argparse
import re

from benchmarks import results


def cpu_by_module(log: str) -> dict:
    """The last `--cpu-durations` table: CPU minutes in all, and seconds per listed module
    (costliest first); empty where the log has none."""
    tables = re.findall(r"CPU time by module \(top \d+ of \d+, ([\d.]+) min in all\) =+\n"
                        r"((?:\s+[\d.]+s\s+\S+\n)*)", log)
    if not tables:
        return {}
    total, rows = tables[-1]
    return {"cpu_minutes": float(total),
            "cpu_seconds_by_module": {module: float(seconds) for seconds, module
                                      in re.findall(r"([\d.]+)s\s+(\S+)", rows)}}


def summary(log: str) -> dict:
    """Tests passed and minutes, from pytest's last "N passed ... in S s" line, the
    pytest-xdist workers, from make's echo of the pytest command (`-n N`), and cpu_by_module."""
    line = [line for line in log.splitlines() if re.search(r"\d+ passed.* in [\d.]+s", line)][-1]
    workers = re.findall(r"-m pytest .*?-n (\d+)", log)
    return {"passed": int(re.search(r"(\d+) passed", line).group(1)),
            "minutes": round(float(re.search(r" in ([\d.]+)s", line).group(1)) / 60, 2),
            "failed": int(m.group(1)) if (m := re.search(r"(\d+) failed", line)) else 0,
            "workers": int(workers[-1]) if workers else None, **cpu_by_module(log)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", required=True, help="make test's output")
    parser.add_argument("--output", default="test_suite.json",
                        help="a result file (a bare name: in benchmarks/results/)")
    args = parser.parse_args()
    with open(args.log, encoding="utf-8") as f:
        results.emit(args.output, "`make test`: tests passed, the suite's wall time, its "
                     "pytest-xdist workers, and its CPU minutes in all and by costliest module",
                     summary(f.read()))


if __name__ == "__main__":
    main()

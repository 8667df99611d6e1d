"""The test suite's time as a result file: how many tests passed and in how many minutes, from
the log of `make test` (pytest's last summary line).

Usage: bash .ci/run 2>&1 | tee suite.log
       PYTHONPATH=. .venv/bin/python -m benchmarks.suite_time --log suite.log \
           [--output test_suite.json]
"""
from __future__ import annotations

import argparse
import re

from benchmarks import results


def summary(log: str) -> dict:
    """Tests passed and minutes, from pytest's last "N passed ... in S s" line, and the
    pytest-xdist workers, from make's echo of the pytest command (`-n N`)."""
    line = [line for line in log.splitlines() if re.search(r"\d+ passed.* in [\d.]+s", line)][-1]
    workers = re.findall(r"-m pytest .*?-n (\d+)", log)
    return {"passed": int(re.search(r"(\d+) passed", line).group(1)),
            "minutes": round(float(re.search(r" in ([\d.]+)s", line).group(1)) / 60, 2),
            "failed": int(m.group(1)) if (m := re.search(r"(\d+) failed", line)) else 0,
            "workers": int(workers[-1]) if workers else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", required=True, help="make test's output")
    parser.add_argument("--output", default="test_suite.json",
                        help="a result file (a bare name: in benchmarks/results/)")
    args = parser.parse_args()
    with open(args.log, encoding="utf-8") as f:
        results.emit(args.output, "`make test`: tests passed, the suite's wall time and its "
                     "pytest-xdist workers", summary(f.read()))


if __name__ == "__main__":
    main()

"""Every script in benchmarks/ and benchmarks/experiments/ still imports: the scripts run
rarely, so a moved or renamed module they use would otherwise go unnoticed until the next
measurement. Importing runs no benchmark (each script's work is behind `__main__`)."""
from __future__ import annotations

import importlib
import os
import sys

import pytest

from helpers import REPO

PACKAGES = ("benchmarks", "benchmarks.experiments")


def benchmark_modules() -> list[str]:
    """The dotted name of every .py file in the benchmark packages (a package's __init__ as
    the package)."""
    names = []
    for package in PACKAGES:
        directory = os.path.join(REPO, *package.split("."))
        for name in sorted(os.listdir(directory)):
            if name.endswith(".py"):
                module = name[:-3]
                names.append(package if module == "__init__" else f"{package}.{module}")
    return names


def test_the_benchmark_packages_hold_the_scripts():
    modules = benchmark_modules()
    assert {"benchmarks.quality", "benchmarks.time_curve", "benchmarks.plot_curves",
            "benchmarks.experiments", "benchmarks.experiments.tokenizers"} <= set(modules)


@pytest.mark.parametrize("module", benchmark_modules())
def test_benchmark_module_imports(module, monkeypatch):
    # The scripts import each other as `benchmarks.X`, from the repository root (they run
    # with PYTHONPATH=.); benchmarks/ is not an installed package.
    if REPO not in sys.path:
        monkeypatch.syspath_prepend(REPO)
    assert importlib.import_module(module).__name__ == module

"""Every script in benchmarks/ and benchmarks/experiments/ still imports: the scripts run
rarely, so a moved or renamed module they use would otherwise go unnoticed until the next
measurement. Importing runs no benchmark (each script's work is behind `__main__`). And the
decoding-speed benchmark has measured the decoding code as it is now."""
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


def test_decoding_speed_was_measured_on_this_decoding_code():
    """A change to the model, the decoders, the export or the client's batching is not done
    until `translate_speed.py` has measured it (BENCHMARKS.md, "Decoding speed")."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from benchmarks import results, translate_speed

    measured = {}
    for name in sorted(os.listdir(results.RESULTS)):
        if name.startswith("translate_speed") and name.endswith(".json"):
            measured[name] = results.read(name)["figures"].get("decoding_code")
    current = translate_speed.decoding_code_fingerprint()
    assert current in measured.values(), (
        f"No decoding-speed result in benchmarks/results/ measured the decoding code as it is "
        f"now ({', '.join(translate_speed.DECODING_CODE)}: fingerprint {current}; the "
        f"results': {measured}). Rerun "
        "`python -m benchmarks.translate_speed` on a model exported by this code "
        "(benchmarks/reexport.py re-exports a trained one) and commit its result.")


def test_the_decoding_code_fingerprint_ignores_docstrings_but_not_code(tmp_path):
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from benchmarks import translate_speed

    for path in translate_speed.DECODING_CODE:
        os.makedirs(tmp_path / os.path.dirname(path), exist_ok=True)
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            (tmp_path / path).write_text(f.read(), encoding="utf-8")
    original = translate_speed.decoding_code_fingerprint(str(tmp_path))
    assert original == translate_speed.decoding_code_fingerprint()
    decoding = tmp_path / "trainer_module" / "decoding.py"
    text = decoding.read_text(encoding="utf-8")
    decoding.write_text(text.replace('"""In-graph decoding', '"""In-graph decoding, reworded')
                        + "\n# a comment\n", encoding="utf-8")
    assert translate_speed.decoding_code_fingerprint(str(tmp_path)) == original
    decoding.write_text(text.replace("_NEG_INF = -1e9", "_NEG_INF = -1e8"), encoding="utf-8")
    assert translate_speed.decoding_code_fingerprint(str(tmp_path)) != original

"""Every script in benchmarks/ still imports: the scripts run rarely, so a moved or renamed
module they use would otherwise go unnoticed until the next measurement. Importing runs no
benchmark (each script's work is behind `__main__`). And the decoding-speed benchmark has
measured the decoding code as it is now."""
from __future__ import annotations

import importlib
import os
import sys

import pytest

from helpers import REPO

PACKAGE = "benchmarks"


def benchmark_modules() -> list[str]:
    """The dotted name of every .py file in benchmarks/ (its __init__ as the package)."""
    directory = os.path.join(REPO, PACKAGE)
    return [PACKAGE if name == "__init__.py" else f"{PACKAGE}.{name[:-3]}"
            for name in sorted(os.listdir(directory)) if name.endswith(".py")]


def test_the_benchmark_package_holds_the_scripts():
    modules = benchmark_modules()
    assert {"benchmarks", "benchmarks.quality", "benchmarks.time_curve",
            "benchmarks.plot_curves", "benchmarks.figures"} <= set(modules)


def test_benchmarks_has_no_subpackage():
    """Scripts whose figures are history only are not kept in the tree (docs/benchmarks-history.md
    names the commit and path of each); benchmarks/ is one flat package of today's scripts."""
    directory = os.path.join(REPO, PACKAGE)
    assert not [name for name in os.listdir(directory)
                if os.path.isfile(os.path.join(directory, name, "__init__.py"))]


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

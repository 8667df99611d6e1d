"""The components' code fingerprints: an edit re-runs exactly the components whose code it is."""
from __future__ import annotations

import os
import shutil

import pytest

from pipeline import config as config_lib
from pipeline.code_version import PACKAGES, ROOT, code_version, module_sources
from pipeline.config import TRAINER_MODULE, TRANSFORM_MODULE

TRANSFORM_SOURCES = ["transform_module/__init__.py", "transform_module/preprocessing.py",
                     "transform_module/sentencepiece.py", "transform_module/tokens.py",
                     "transform_module/wordpiece.py"]


def test_transform_is_fingerprinted_by_preprocessing_and_what_it_imports():
    assert module_sources(TRANSFORM_MODULE) == TRANSFORM_SOURCES
    trainer = set(module_sources(TRAINER_MODULE))
    assert {"trainer_module/task.py", "trainer_module/model.py", "trainer_module/hparams.py",
            "trainer_module/export.py", "trainer_module/decoding.py"} <= trainer
    # All of the Trainer's package, and the Transform modules it imports (its preprocessing).
    assert trainer == {f"trainer_module/{name}" for name in
                       os.listdir(os.path.join(ROOT, "trainer_module"))
                       if name.endswith(".py")} | set(TRANSFORM_SOURCES)


def test_the_pipeline_passes_each_component_its_own_fingerprint(tmp_path):
    arguments = config_lib.pipeline_arguments(config_lib.PipelineConfig(
        data_path=str(tmp_path / "fra.txt"), pipeline_root=str(tmp_path / "root")))
    assert arguments["transform_config"]["code_version"] == code_version(TRANSFORM_MODULE)
    assert arguments["trainer_config"]["code_version"] == code_version(TRAINER_MODULE)


def _edit(path: str) -> None:
    with open(path, "a") as f:
        f.write("\n# edited\n")


@pytest.mark.parametrize("edited, transform_changes", [
    ("trainer_module/model.py", False), ("trainer_module/hparams.py", False),
    ("trainer_module/task.py", False), ("trainer_module/__init__.py", False),
    ("transform_module/preprocessing.py", True), ("transform_module/tokens.py", True),
    ("transform_module/wordpiece.py", True), ("transform_module/__init__.py", True)])
def test_an_edit_changes_the_fingerprints_of_the_code_it_is_part_of(tmp_path, edited,
                                                                    transform_changes):
    for package in PACKAGES:
        shutil.copytree(os.path.join(ROOT, package), tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    root = str(tmp_path)
    before = {m: code_version(m, root=root) for m in (TRANSFORM_MODULE, TRAINER_MODULE)}
    _edit(os.path.join(root, edited))
    after = {m: code_version(m, root=root) for m in (TRANSFORM_MODULE, TRAINER_MODULE)}
    assert (after[TRANSFORM_MODULE] != before[TRANSFORM_MODULE]) == transform_changes
    assert after[TRAINER_MODULE] != before[TRAINER_MODULE]  # the Trainer runs all of it


def test_imports_are_followed_in_every_form_and_only_into_the_packages(tmp_path):
    for name, files in {
            "pkg": {"__init__.py": "VERSION = 1\n",
                    "a.py": "import os\nfrom pkg import b, VERSION\n",
                    "b.py": "def f():\n    from pkg.c import X\n    return X\n",
                    "c.py": "import pkg.d\nfrom other.e import Y\nX = Y\n",
                    "d.py": "import elsewhere.f\n",  # not one of the packages
                    "unused.py": "import pkg.a\n"},
            "other": {"__init__.py": "", "e.py": "Y = 1\n", "unused.py": ""},
            "elsewhere": {"__init__.py": "", "f.py": ""}}.items():
        (tmp_path / name).mkdir()
        for file, text in files.items():
            (tmp_path / name / file).write_text(text)
    packages, root = ("pkg", "other"), str(tmp_path)
    assert module_sources("pkg.a", packages, root) == [
        "other/__init__.py", "other/e.py", "pkg/__init__.py", "pkg/a.py", "pkg/b.py", "pkg/c.py",
        "pkg/d.py"]
    version = code_version("pkg.a", packages, root)
    _edit(str(tmp_path / "pkg" / "unused.py"))
    _edit(str(tmp_path / "other" / "unused.py"))
    _edit(str(tmp_path / "elsewhere" / "f.py"))
    assert code_version("pkg.a", packages, root) == version
    _edit(str(tmp_path / "other" / "e.py"))
    assert code_version("pkg.a", packages, root) != version


def test_a_module_outside_the_packages_or_missing_is_refused():
    with pytest.raises(ValueError,
                       match="os.path is not a module of transform_module or trainer_module"):
        module_sources("os.path")
    with pytest.raises(ValueError, match="trainer_module.nowhere has no source file"):
        module_sources("trainer_module.nowhere")

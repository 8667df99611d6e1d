"""The components' code fingerprints: an edit re-runs exactly the components whose code it is."""
from __future__ import annotations

import os
import shutil

import pytest

from pipeline import config as config_lib
from pipeline.code_version import PACKAGE_DIR, code_version, module_sources
from pipeline.config import TRAINER_MODULE, TRANSFORM_MODULE


def test_transform_is_fingerprinted_by_preprocessing_and_what_it_imports():
    assert module_sources(TRANSFORM_MODULE) == ["__init__.py", "preprocessing.py", "tokens.py"]
    trainer = module_sources(TRAINER_MODULE)
    assert {"task.py", "model.py", "hparams.py", "export.py", "decoding.py", "preprocessing.py",
            "tokens.py"} <= set(trainer)
    assert set(trainer) == {name for name in os.listdir(PACKAGE_DIR) if name.endswith(".py")}


def test_the_pipeline_passes_each_component_its_own_fingerprint(tmp_path):
    arguments = config_lib.pipeline_arguments(config_lib.PipelineConfig(
        data_path=str(tmp_path / "fra.txt"), pipeline_root=str(tmp_path / "root")))
    assert arguments["transform_config"]["code_version"] == code_version(TRANSFORM_MODULE)
    assert arguments["trainer_config"]["code_version"] == code_version(TRAINER_MODULE)


def _edit(path: str) -> None:
    with open(path, "a") as f:
        f.write("\n# edited\n")


@pytest.mark.parametrize("edited, transform_changes", [
    ("model.py", False), ("hparams.py", False), ("task.py", False),
    ("preprocessing.py", True), ("tokens.py", True), ("__init__.py", True)])
def test_an_edit_changes_the_fingerprints_of_the_code_it_is_part_of(tmp_path, edited,
                                                                    transform_changes):
    package_dir = str(tmp_path / "trainer_module")
    shutil.copytree(PACKAGE_DIR, package_dir, ignore=shutil.ignore_patterns("__pycache__"))
    before = {m: code_version(m, package_dir=package_dir)
              for m in (TRANSFORM_MODULE, TRAINER_MODULE)}
    _edit(os.path.join(package_dir, edited))
    after = {m: code_version(m, package_dir=package_dir)
             for m in (TRANSFORM_MODULE, TRAINER_MODULE)}
    assert (after[TRANSFORM_MODULE] != before[TRANSFORM_MODULE]) == transform_changes
    assert after[TRAINER_MODULE] != before[TRAINER_MODULE]  # the Trainer runs all of it


def test_imports_are_followed_in_every_form_and_only_into_the_package(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("VERSION = 1\n")
    (package / "a.py").write_text("import os\nfrom pkg import b, VERSION\n")
    (package / "b.py").write_text("def f():\n    from pkg.c import X\n    return X\n")
    (package / "c.py").write_text("import pkg.d\nX = 1\n")
    (package / "d.py").write_text("")
    (package / "unused.py").write_text("import pkg.a\n")
    assert module_sources("pkg.a", "pkg", str(package)) == [
        "__init__.py", "a.py", "b.py", "c.py", "d.py"]
    version = code_version("pkg.a", "pkg", str(package))
    _edit(str(package / "unused.py"))
    assert code_version("pkg.a", "pkg", str(package)) == version
    _edit(str(package / "d.py"))
    assert code_version("pkg.a", "pkg", str(package)) != version


def test_a_module_outside_the_package_or_missing_is_refused(tmp_path):
    with pytest.raises(ValueError, match="os.path is not a module of the trainer_module"):
        module_sources("os.path")
    with pytest.raises(ValueError, match="trainer_module.nowhere has no source file"):
        module_sources("trainer_module.nowhere")

"""The Kubeflow image, as far as it can be checked without a Docker engine: the Dockerfile's
paths and interpreter match what the compiled spec runs, the wheel it installs carries the
schema, its Python 3.10 pins satisfy setup.py, and its build-step check (docker/check_image.py)
covers every executor the specs name and passes in this venv.
"""
from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import REPO
from kfp_launcher import read_spec
from runners import kubeflow_runner
from runners import tensorflow_env
from test_kubeflow import COMPILE_FLAGS, executors, nmt_kubeflow

sys.path.insert(0, os.path.join(REPO, "docker"))
import check_image  # noqa: E402  the Dockerfile's build step

DOCKERFILE = os.path.join(REPO, "Dockerfile")


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


@pytest.fixture(scope="module")
def specs(tmp_path_factory) -> list:
    """kfp, vertex and vertex with Trainer worker pools: every executor an image must run."""
    base = tmp_path_factory.mktemp("image_specs")
    flags = [f for f in COMPILE_FLAGS if f not in ("--trainer-cpu", "8", "--trainer-memory",
                                                   "32G")]
    variants = {"kfp": [], "vertex": ["--backend", "vertex"],
                "workers": ["--backend", "vertex", "--trainer-workers", "2", "--project", "p"]}
    for name, extra in variants.items():
        assert nmt_kubeflow("compile", *flags, *extra, "--output", str(base / f"{name}.yaml")) == 0
    return [read_spec(str(base / f"{name}.yaml")) for name in variants]


def test_the_dockerfile_provides_the_schema_path_and_python_the_spec_uses(specs):
    dockerfile = read(DOCKERFILE)
    for spec in specs:
        schema_file = spec.root.dag.tasks["ImportSchemaGen"].inputs.parameters["schema_file"]
        assert schema_file.runtime_value.constant.string_value == kubeflow_runner.IMAGE_SCHEMA_FILE
        commands = {tuple(e.container.command) for e in executors(spec).values()
                    if e.HasField("container")}
        assert {command[0] for command in commands} == {"python"}
    # The packaged schema is linked to that path, and `python` is what pip installs into.
    assert re.search(r"ln -s \"\$\(python -c 'import schemas; print\(schemas.SCHEMA_FILE\)'\)\" "
                     + re.escape(kubeflow_runner.IMAGE_SCHEMA_FILE), dockerfile)
    assert "python -m pip install --no-cache-dir -c /opt/nmt/constraints-py310.txt" in dockerfile
    assert "python -m pip check" in dockerfile and "python /opt/nmt/check_image.py" in dockerfile
    for name, value in tensorflow_env.DEFAULTS.items():  # as `nmt` sets them locally
        assert f"\nENV {name}={value}\n" in dockerfile
    assert "--ignore-requires-python" not in dockerfile  # the image's Python 3.10 is satisfied
    for source in re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, re.MULTILINE):
        for path in source.split():
            assert os.path.exists(os.path.join(REPO, path)), path


def test_the_image_check_covers_every_executor_the_specs_name(specs):
    named = {e.container.args[list(e.container.args).index("--executor_class_path") + 1]
             for spec in specs for e in executors(spec).values() if e.HasField("container")}
    assert named == set(check_image.EXECUTOR_CLASSES)
    modules = {e.container.command[2] for spec in specs for e in executors(spec).values()
               if e.HasField("container") and e.container.command[1] == "-m"}
    assert modules and modules <= set(check_image.MODULES)


def test_the_image_check_passes_here(capsys):
    """Run against this venv (the image's /pipeline path is the repo's schema here)."""
    from schemas import SCHEMA_FILE

    assert check_image.main(SCHEMA_FILE) == 0, capsys.readouterr().err
    assert check_image.main(os.path.join(REPO, "setup.py")) == 1
    assert "differs from the packaged" in capsys.readouterr().err


def test_the_python_3_10_pins_satisfy_setup_py():
    pins = {}
    for line in read(os.path.join(REPO, "docker", "constraints-py310.txt")).splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    setup = read(os.path.join(REPO, "setup.py"))
    block = setup[setup.index("install_requires=["):setup.index("],", setup.index(
        "install_requires=["))]
    for text in re.findall(r'"([^"]+)"', block):
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} has no pin for the image"
        assert requirement.specifier.contains(pins[name]), (text, pins[name])
    # The versions TFX's own 1.16 image was built with, kept rather than replaced.
    assert {k: pins[k] for k in ("kfp", "protobuf", "google-cloud-aiplatform", "tensorflow",
                                 "tfx")} == {"kfp": "2.5.0", "protobuf": "3.20.3",
                                             "google-cloud-aiplatform": "1.70.0",
                                             "tensorflow": "2.16.2", "tfx": "1.16.0"}


def test_the_wheel_the_image_installs_contains_the_schema(tmp_path):
    """Built as the Dockerfile does, from what .dockerignore lets into the build context."""
    ignored = [line.strip().removeprefix("**/") for line in
               read(os.path.join(REPO, ".dockerignore")).splitlines()
               if line.strip() and not line.startswith("#")]
    source = tmp_path / "src"
    shutil.copytree(REPO, source, ignore=lambda _, names: [
        n for n in names if any(fnmatch.fnmatch(n, pattern) for pattern in ignored)])
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path / "wheels"), str(source)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    [wheel] = os.listdir(tmp_path / "wheels")
    names = zipfile.ZipFile(tmp_path / "wheels" / wheel).namelist()
    assert "schemas/schema.pbtxt" in names
    assert {"runners/kubeflow_runner.py", "trainer_module/task.py",
            "components/fra_example_gen/executor.py"} <= set(names)
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/"))]

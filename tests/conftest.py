"""Shared fixtures: small samples of the real fra.txt (via $FRA_TXT) and pipeline helpers."""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def fra_txt() -> str:
    """The shared fra.txt. Tests that need it fail (never skip) when it is missing."""
    path = os.environ.get("FRA_TXT")
    if not path or not os.path.isfile(path):
        pytest.fail(f"FRA_TXT must point to fra.txt (got {path!r}); e.g. "
                    "FRA_TXT=../shared/data/fra-eng/fra.txt make test")
    return os.path.abspath(path)


def sample_lines(path: str, block: int = 100, every: int = 50) -> list[bytes]:
    """Contiguous blocks of lines spread over the file, so sentences keep all references."""
    with open(path, "rb") as f:
        lines = f.readlines()
    return [line for i, line in enumerate(lines) if (i // block) % every == 0]


@pytest.fixture(scope="session")
def fra_sample(fra_txt, tmp_path_factory) -> str:
    """About 3,400 lines of the real file, in a directory of its own."""
    path = tmp_path_factory.mktemp("fra_sample") / "fra.txt"
    path.write_bytes(b"".join(sample_lines(fra_txt)))
    return str(path)


def run_nmt(*args: str, env: dict | None = None, timeout: float = 900,
            **kwargs) -> subprocess.CompletedProcess:
    """Runs the `nmt` CLI in a fresh process, as a user would."""
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=REPO,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def open_store(pipeline_root: str):
    import ml_metadata as mlmd
    from ml_metadata.proto import metadata_store_pb2

    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = os.path.join(pipeline_root, "metadata.sqlite")
    return mlmd.MetadataStore(config)


def latest_artifact(store, type_name: str, producer: str | None = None):
    """The newest artifact of a type, optionally only those written by one component."""
    artifacts = [a for a in store.get_artifacts_by_type(type_name)
                 if producer is None or f"/{producer}/" in a.uri]
    return max(artifacts, key=lambda a: a.id)


@dataclasses.dataclass
class SmokeRun:
    """A smoke-profile pipeline root after its first complete run."""
    root: str
    killed_log: str  # the first attempt, killed during training
    log: str  # the re-run that resumed training and pushed
    examples_uri: str
    evaluation_uri: str
    pushed_version: str


SMOKE_TRAIN_STEPS = 200


def smoke_args(fra_sample: str, root: str, train_steps: int) -> list[str]:
    return ["run", "--data", fra_sample, "--pipeline-root", root, "--profile", "smoke",
            "--train-steps", str(train_steps)]


@pytest.fixture(scope="session")
def smoke_run(fra_sample, tmp_path_factory) -> SmokeRun:
    """`nmt run --profile smoke` through Pusher, killed once during training and re-run."""
    root = str(tmp_path_factory.mktemp("smoke"))
    args = smoke_args(fra_sample, root, SMOKE_TRAIN_STEPS)
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", *args], cwd=REPO,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    killed_log = []
    for line in proc.stderr:
        killed_log.append(line)
        if "Checkpoint at step 40" in line:
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    resumed = run_nmt(*args)
    assert resumed.returncode == 0, resumed.stderr[-5000:]
    store = open_store(root)
    return SmokeRun(
        root=root, killed_log="".join(killed_log), log=resumed.stderr,
        examples_uri=latest_artifact(store, "Examples", "FraTxtExampleGen").uri,
        evaluation_uri=latest_artifact(store, "ModelEvaluation").uri,
        pushed_version=latest_artifact(store, "PushedModel").custom_properties[
            "pushed_version"].string_value)


@pytest.fixture(scope="session")
def smoke_rerun(smoke_run, fra_sample) -> subprocess.CompletedProcess:
    """A second run whose candidate trains for 2 steps only: worse, partly cached."""
    result = run_nmt(*smoke_args(fra_sample, smoke_run.root, 2))
    assert result.returncode == 0, result.stderr[-5000:]
    return result

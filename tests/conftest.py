"""Shared fixtures: small samples of the real fra.txt (via $FRA_TXT) and pipeline helpers."""
from __future__ import annotations

import os
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

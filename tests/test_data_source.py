"""Where fra.txt comes from: flag, $FRA_TXT, or a verified download with a clear failure."""
from __future__ import annotations

import functools
import gzip
import http.server
import io
import os
import threading
import zipfile

import pytest

from components.fra_example_gen import parser
from helpers import run_nmt
from pipeline import data_source
from pipeline.config import PipelineConfig, split_data_path


@pytest.fixture
def serve(tmp_path):
    """Serves files from a temporary directory on 127.0.0.1; yields base URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def write_zip(path, fra_txt: bytes) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("fra.txt", fra_txt)
        archive.writestr("_about.txt", "test")
    path.write_bytes(buffer.getvalue())


def test_flag_wins_over_environment(tmp_path, monkeypatch):
    flag, env = tmp_path / "a.txt", tmp_path / "b.txt"
    flag.write_text("Go.\tVa !\n")
    env.write_text("Hi.\tSalut !\n")
    monkeypatch.setenv("FRA_TXT", str(env))
    assert data_source.resolve_data_path(str(flag)) == str(flag)
    assert data_source.resolve_data_path(None) == str(env)


def test_missing_file_names_the_flag(tmp_path):
    with pytest.raises(data_source.DataSourceError, match="--data points to .*not a file"):
        data_source.resolve_data_path(str(tmp_path / "nope.txt"))


def test_unreachable_download_fails_with_one_clear_sentence(tmp_path):
    env = {"FRA_TXT": "", "XDG_CACHE_HOME": str(tmp_path),
           "NMT_DATA_URL": "http://127.0.0.1:9/fra-eng.zip"}  # port 9: nothing listens
    result = run_nmt("run", env=env, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(
        "nmt: error: Could not download fra.txt from http://127.0.0.1:9/fra-eng.zip")
    assert "pass --data PATH or set FRA_TXT" in result.stderr
    assert "Traceback" not in result.stderr


def test_wrong_checksum_is_refused(serve, tmp_path, monkeypatch):
    monkeypatch.delenv("FRA_TXT", raising=False)
    directory, url = serve
    write_zip(directory / "fra-eng.zip", b"Go.\tVa !\n")
    with pytest.raises(data_source.DataSourceError, match="sha256 .* expected 0bb85dba"):
        data_source.resolve_data_path(None, cache_dir=str(tmp_path / "cache"),
                                      url=f"{url}/fra-eng.zip")
    assert not (tmp_path / "cache" / "fra-eng" / "fra.txt").exists()


def test_verified_download_is_cached(serve, tmp_path, fra_txt, monkeypatch):
    monkeypatch.delenv("FRA_TXT", raising=False)
    directory, url = serve
    with open(fra_txt, "rb") as f:
        write_zip(directory / "fra-eng.zip", f.read())
    cache = str(tmp_path / "cache")
    path = data_source.resolve_data_path(None, cache_dir=cache, url=f"{url}/fra-eng.zip")
    assert path == os.path.join(cache, "fra-eng", "fra.txt")
    assert data_source.sha256_of(path) == data_source.FRA_TXT_SHA256
    os.remove(directory / "fra-eng.zip")  # a second call must not need the network
    assert data_source.resolve_data_path(None, cache_dir=cache, url=f"{url}/fra-eng.zip") == path


def test_a_directory_or_a_glob_of_plain_and_gzip_files_is_accepted(tmp_path):
    (tmp_path / "a.txt").write_text("Go.\tVa !\n")
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(b"Hi.\tSalut !\n"))
    (tmp_path / "empty.txt").write_bytes(b"")  # an empty shard among others is fine
    assert data_source.resolve_data_path(str(tmp_path)) == str(tmp_path / "*")
    assert data_source.resolve_data_path(str(tmp_path / "*.gz")) == str(tmp_path / "*.gz")
    config = PipelineConfig(data_path=str(tmp_path / "*.gz"))
    assert (config.data_root, config.data_file_pattern) == (str(tmp_path), "*.gz")


@pytest.mark.parametrize("path, root, pattern", [
    ("/d/fra.txt", "/d", "fra.txt"),
    ("/d/*", "/d", "*"),
    ("gs://b/x/*/part-*.gz", "gs://b/x", "*/part-*.gz"),
    ("gs://b/fra.txt", "gs://b", "fra.txt"),
    ("fra.txt", ".", "fra.txt"),  # a bare name: the working directory
])
def test_the_data_path_splits_into_example_gen_root_and_pattern(path, root, pattern):
    assert split_data_path(path) == (root, pattern)


def test_an_input_matching_nothing_or_only_empty_files_is_refused(tmp_path):
    with pytest.raises(data_source.DataSourceError, match="a directory with no files"):
        data_source.resolve_data_path(str(tmp_path))
    with pytest.raises(data_source.DataSourceError, match="which matches no file"):
        data_source.resolve_data_path(str(tmp_path / "*.txt"))
    (tmp_path / "a.txt").write_bytes(b"")
    (tmp_path / "b.txt").write_bytes(b"")
    with pytest.raises(parser.InputDataError, match=r"Every file matching .*\* is empty"):
        data_source.resolve_data_path(str(tmp_path))

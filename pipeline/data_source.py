"""Where the input comes from: the --data flag, else $FRA_TXT, else a verified download of
fra.txt. A flag or $FRA_TXT may name a file, a directory (all its files), a glob or numbered
spans (DIR/fra-{SPAN}.txt: the newest, or the newest N), plain or .gz, local or on an object
store (gs://...)."""
from __future__ import annotations

import glob
import hashlib
import io
import logging
import os
import urllib.error
import urllib.request
import zipfile

from components.fra_example_gen import fingerprint, parser, spans

_LOG = logging.getLogger(__name__)

FRA_TXT_ENV = "FRA_TXT"
DATA_URL_ENV = "NMT_DATA_URL"  # mirrors / tests; the canonical address otherwise
CANONICAL_URL = "https://storage.googleapis.com/download.tensorflow.org/data/fra-eng.zip"
FRA_TXT_SHA256 = "0bb85dbaa1c896844649094d7eaf2e34bee34e84fe362b26ce7e8f2e12aae104"
_HINT = "pass --data PATH or set FRA_TXT to a local copy of fra.txt"


class DataSourceError(RuntimeError):
    """fra.txt could not be found or fetched; the message says what to do."""


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "nmt")


def sha256_of(path: str) -> str:
    with open(path, "rb") as f:
        return fingerprint.sha256_of_stream(f)


def is_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


def resolve_data_path(flag: str | None = None, cache_dir: str | None = None,
                      url: str | None = None, timeout_s: float = 30.0,
                      newest_spans: int = 1) -> str:
    """The input to read, a file, a glob (a directory becomes DIR/*) or a {SPAN} pattern
    (of which ExampleGen reads the `newest_spans` newest spans), downloading fra.txt only as
    a last resort."""
    for source, path in (("--data", flag), (FRA_TXT_ENV, os.environ.get(FRA_TXT_ENV))):
        if path:
            _check_span_pattern(source, path, newest_spans)
            return (_remote_input(path) if "://" in path
                    else _local_input(source, path, newest_spans))
    _check_span_pattern("the downloaded", "fra.txt", newest_spans)
    return download_fra_txt(cache_dir or default_cache_dir(),
                            url or os.environ.get(DATA_URL_ENV) or CANONICAL_URL, timeout_s)


def _check_span_pattern(source: str, path: str, newest_spans: int) -> None:
    """Refuses a {SPAN} pattern TFX would, and the newest N spans of an input without spans."""
    try:
        spans.check_pattern(path)
    except spans.SpanPatternError as err:
        raise DataSourceError(f"{source} {path!r} {err.problem}.") from err
    if newest_spans > 1 and not spans.has_span(path):
        raise DataSourceError(f"--spans {newest_spans} reads the newest of numbered files "
                              f"(--data 'DIR/fra-{{SPAN}}.txt'), but {source} {path!r} has no "
                              "{SPAN}.")


def _span_files(source: str, pattern: str, newest_spans: int) -> list[str]:
    """The files of the spans ExampleGen will read: the newest of those a local pattern finds."""
    try:
        found = spans.find_spans(pattern, [f for f in glob.glob(spans.files_glob(pattern))
                                           if os.path.isfile(f)])
    except spans.SpanPatternError as err:
        raise DataSourceError(f"{source} {pattern!r} {err.problem}.") from err
    if not found:
        raise DataSourceError(f"{source} {pattern!r} matches no file; {_HINT}.")
    return [f for span in spans.newest(found, newest_spans) for f in found[span]]


def _remote_input(path: str) -> str:
    """gs://, s3://...: ExampleGen reads it at run time (and says if nothing matches)."""
    if spans.has_span(path):
        return path
    if path.endswith("/"):
        return path + "*"
    if not is_glob(path):
        from tfx.dsl.io import fileio  # TensorFlow's file systems: only for remote input

        if fileio.isdir(path):
            return path + "/*"
    return path


def _local_input(source: str, path: str, newest_spans: int) -> str:
    """Checks a local input before TFX starts: files exist, are text or .gz, are not empty."""
    path = os.path.abspath(path)
    if spans.has_span(path):
        pattern, files = path, _span_files(source, path, newest_spans)
    else:
        if os.path.isdir(path):
            pattern = os.path.join(path, "*")
            what = f"{source} points to {path!r}, a directory with no files in it"
        elif is_glob(path):
            pattern, what = path, f"{source} is {path!r}, which matches no file"
        elif not os.path.isfile(path):
            raise DataSourceError(f"{source} points to {path!r}, which is not a file; {_HINT}.")
        else:
            pattern, what = path, ""
        files = sorted(f for f in glob.glob(pattern) if os.path.isfile(f))
        if not files:
            raise DataSourceError(f"{what}; {_HINT}.")

    def head(file: str) -> bytes:
        with open(file, "rb") as f:
            return f.read(8)

    # empty, compressed without .gz...: say so before TFX starts
    parser.check_input([(f, os.path.getsize(f)) for f in files], head, pattern)
    return pattern


def download_fra_txt(cache_dir: str, url: str, timeout_s: float) -> str:
    """Fetches fra-eng.zip once into `cache_dir` and checks fra.txt's sha256."""
    target = os.path.join(cache_dir, "fra-eng", "fra.txt")
    if os.path.isfile(target) and sha256_of(target) == FRA_TXT_SHA256:
        _LOG.info("Using the cached %s (sha256 verified).", target)
        return target
    _LOG.info("Downloading %s into %s ...", url, cache_dir)
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            archive = zipfile.ZipFile(io.BytesIO(response.read()))
        data = archive.read("fra.txt")
    except (urllib.error.URLError, OSError, zipfile.BadZipFile, KeyError) as err:
        raise DataSourceError(f"Could not download fra.txt from {url} ({err}); {_HINT}.") from err
    digest = hashlib.sha256(data).hexdigest()
    if digest != FRA_TXT_SHA256:
        raise DataSourceError(f"fra.txt downloaded from {url} has sha256 {digest}, expected "
                              f"{FRA_TXT_SHA256}; {_HINT}.")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    partial = target + ".partial"
    with open(partial, "wb") as f:
        f.write(data)
    os.replace(partial, target)  # atomic: a reader never sees half a file
    return target

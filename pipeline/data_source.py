"""Where fra.txt comes from: the --data flag, else $FRA_TXT, else a verified download."""
from __future__ import annotations

import hashlib
import io
import logging
import os
import urllib.error
import urllib.request
import zipfile

from components.fra_example_gen import parser

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
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def resolve_data_path(flag: str | None = None, cache_dir: str | None = None,
                      url: str | None = None, timeout_s: float = 30.0) -> str:
    """Returns the absolute path of fra.txt to use, downloading it only as a last resort."""
    for source, path in (("--data", flag), (FRA_TXT_ENV, os.environ.get(FRA_TXT_ENV))):
        if path:
            if "://" in path:  # gs://, s3://...: TFX's filesystem reads it at run time
                return path
            if os.path.isdir(path):
                raise DataSourceError(f"{source} points to {path!r}, which is a directory; "
                                      "pass the fra.txt file inside it.")
            if not os.path.isfile(path):
                raise DataSourceError(f"{source} points to {path!r}, which is not a file; "
                                      f"{_HINT}.")
            with open(path, "rb") as f:  # empty or compressed: say so before TFX starts
                parser.check_file_start(path, f.read(8))
            return os.path.abspath(path)
    return download_fra_txt(cache_dir or default_cache_dir(),
                            url or os.environ.get(DATA_URL_ENV) or CANONICAL_URL, timeout_s)


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

"""What identifies the input's content: one digest per file, and the manifest that lists them.

One helper for every caller: the download check (pipeline/data_source.py), the component's
driver (its digests are ExampleGen's cache key) and the executor (which reuses the driver's
digests instead of hashing the same bytes again). Pure Python at import, so the CLI can use it
without loading Beam or TensorFlow.
"""
from __future__ import annotations

import hashlib
from typing import BinaryIO, Iterable, Mapping

BLOCK_BYTES = 1 << 20
# Object stores whose Beam FileSystems.checksum() is a checksum of the content, kept by the
# store itself (GCS: the object's crc32c), so fingerprinting never downloads the object.
# Beam's local filesystem answers the file size there instead: local files are hashed.
STORE_CHECKSUM_SCHEMES = frozenset({"gs"})


def sha256_of_stream(stream: BinaryIO) -> str:
    """The sha256 (hex) of everything left in a binary stream, read in bounded blocks."""
    digest = hashlib.sha256()
    for block in iter(lambda: stream.read(BLOCK_BYTES), b""):
        digest.update(block)
    return digest.hexdigest()


def scheme(path: str) -> str:
    """'gs' for gs://bucket/x, '' for a local path."""
    return path.split("://", 1)[0] if "://" in path else ""


def file_digest(path: str, size_bytes: int,
                checksum_schemes: frozenset[str] = STORE_CHECKSUM_SCHEMES) -> str:
    """'sha256:HEX' of the raw (still compressed) bytes, or on an object store listed in
    `checksum_schemes` 'store:SIZE:CHECKSUM' from the object's metadata, without reading it."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    if scheme(path) in checksum_schemes:
        return f"store:{size_bytes}:{FileSystems.checksum(path)}"
    # UNCOMPRESSED: hash a .gz file's own bytes, not (slower) its decompressed text.
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f"sha256:{sha256_of_stream(f)}"


def format_manifest(digests: Mapping[str, str]) -> str:
    """'PATH DIGEST' lines in path order: the driver's part of the input fingerprint."""
    return "\n".join(f"{path} {digest}" for path, digest in sorted(digests.items()))


def parse_manifest(text: str) -> dict[str, str]:
    """The digests in a fingerprint written with `format_manifest`; other lines (TFX's own
    'split:...,num_files:...' summary) are skipped."""
    digests = {}
    for line in text.splitlines():
        path, _, digest = line.rpartition(" ")
        if path and digest.startswith(("sha256:", "store:")):
            digests[path] = digest
    return digests


def input_summary(pattern: str, sizes: Mapping[str, int], digests: Mapping[str, str]
                  ) -> dict[str, str | int]:
    """Path, size and sha256 of the input, for lineage ('which fra.txt made this model?').

    One plain file: its own sha256 (fra.txt's is the one data_source checks downloads against).
    Several files, or an object store's checksum: the sha256 of the manifest, which changes
    when any file's content does.
    """
    paths = sorted(digests)
    if len(paths) == 1 and digests[paths[0]].startswith("sha256:"):
        path, sha256 = paths[0], digests[paths[0]].removeprefix("sha256:")
    else:
        path = pattern
        sha256 = hashlib.sha256(format_manifest(digests).encode("utf-8")).hexdigest()
    return {"path": path, "size_bytes": sum(sizes[p] for p in paths), "sha256": sha256}


def reuse_or_compute(paths_and_sizes: Iterable[tuple[str, int]], known: Mapping[str, str]
                     ) -> dict[str, str]:
    """Each file's digest: the one the driver recorded this run if there is one, else computed
    (KFP runs its own driver, which records none)."""
    return {path: known.get(path) or file_digest(path, size) for path, size in paths_and_sizes}

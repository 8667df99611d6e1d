"""Values as ML Metadata stores them (times in milliseconds, typed property values, JSON text),
as Python's, and Python's as people read them."""
from __future__ import annotations

import contextlib
import datetime
import json
from typing import Any

from google.protobuf import json_format
from ml_metadata.proto import metadata_store_pb2

def iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).astimezone() \
        .isoformat(timespec="seconds")


def seconds(start_ms: int, end_ms: int) -> float:
    return round((end_ms - start_ms) / 1000, 1)


def _value(value: metadata_store_pb2.Value) -> Any:
    kind = value.WhichOneof("value")
    if kind == "struct_value":
        return json_format.MessageToDict(value.struct_value)
    return getattr(value, kind) if kind in ("int_value", "double_value", "string_value",
                                            "bool_value") else None


def custom_properties(
        item: metadata_store_pb2.Artifact | metadata_store_pb2.Execution) -> dict[str, Any]:
    return {key: _value(value) for key, value in sorted(item.custom_properties.items())}


def parsed(text: Any) -> Any:
    """Exec properties hold protos and dicts as JSON text: parsed, so they diff key by key."""
    if isinstance(text, str) and text[:1] in "{[":
        with contextlib.suppress(ValueError):
            return json.loads(text)
    return text


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}, "c": [2]} -> {"a.b": 1, "c.0": 2}: nested values compared (diff) and
    printed (tables) key by key."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, item in items:
        flat.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def as_text(value: Any) -> str:
    """One value as people read it: "-" for none, yes/no, 4 significant digits, k=v lists."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ",".join(map(as_text, value))
    if isinstance(value, dict):
        return ", ".join(f"{k}={as_text(v)}" for k, v in flatten(value).items())
    return str(value)

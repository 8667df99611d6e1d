"""Pusher's publishing: integer versions that only increase, never a half-written one.
Racing pushers, failed copies and object stores: test_faults.py."""
from __future__ import annotations

import os
import time

from components import atomic_pusher, serving_versions
from helpers import make_model_dir


def test_versions_increase_even_within_one_second(tmp_path):
    model = make_model_dir(tmp_path / "model")
    base = str(tmp_path / "serving")
    first, path = atomic_pusher.publish(model, base)
    second, _ = atomic_pusher.publish(model, base)
    assert first >= int(time.time()) - 5 and second == first + 1
    assert serving_versions.pushed_versions(base) == [first, second]
    assert sorted(os.listdir(base)) == [str(first), str(second)]  # no staging left behind
    assert open(os.path.join(path, "saved_model.pb"), "rb").read() == b"graph"
    assert os.path.isfile(os.path.join(path, "variables", "variables.index"))


def test_a_newer_existing_version_is_respected(tmp_path):
    base = tmp_path / "serving"
    make_model_dir(base / "9999999999")  # e.g. pushed by a clock that runs ahead
    (base / "notes").mkdir()
    version, _ = atomic_pusher.publish(make_model_dir(tmp_path / "model"), str(base))
    assert version == 10_000_000_000
    assert serving_versions.pushed_versions(str(base)) == [9999999999, 10_000_000_000]


def test_readers_never_see_a_partial_version(tmp_path, monkeypatch):
    """While the copy runs, only a hidden staging directory exists; the version appears whole."""
    base = tmp_path / "serving"
    seen_during_copy = []
    copy_dir = atomic_pusher.io_utils.copy_dir

    def observing_copy(src, dst, *args, **kwargs):
        copy_dir(src, dst, *args, **kwargs)
        seen_during_copy.extend(serving_versions.pushed_versions(str(base)))

    monkeypatch.setattr(atomic_pusher.io_utils, "copy_dir", observing_copy)
    version, _ = atomic_pusher.publish(make_model_dir(tmp_path / "model"), str(base))
    assert seen_during_copy == []
    assert serving_versions.pushed_versions(str(base)) == [version]

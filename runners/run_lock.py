"""One `nmt run` at a time per pipeline root.

Two runs sharing a root (a cron job overlapping a manual run) would share SQLite ML Metadata,
the checkpoint directory and the serving directory. The second one stops at once, naming the
first. Light on imports, so `nmt run` can refuse before loading TFX.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
from typing import Iterator

LOCK_FILE = ".nmt-run.lock"


class RunError(RuntimeError):
    """The run cannot start or did not finish, for a reason the message gives in one line."""


@contextlib.contextmanager
def pipeline_root_lock(pipeline_root: str) -> Iterator[None]:
    """Holds an exclusive lock on the pipeline root (the kernel releases it if the process
    dies, so a killed run never blocks the next), or raises RunError naming the holder."""
    os.makedirs(pipeline_root, exist_ok=True)
    with open(os.path.join(pipeline_root, LOCK_FILE), "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise RunError(f"Another nmt run ({holder}) is using the pipeline root "
                           f"{pipeline_root}; wait for it to finish or pass another "
                           "--pipeline-root.") from None
        lock.truncate(0)
        lock.write(f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}")
        lock.flush()
        try:
            yield
        finally:
            lock.truncate(0)

"""What `nmt` spares its Python interpreter: garbage-collector passes over the imports, and
the teardown at exit. TensorFlow, TFX and Beam import millions of objects that live as long as
the process; the collector's full passes walk all of them again and again, and at exit the
interpreter frees them one by one. Neither does anything a user can see (time saved:
BENCHMARKS.md, today's figures).

Importing this module imports nothing heavy.
"""
from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from typing import NoReturn


def freeze_imports() -> None:
    """Moves every object alive now to the collector's permanent generation, which its passes
    skip. Call it once the heavy imports are done (freezing garbage would keep it)."""
    gc.freeze()


def exit_now(code: int) -> NoReturn:
    """Ends the process with `code` as `sys.exit` would, without freeing every object first:
    logs and the standard streams are flushed and exit handlers (temporary files, loggers) run.
    A process with other threads still working exits the usual way, after them."""
    if any(thread.is_alive() and not thread.daemon and thread is not threading.main_thread()
           for thread in threading.enumerate()):
        sys.exit(code)
    # What sys.exit would run: logging's shutdown (which flushes the logs) is among them.
    atexit._run_exitfuncs()  # pylint: disable=protected-access
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a full disk, a closed pipe: failed, as sys.exit says
            code = code or 120
    os._exit(code)

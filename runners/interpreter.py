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
    """Ends the process with `code`, as `sys.exit` would but without freeing every object
    first: the exit handlers run (logging's shutdown, which flushes the logs, temporary
    files) and the standard streams are flushed. A process with other threads still working
    exits the usual way, after them."""
    if any(thread.is_alive() and not thread.daemon and thread is not threading.main_thread()
           for thread in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()  # pylint: disable=protected-access
    for stream in (sys.stdout, sys.stderr):
        if stream is None or stream.closed:
            continue
        try:
            stream.flush()
        except OSError as err:  # a reader gone, a full disk: the interpreter's status 120
            code = 120
            _tell(f"Could not write the output: {err}")
    os._exit(code)


def _tell(message: str) -> None:
    try:
        os.write(2, f"{message}\n".encode())
    except OSError:
        pass

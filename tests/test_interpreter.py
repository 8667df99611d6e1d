"""runners/interpreter.py: `nmt`'s early exit loses nothing a normal exit keeps."""
from __future__ import annotations

import os
import subprocess
import sys

from helpers import REPO


def _python(code: str, **kwargs) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.Popen([sys.executable, "-c", "from runners import interpreter\n" + code],
                            cwd=REPO, env=env, text=True, **kwargs)


def test_exit_now_keeps_the_code_the_buffered_output_and_the_exit_handlers(tmp_path):
    marker = tmp_path / "handler_ran"
    # The log line is held in memory until logging's shutdown flushes it.
    child = _python("import atexit, logging, logging.handlers\n"
                    f"atexit.register(lambda: open({str(marker)!r}, 'w').write('ran'))\n"
                    "logging.getLogger('nmt').addHandler(logging.handlers.MemoryHandler(\n"
                    "    100, target=logging.StreamHandler()))\n"
                    "logging.getLogger('nmt').warning('logged')\n"
                    "print('x' * 100_000, end='')\n"
                    "interpreter.exit_now(3)\n",
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 3
    assert out == "x" * 100_000
    assert err == "logged\n"
    assert marker.read_text() == "ran"


def test_exit_now_skips_the_teardown_that_sys_exit_does(tmp_path):
    """The time it saves: objects are not freed one by one (a __del__ at teardown never
    runs), where sys.exit frees them."""
    code = ("class Freed:\n"
            "    def __del__(self, open=open):  # builtins may be gone by then\n"
            "        open({path!r}, 'w').write('freed')\n"
            "kept = Freed()\n"
            "{exit}(0)\n")
    for exit_with, path in (("interpreter.exit_now", tmp_path / "exit_now"),
                            ("import sys; sys.exit", tmp_path / "sys_exit")):
        child = _python(code.format(path=str(path), exit=exit_with))
        assert child.wait(timeout=60) == 0
    assert not (tmp_path / "exit_now").exists()
    assert (tmp_path / "sys_exit").read_text() == "freed"


def test_exit_now_waits_for_a_thread_still_working(tmp_path):
    written = tmp_path / "written_by_the_thread"
    child = _python("import threading, time\n"
                    "def work():\n"
                    "    time.sleep(1)\n"
                    f"    open({str(written)!r}, 'w').write('done')\n"
                    "threading.Thread(target=work).start()\n"
                    "interpreter.exit_now(0)\n")
    assert child.wait(timeout=60) == 0
    assert written.read_text() == "done"


def test_output_that_cannot_be_written_fails_the_exit_as_sys_exit_would():
    child = _python("import sys\n"
                    "sys.stdin.readline()\n"  # the reader has gone by now
                    "print('a translation')\n"
                    "interpreter.exit_now(0)\n",
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()
    child.stdin.write("go\n")
    child.stdin.close()
    assert child.wait(timeout=60) == 120
    assert "Could not write the output: [Errno 32] Broken pipe" in child.stderr.read()


def test_a_stream_closed_by_the_program_is_not_a_failure():
    child = _python("import sys\n"
                    "sys.stdout.close()\n"
                    "interpreter.exit_now(0)\n", stdout=subprocess.PIPE)
    child.communicate(timeout=60)
    assert child.returncode == 0

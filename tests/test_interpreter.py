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
    child = _python("import atexit, logging\n"
                    f"atexit.register(lambda: open({str(marker)!r}, 'w').write('ran'))\n"
                    "logging.basicConfig(format='%(message)s')\n"
                    "logging.getLogger('nmt').warning('logged')\n"
                    "print('x' * 100_000, end='')\n"
                    "interpreter.exit_now(3)\n",
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 3
    assert out == "x" * 100_000
    assert err == "logged\n"
    assert marker.read_text() == "ran"


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
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    child.stdout.close()
    child.stdin.write("go\n")
    child.stdin.close()
    assert child.wait(timeout=60) == 120

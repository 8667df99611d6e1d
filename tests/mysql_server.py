"""A throwaway MariaDB server for the tests: its own data directory, port and socket, started as
a child process and stopped afterwards, so that MySQL-backed ML Metadata is tested for real
and without any system service. Debian's mariadb-server package provides the binaries
(`make mariadb` installs it; CI's `make test` does).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Iterator

from ml_metadata.proto import metadata_store_pb2

INSTALL_HINT = "install Debian's mariadb-server (`make mariadb`, which `make test` runs)"
_SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin"])
START_TIMEOUT_S = 120


class MariaDBError(RuntimeError):
    """MariaDB is missing or did not start: the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class MariaDB:
    """A running server and the account the tests use (a password, as a real one has)."""
    host: str
    port: int
    socket: str
    user: str
    password: str

    def config(self, database: str) -> metadata_store_pb2.ConnectionConfig:
        """A store in `database`, which MLMD creates on first connection (for writers)."""
        config = metadata_store_pb2.ConnectionConfig()
        mysql = config.mysql
        mysql.host, mysql.port, mysql.database = self.host, self.port, database
        mysql.user, mysql.password = self.user, self.password
        return config


def _binary(*names: str) -> str:
    for name in names:
        if found := shutil.which(name, path=_SEARCH_PATH):
            return found
    raise MariaDBError(f"MariaDB is not installed (none of {', '.join(names)} found): "
                       f"{INSTALL_HINT}.")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _accepts_connections(port: int) -> bool:
    """The server's first packet is its handshake: protocol version 10 after the 4-byte header
    (an error packet, 0xff, would mean it refuses us)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            return s.recv(5)[4:5] == b"\x0a"
    except OSError:
        return False


def _log_tail(path: str) -> str:
    with contextlib.suppress(OSError), open(path, errors="replace") as f:
        return f.read()[-3000:]
    return ""


@contextlib.contextmanager
def mariadb(user: str = "nmt", password: str = "nmt-test-password") -> Iterator[MariaDB]:
    """MariaDB on a free 127.0.0.1 port and a socket in a fresh data directory (a short /tmp
    path: socket paths are limited to about 100 bytes), killed and removed on exit."""
    server = _binary("mariadbd", "mysqld")
    install = _binary("mariadb-install-db", "mysql_install_db")
    as_root = ["--user=root"] if os.geteuid() == 0 else []  # mariadbd refuses root otherwise
    small = ["--innodb-log-file-size=8M", "--innodb-buffer-pool-size=32M"]
    workdir = tempfile.mkdtemp(prefix="nmt-mariadb-")
    datadir, sock = os.path.join(workdir, "data"), os.path.join(workdir, "mysqld.sock")
    log, init = os.path.join(workdir, "error.log"), os.path.join(workdir, "init.sql")
    process = None
    try:
        installed = subprocess.run(
            [install, "--no-defaults", f"--datadir={datadir}", "--skip-test-db",
             "--auth-root-authentication-method=normal", *as_root, *small],
            capture_output=True, text=True, timeout=300)
        if installed.returncode != 0:
            raise MariaDBError(f"{install} failed ({installed.returncode}): "
                               f"{(installed.stderr or installed.stdout)[-3000:]}")
        with open(init, "w") as f:  # runs before the server accepts connections
            f.write(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}';\n"
                    f"GRANT ALL PRIVILEGES ON *.* TO '{user}'@'%';\n")
        port = _free_port()
        process = subprocess.Popen(
            [server, "--no-defaults", f"--datadir={datadir}", f"--socket={sock}",
             f"--port={port}", "--bind-address=127.0.0.1", "--skip-networking=0",
             f"--pid-file={os.path.join(workdir, 'mysqld.pid')}", f"--log-error={log}",
             f"--tmpdir={workdir}", f"--init-file={init}", "--skip-log-bin",
             "--performance-schema=OFF", "--skip-name-resolve", *as_root, *small],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _accepts_connections(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise MariaDBError(f"{server} did not start (exit status {process.poll()}): "
                                   f"{_log_tail(log)}")
            time.sleep(0.2)
        yield MariaDB("127.0.0.1", port, sock, user, password)
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(workdir, ignore_errors=True)

"""A PostgreSQL server of a test module's own, so the tests may stop and restart it.

The shared test server cannot be restarted under the other suites' feet, so the fault tests run
``initdb`` and ``pg_ctl`` themselves (PostgreSQL 15's binaries, on a free port, its socket in its own
folder). PostgreSQL refuses to run as root, and the tests run as root on the project's machines, so the
server runs as ``nobody`` (``setpriv``) in a folder given to that user.

>>> server = PrivatePostgres.start()
>>> url = server.fresh_database_url()
>>> server.restart()          # every open connection dies; the data stays
>>> server.close()
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg

BIN = Path("/usr/lib/postgresql/15/bin")
NOBODY = 65534


class PrivateServerUnavailable(Exception):
    """The PostgreSQL binaries are missing or cannot be run (the message says why)."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PrivatePostgres:
    """One throwaway cluster: :meth:`stop` / :meth:`start_again` keep its port, so URLs stay valid."""

    def __init__(self, folder: Path, port: int, bin_dir: Path = BIN) -> None:
        self.bin = bin_dir
        self.folder = folder
        self.port = port
        self.data = folder / "data"
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    @classmethod
    def start(cls, bin_dir: Path = BIN, port: int | None = None) -> PrivatePostgres:
        """``initdb`` a fresh cluster in a new folder and start it (on ``port``, else a free one)."""
        if not (bin_dir / "initdb").exists():
            raise PrivateServerUnavailable(f"PostgreSQL's binaries are not installed in {bin_dir}")
        # Not under pytest's tmp_path: its parents are readable by root only, and the server runs as nobody.
        folder = Path(tempfile.mkdtemp(prefix="cs-private-pg-"))
        server = cls(folder, port or _free_port(), bin_dir)
        if os.geteuid() == 0:
            os.chown(folder, NOBODY, NOBODY)
        server._run("initdb", "-D", str(server.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
        server.start_again()
        return server

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bin / program), *args]
        if os.geteuid() == 0:
            command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=self.folder)
        if done.returncode != 0:
            raise PrivateServerUnavailable(f"{program} failed ({done.returncode}): {done.stderr.strip()}")

    def start_again(self) -> None:
        """Start the server (same port, same data) and wait until it accepts connections."""
        options = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.folder / "server.log"), "-o", options, "-w", "start")

    def stop(self) -> None:
        """``pg_ctl -m fast stop``: every session is disconnected, as in a restart or a failover."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        """Stop, then start again on the same port."""
        self.stop()
        self.start_again()

    def fresh_database_url(self) -> str:
        """A new, empty database of this server (one per test)."""
        name = f"cs_{secrets.token_hex(4)}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def close(self) -> None:
        """Stop the server at once and delete its folder."""
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except PrivateServerUnavailable:
            pass  # already stopped by a test that failed half-way
        shutil.rmtree(self.folder, ignore_errors=True)

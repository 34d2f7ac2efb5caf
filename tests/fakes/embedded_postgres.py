"""A throwaway PostgreSQL server for the test session when the machine has none.

The PostgreSQL half of the suite never skips. CI (and the project's machines) run a server on
``127.0.0.1:5432``; ``COUNTERSIGN_TEST_DATABASE_URL`` names another. When neither answers, the session
starts its own server with :class:`tests.fakes.private_postgres.PrivatePostgres`, from the first
binaries found:

1. ``COUNTERSIGN_TEST_PG_BIN`` (a folder holding ``initdb`` and ``pg_ctl``);
2. the system's, ``/usr/lib/postgresql/<version>/bin`` (newest first) or ``initdb`` on ``PATH``;
3. the ``pgserver`` wheel of the test extras (``pip install -e '.[test]'``), which bundles them.

It gets database ``test``, exports its URL as ``COUNTERSIGN_TEST_DATABASE_URL`` for the session (so the
processes tests start use it too), and is stopped and deleted when the session ends.

>>> url, server = session_database_url()
>>> ...
>>> if server is not None: server.close()
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from collections.abc import MutableMapping
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

from tests.fakes.postgres import DEFAULT_TEST_DATABASE_URL
from tests.fakes.private_postgres import PrivatePostgres, PrivateServerUnavailable

ENV_URL = "COUNTERSIGN_TEST_DATABASE_URL"
ENV_BIN = "COUNTERSIGN_TEST_PG_BIN"


def answers(url: str, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at ``url``'s host and port."""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5432), timeout=timeout):
            return True
    except OSError:
        return False


def binary_folders(env: MutableMapping[str, str] | None = None) -> list[Path]:
    """Folders that may hold ``initdb`` and ``pg_ctl``, in the order they are tried."""
    env = os.environ if env is None else env
    found: list[Path] = []
    if env.get(ENV_BIN):
        found.append(Path(env[ENV_BIN]))

    def version(folder: Path) -> tuple[int, ...]:
        digits = "".join(c if c.isdigit() else " " for c in folder.parent.name).split()
        return tuple(int(d) for d in digits)

    found += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        found.append(Path(on_path).resolve().parent)
    with contextlib.suppress(ImportError):  # the test extras' bundled server, when installed
        import pgserver  # type: ignore[import-untyped]

        found.append(Path(pgserver.__file__).parent / "pginstall" / "bin")
    return [folder for folder in found if (folder / "initdb").exists() and (folder / "pg_ctl").exists()]


def start_embedded(folders: list[Path], port: int | None = None) -> tuple[str, PrivatePostgres]:
    """Start a server from the first folder that works; its ``test`` database's URL and the server."""
    problems: list[str] = []
    for folder in folders:
        try:
            server = PrivatePostgres.start(folder, port)
        except PrivateServerUnavailable as error:
            problems.append(f"{folder}: {error}")
            continue
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE test")
        return f"postgresql://postgres@127.0.0.1:{server.port}/test", server
    tried = "; ".join(problems) or "no initdb/pg_ctl found (install PostgreSQL, or pip install -e '.[test]')"
    raise PrivateServerUnavailable(f"could not start a throwaway PostgreSQL server: {tried}")


def session_database_url(
    env: MutableMapping[str, str] | None = None, default_url: str = DEFAULT_TEST_DATABASE_URL
) -> tuple[str, PrivatePostgres | None]:
    """The server for this session: the configured one, the machine's, or a throwaway one (exported)."""
    env = os.environ if env is None else env
    if env.get(ENV_URL):
        return env[ENV_URL], None
    if answers(default_url):
        return default_url, None
    url, server = start_embedded(binary_folders(env))
    env[ENV_URL] = url
    return url, server

"""``serve`` with PostgreSQL unreachable at start: it listens at once, says why it is not ready, and gets ready.

The database URL points at a port of 127.0.0.1 where nothing listens at first (every connection is refused);
the test then opens a TCP proxy there to the real test server at 127.0.0.1:5432, as a database that comes up
after the bot. Logs are JSON (``COUNTERSIGN_LOG_FORMAT=json``): one line per attempt, no traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.fakes.serve_processes import ServeCluster

UPSTREAM = ("127.0.0.1", 5432)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.asynccontextmanager
async def _proxy(port: int) -> AsyncIterator[None]:
    """Forward 127.0.0.1:``port`` to the real server, both ways, until the block ends."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*UPSTREAM)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(forward, "127.0.0.1", port)
    try:
        yield
    finally:
        server.close()


async def test_serve_listens_at_once_and_becomes_ready_when_postgresql_answers(
    tmp_path: Path, postgres_url: str
) -> None:
    port = _free_port()
    parts = urlsplit(postgres_url)
    netloc = parts.netloc.rsplit("@", 1)
    host_part = f"127.0.0.1:{port}"
    proxied = urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host_part}" if len(netloc) == 2 else host_part))
    async with ServeCluster.open(tmp_path, database_url=postgres_url) as cluster:
        proc = await cluster.start(
            "waiting",
            env={
                "COUNTERSIGN_DATABASE_URL": proxied,
                "COUNTERSIGN_DB_CONNECT_TIMEOUT": "1",
                "COUNTERSIGN_LOG_FORMAT": "json",
            },
        )
        async with cluster.session.get(f"{proc.url}/healthz") as health:
            assert health.status == 200
        async with cluster.session.get(f"{proc.url}/readyz") as readiness:
            assert readiness.status == 503
            body = await readiness.json()
        assert any("database" in p and "COUNTERSIGN_DATABASE_URL" in p for p in body["problems"]), body
        await cluster.wait_until(lambda: _attempts(proc.log) >= 2, "a second attempt logged")

        async with _proxy(port):

            async def ready() -> bool:
                with contextlib.suppress(Exception):
                    async with cluster.session.get(f"{proc.url}/readyz") as answer:
                        return answer.status == 200
                return False

            deadline = asyncio.get_running_loop().time() + 60
            while not await ready():
                assert asyncio.get_running_loop().time() < deadline, proc.log_text()
                await asyncio.sleep(0.2)
            assert proc.running
            lines = list(proc.log)
            proc.terminate()
            await proc.wait_exit()
    assert all(_is_json(line) for line in lines if line.strip()), "\n".join(lines)
    assert not any("Traceback" in line for line in lines)
    assert _attempts(lines) >= 2


def _attempts(lines: list[str]) -> int:
    return sum("database not ready (attempt" in line for line in lines)


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


pytestmark = pytest.mark.asyncio

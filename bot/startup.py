"""``serve``'s start when the database does not answer yet: the HTTP server first, the database with back-off.

A PostgreSQL server that is down when ``serve`` starts (a host reboot, a container started before the database)
must not leave the process without a listener, nor end it: until the database answers, a small server on the
configured address answers ``/healthz`` 200 (the process lives) and ``/readyz`` 503 naming the database; the
engine is opened again after a back-off (1 s, doubling to 30 s), one log line per attempt, for as long as the
failure is one that retrying can cure (:attr:`bot.startup_errors.DatabaseUnavailable.retryable`). Any other
failure (a newer schema, a SQLite path that cannot be opened) still ends ``serve`` with one line and exit 2.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

from bot.startup_errors import DatabaseUnavailable

logger = logging.getLogger(__name__)

T = TypeVar("T")
FIRST_DELAY_SECONDS = 1.0
MAX_DELAY_SECONDS = 30.0


@dataclass
class WaitingServer:
    """The stand-in HTTP server while the database does not answer: its runner and the port it bound."""

    runner: web.AppRunner
    port: int
    problem: list[str]

    async def close(self) -> None:
        """Stop listening (the real server binds the same port next)."""
        await self.runner.cleanup()


async def open_when_ready(
    open_engine: Callable[[], Awaitable[T]],
    *,
    host: str,
    port: int,
    ready: Callable[[str], Any] | None = None,
    delays: Callable[[int], float] | None = None,
) -> tuple[T, WaitingServer | None]:
    """``open_engine()``; while it fails with a retryable :class:`DatabaseUnavailable`, serve and try again.

    Returns the engine and the waiting server (``None`` if the first attempt worked), which the caller closes
    just before its own server binds :attr:`WaitingServer.port`. ``ready`` is called once the waiting server
    listens, as ``serve`` calls it for its own server.
    """
    delay_of = delays or backoff
    waiting: WaitingServer | None = None
    attempt = 1
    while True:
        try:
            return await open_engine(), waiting
        except DatabaseUnavailable as exc:
            if not exc.retryable:
                if waiting is not None:
                    await waiting.close()
                raise
            delay = delay_of(attempt)
            logger.warning("database not ready (attempt %d, next in %gs): %s", attempt, delay, exc)
            if waiting is None:
                waiting = await _serve_waiting(host, port, str(exc), ready)
            waiting.problem[:] = [f"database: {exc}"]
        attempt += 1
        await asyncio.sleep(delay)


def backoff(attempt: int) -> float:
    """1 s after the first failed attempt, doubling to at most 30 s.

    >>> [backoff(n) for n in (1, 2, 3, 6, 7, 20)]
    [1.0, 2.0, 4.0, 30.0, 30.0, 30.0]
    """
    return min(MAX_DELAY_SECONDS, FIRST_DELAY_SECONDS * 2 ** min(attempt - 1, 10))


async def _serve_waiting(host: str, port: int, problem: str, ready: Callable[[str], Any] | None) -> WaitingServer:
    problems = [f"database: {problem}"]

    async def healthz(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_request: web.Request) -> web.Response:
        return web.json_response({"status": "not ready", "problems": list(problems)}, status=503)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = port
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            bound = address[1]
            break
    url = f"http://{host}:{bound}"
    logger.info("listening on %s (GET /healthz, GET /readyz) until the database answers", url)
    if ready is not None:
        ready(url)
    return WaitingServer(runner, bound, problems)

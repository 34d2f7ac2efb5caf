"""Socket Mode's connection, opened in the background with back-off: the HTTP server never waits for Slack.

``serve`` must answer ``/healthz`` while Slack is unreachable, so the plugin's setup does not wait for the
socket: :class:`SocketConnector` asks Slack for a socket URL (``apps.connections.open``) after a back-off of
1 s doubling to 30 s, one log line per failed attempt, and then lets the SDK open and keep the socket. The
SDK's own client logs each of its failures with a traceback (``logger.exception``, every 10 s); it gets a
logger that writes one line instead. ``/readyz`` names the socket until it is open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

logger = logging.getLogger(__name__)

FIRST_DELAY_SECONDS = 1.0
MAX_DELAY_SECONDS = 30.0
SOCKET_NOT_OPEN = "slack: the Socket Mode connection is not open"
HEAD_START_SECONDS = 5.0
"""How long ``serve`` waits for the socket before it listens anyway (a Slack that neither answers nor refuses)."""


class OneLineLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The SDK's logger: its ``exception()`` calls become one warning line, without the traceback."""

    def exception(self, msg: object, *args: object, **kwargs: Any) -> None:
        kwargs.pop("exc_info", None)
        self.warning(msg, *args, **kwargs)

    def error(self, msg: object, *args: object, **kwargs: Any) -> None:
        kwargs.pop("exc_info", None)
        self.warning(msg, *args, **kwargs)


def backoff(attempt: int) -> float:
    """1 s after the first failed attempt, doubling to at most 30 s.

    >>> [backoff(n) for n in (1, 2, 3, 6, 9)]
    [1.0, 2.0, 4.0, 30.0, 30.0]
    """
    return min(MAX_DELAY_SECONDS, FIRST_DELAY_SECONDS * 2 ** min(attempt - 1, 10))


class SocketConnector:
    """Opens the Socket Mode connection of ``handler`` (Bolt's ``AsyncSocketModeHandler``) in the background."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler
        self.attempts = 0
        self.last_error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._failed = asyncio.Event()

    async def start(self, head_start: float = HEAD_START_SECONDS) -> None:
        """Start connecting; return once connected, or after ``head_start`` seconds, or at the first failure.

        A reachable Slack is connected before the HTTP server listens, as before; an unreachable one never
        holds it up longer than the head start.
        """
        self._task = asyncio.create_task(self._connect(), name="slack-socket-connect")
        self._failed = asyncio.Event()
        failed = asyncio.create_task(self._failed.wait())
        await asyncio.wait({self._task, failed}, timeout=head_start, return_when=asyncio.FIRST_COMPLETED)
        failed.cancel()

    async def _connect(self) -> None:
        client = self.handler.client
        while True:
            self.attempts += 1
            try:
                client.wss_uri = await client.issue_new_wss_url()
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # unreachable, refused, a Slack error: all retried, each in one line
                self.last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip(": ")
                delay = backoff(self.attempts)
                logger.warning(
                    "slack: socket mode could not connect (attempt %d, next in %gs): %s",
                    self.attempts,
                    delay,
                    self.last_error,
                )
                self._failed.set()
                await asyncio.sleep(delay)
        await self.handler.connect_async()
        self.last_error = None
        logger.info("slack connected over socket mode", extra={"attempts": self.attempts})

    def problem(self) -> str:
        """What ``/readyz`` says while the socket is not open."""
        if self.last_error is not None:
            return f"{SOCKET_NOT_OPEN} (attempt {self.attempts}: {self.last_error})"
        return SOCKET_NOT_OPEN

    async def close(self) -> None:
        """Stop connecting (the caller closes the handler)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

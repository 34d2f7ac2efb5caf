"""Serving an aiohttp app on 127.0.0.1 at an ephemeral port: the one way every fake and stack does it."""

from __future__ import annotations

from typing import Any

from aiohttp import web


async def serve_locally(app: web.Application, **runner_options: Any) -> tuple[web.AppRunner, int]:
    """Start ``app`` on 127.0.0.1; return its runner (``await runner.cleanup()`` to stop) and its port.

    >>> runner, port = await serve_locally(app, access_log=None)
    """
    runner = web.AppRunner(app, **runner_options)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]

"""The HTTP server of ``countersign serve``: ``/healthz`` plus whatever the installed adapters mount.

Adapters plug in through the ``countersign.server_plugins`` entry-point group, so nothing in ``bot/``
imports a chat SDK: each plugin adds its routes (``POST /slack/events``, ``POST /api/messages``) and
registers its :class:`~bot.engine.surface.Surface` with the engine.
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from bot.config import Config

if TYPE_CHECKING:
    from bot.engine.engine import Engine

logger = logging.getLogger(__name__)

PLUGIN_GROUP = "countersign.server_plugins"
ACTIVE_PLUGINS: web.AppKey[list] = web.AppKey("countersign.plugins", list)


class ServerPlugin(Protocol):
    """One chat surface served over HTTP (or a socket of its own, like Slack's Socket Mode)."""

    name: str

    def is_configured(self, config: Config) -> bool:
        """Whether the configuration holds what this surface needs to run."""
        ...

    async def setup(self, app: web.Application, engine: Engine, config: Config) -> None:
        """Add routes to ``app`` and register the surface with ``engine``."""
        ...

    async def close(self) -> None:
        """Release connections and background tasks."""
        ...


def load_plugins() -> list[ServerPlugin]:
    """Instantiate every installed server plugin, in name order."""
    plugins = []
    for entry in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        plugins.append(entry.load()())
    return plugins


async def healthz(_request: web.Request) -> web.Response:
    """Liveness: answers without authentication, outside every adapter's middleware."""
    return web.json_response({"status": "ok"})


async def build_web_app(engine: Engine, config: Config, plugins: list[ServerPlugin] | None = None) -> web.Application:
    """The aiohttp application: ``GET /healthz`` and the routes of every configured plugin."""
    app = web.Application()
    app.router.add_get("/healthz", healthz)
    active = []
    for plugin in load_plugins() if plugins is None else plugins:
        if not plugin.is_configured(config):
            logger.info("surface not configured; skipping", extra={"surface": plugin.name})
            continue
        await plugin.setup(app, engine, config)
        active.append(plugin)
        logger.info("surface ready", extra={"surface": plugin.name})

    async def close_plugins(_app: web.Application) -> None:
        for plugin in active:
            await plugin.close()

    app.on_cleanup.append(close_plugins)
    app[ACTIVE_PLUGINS] = active
    return app

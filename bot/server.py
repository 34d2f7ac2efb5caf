"""The HTTP server of ``countersign serve``: ``/healthz``, ``/readyz``, ``/metrics`` and the adapters' routes.

Adapters plug in through the ``countersign.server_plugins`` entry-point group, so nothing in ``bot/``
imports a chat SDK: each plugin adds its routes (``POST /slack/events``, ``POST /api/messages``) and
registers its :class:`~bot.engine.surface.Surface` with the engine.

``/healthz`` is liveness (the process answers). ``/readyz`` is readiness: the database is writable and
migrated to this code's schema, and every configured surface is connected (each plugin says so through
its optional ``readiness_problem``); otherwise 503 with the list of problems. ``/metrics`` serves the
engine's :class:`~bot.metrics.PrometheusObserver` in the Prometheus text format.
"""

from __future__ import annotations

import asyncio
import logging
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from bot.config import Config
from bot.metrics import PROMETHEUS_CONTENT_TYPE, PrometheusObserver

if TYPE_CHECKING:
    from bot.engine.engine import Engine

logger = logging.getLogger(__name__)

PLUGIN_GROUP = "countersign.server_plugins"
ACTIVE_PLUGINS: web.AppKey[list] = web.AppKey("countersign.plugins", list)
ENGINE: web.AppKey[Any] = web.AppKey("countersign.engine", object)
ANONYMOUS: web.AppKey[bool] = web.AppKey("countersign.anonymous", bool)
"""Whether this server accepts Teams requests without a token (reported by ``/readyz`` and ``/metrics``)."""
READINESS_TIMEOUT_SECONDS = 5.0
"""A readiness check that takes longer than this is itself a problem (a hung database or platform)."""


class ServerPlugin(Protocol):
    """One chat surface served over HTTP (or a socket of its own, like Slack's Socket Mode).

    A plugin may also define ``async readiness_problem() -> str | None`` (``None``: connected), which
    ``GET /readyz`` asks.
    """

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


async def readiness_problems(engine: Engine, plugins: list[Any]) -> list[str]:
    """What keeps this process from serving: the database's problem and each surface's, in that order."""
    checks = [engine.storage.ops.readiness_problem()]
    checks += [plugin.readiness_problem() for plugin in plugins if hasattr(plugin, "readiness_problem")]
    problems: list[str] = []
    try:
        async with asyncio.timeout(READINESS_TIMEOUT_SECONDS):
            results = await asyncio.gather(*checks, return_exceptions=True)
    except TimeoutError:
        return [f"readiness checks took longer than {READINESS_TIMEOUT_SECONDS:g}s"]
    for result in results:
        if isinstance(result, BaseException):
            problems.append(f"check failed: {type(result).__name__}")
        elif result:
            problems.append(result)
    return problems


async def readyz(request: web.Request) -> web.Response:
    """Readiness: 200 when the database and every configured surface are usable, else 503 saying what is wrong."""
    problems = await readiness_problems(request.app[ENGINE], request.app[ACTIVE_PLUGINS])
    flags: dict[str, object] = {"anonymous": True} if request.app[ANONYMOUS] else {}
    mcp = request.app[ENGINE].mcp
    if mcp is not None and not mcp.all_tried:
        problems.append("MCP servers are still starting")
    if problems:
        logger.warning("not ready", extra={"problems": "; ".join(problems)})
        return web.json_response({"status": "not ready", "problems": problems, **flags}, status=503)
    degraded = mcp.degraded() if mcp is not None else []
    if degraded:  # a failed MCP server leaves the rest ready: it is listed by name, its tools are absent
        flags["degraded"] = degraded
    return web.json_response({"status": "ready", **flags})


async def metrics(request: web.Request) -> web.Response:
    """The engine's metrics in the Prometheus text format; database gauges are read now."""
    engine = request.app[ENGINE]
    observer = engine.observer
    if not isinstance(observer, PrometheusObserver):
        raise web.HTTPNotFound(text="metrics are not collected by this engine")
    try:
        observer.set_database_gauges(await engine.storage.ops.pending_by_tool(), await engine.storage.ops.inbox_depth())
    except Exception as exc:  # counters are still worth serving while the database is away
        logger.warning("metrics: could not read the database gauges (%s)", type(exc).__name__)
    admission = engine.parts.work.admission
    observer.set_admission(admission.active, admission.waiting)
    pool_stats = getattr(engine.storage, "pool_stats", None)  # PostgreSQL's pool; SQLite has none
    if pool_stats is not None:
        observer.set_pool_stats(pool_stats())
    return web.Response(body=observer.exposition(), headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})


async def build_web_app(engine: Engine, config: Config, plugins: list[ServerPlugin] | None = None) -> web.Application:
    """The aiohttp application: ``GET /healthz``, ``/readyz``, ``/metrics`` and every configured plugin's routes."""
    app = web.Application()
    app[ENGINE] = engine
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
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
    app[ANONYMOUS] = config.teams_anonymous and any(plugin.name == "teams" for plugin in active)
    if isinstance(engine.observer, PrometheusObserver):
        engine.observer.teams_anonymous.set(1 if app[ANONYMOUS] else 0)
    return app

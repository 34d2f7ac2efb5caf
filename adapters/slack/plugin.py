"""``SlackPlugin``: serves Slack for ``countersign serve`` (``POST /slack/events``, or Socket Mode).

HTTP mode mounts one route for events, interactivity and slash commands; Bolt verifies each request's
signature (signing secret, 5-minute window) and answers 401 to anything else. With an app-level token
(``SLACK_APP_TOKEN``) the same Bolt app is driven over Socket Mode instead and no route is mounted.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp

from adapters.slack.app import PLATFORM, BackgroundTasks, SlackListeners
from adapters.slack.surface import SlackSurface, web_client
from bot.config import Config

if TYPE_CHECKING:
    from bot.engine.engine import Engine

logger = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"


def build_bolt_app(engine: Engine, config: Config, tasks: BackgroundTasks) -> tuple[AsyncApp, SlackSurface]:
    """The Bolt AsyncApp with countersign's listeners, and the surface that shares its Web API client."""
    client = web_client(config.slack_bot_token, config.slack_api_url)
    socket_mode = bool(config.slack_app_token)
    app = AsyncApp(
        name="countersign",
        client=client,
        signing_secret=config.slack_signing_secret or "",
        # Socket Mode requests arrive over an authenticated websocket; Bolt skips the check there anyway.
        request_verification_enabled=not socket_mode,
        # Acknowledge only once the listener returns: message listeners store the message durably first, and
        # every listener hands its slow work to a background task.
        process_before_response=True,
    )
    surface = SlackSurface(client)
    SlackListeners(engine, surface, tasks).register(app)
    return app, surface


class SlackPlugin:
    """The Slack :class:`~bot.server.ServerPlugin`."""

    name = PLATFORM

    def __init__(self) -> None:
        self.app: AsyncApp | None = None
        self.surface: SlackSurface | None = None
        self.tasks = BackgroundTasks()
        self._socket_handler: Any = None

    def is_configured(self, config: Config) -> bool:
        """A bot token plus a signing secret (HTTP) or an app-level token (Socket Mode)."""
        return config.slack_configured

    async def setup(self, app: web.Application, engine: Engine, config: Config) -> None:
        """Register the surface and serve Slack: the HTTP route, or a Socket Mode connection."""
        self.app, self.surface = build_bolt_app(engine, config, self.tasks)
        engine.register_surface(PLATFORM, self.surface)
        if config.slack_app_token:
            from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler

            self._socket_handler = AsyncSocketModeHandler(self.app, config.slack_app_token)
            await self._socket_handler.connect_async()
            logger.info("slack connected over socket mode")
            return
        app.router.add_post(EVENTS_PATH, self.handle)
        logger.info("slack listening over http", extra={"path": EVENTS_PATH})

    async def handle(self, request: web.Request) -> web.Response:
        """``POST /slack/events``: hand the request to Bolt and its response back to aiohttp."""
        assert self.app is not None, "setup() first"
        return await to_aiohttp_response(await self.app.async_dispatch(await to_bolt_request(request)))

    async def wait_idle(self) -> None:
        """Wait for the work started after acks (tests, graceful shutdown)."""
        await self.tasks.wait_idle()

    async def close(self, grace_seconds: float = 10.0) -> None:
        """Disconnect Socket Mode; give running work ``grace_seconds`` to finish, then cancel it."""
        if self._socket_handler is not None:
            await self._socket_handler.close_async()
            self._socket_handler = None
        try:
            await asyncio.wait_for(self.tasks.wait_idle(), grace_seconds)
        except TimeoutError:
            logger.warning("slack work still running at shutdown; cancelling it")
        await self.tasks.cancel()

"""``SlackPlugin``: serves Slack for ``countersign serve`` (``POST /slack/events``, or Socket Mode).

HTTP mode mounts one route for events, interactivity and slash commands. Every request passes
:mod:`.guard` before Bolt sees it: too large → 413, not signed correctly (signing secret, 5-minute
window) → 401, signed but malformed → 400, each with one log line; no listener runs for any of them.
With an app-level token (``SLACK_APP_TOKEN``) the same Bolt app is driven over Socket Mode instead and
no route is mounted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.middleware.authorization.async_single_team_authorization import AsyncSingleTeamAuthorization
from slack_bolt.request.async_internals import build_async_context
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.slack.app import PLATFORM, BackgroundTasks, SlackListeners
from adapters.slack.guard import Refusal, check_request, read_body
from adapters.slack.socket import SOCKET_NOT_OPEN, OneLineLogger, SocketConnector
from adapters.slack.surface import SlackSurface, configure_web_client, share_session
from bot.config import Config, ConfigError

if TYPE_CHECKING:
    from bot.engine.engine import Engine

logger = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
REFUSED_TOKEN_ERRORS = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "not_allowed_token_type"}
)
"""``auth.test`` errors that mean the bot token itself is wrong, not that Slack is unwell."""


async def check_bot_token(client: AsyncWebClient, app: AsyncApp | None = None) -> str | None:
    """``auth.test`` at start: a token Slack refuses is a :class:`ConfigError` naming ``SLACK_BOT_TOKEN``.

    Slack being unreachable is not a configuration error: it is logged, serving goes on, and the
    problem is returned (``None`` when the check passed) for ``/readyz`` to report. The answer is
    handed to ``app``'s authorization (:func:`share_auth_test`).
    """
    try:
        answer = await client.auth_test()
        if app is not None:
            share_auth_test(app, answer)
    except SlackApiError as exc:
        error = exc.response.get("error")
        if error in REFUSED_TOKEN_ERRORS:
            raise ConfigError(f"SLACK_BOT_TOKEN: Slack refused the bot token ({error})") from None
        logger.warning("could not check SLACK_BOT_TOKEN with auth.test (%s); serving anyway", error)
        return f"slack: auth.test failed ({error})"
    except (aiohttp.ClientError, TimeoutError) as exc:
        logger.warning("could not reach Slack to check SLACK_BOT_TOKEN (%s); serving anyway", type(exc).__name__)
        return f"slack: auth.test could not reach Slack ({type(exc).__name__})"
    return None


def share_auth_test(app: AsyncApp, answer: AsyncSlackResponse) -> None:
    """Give Bolt's single-workspace authorization the ``auth.test`` answer serve already has.

    Bolt calls ``auth.test`` for every request until one call has answered, and each request waits for its
    own call before its listener (and so its ack) runs: under a burst at start that was a call per event.
    Bolt keeps its authorization middleware in a private list; if that changes, this does nothing and
    Bolt asks Slack itself, as before.
    """
    for middleware in getattr(app, "_async_middleware_list", ()):
        if isinstance(middleware, AsyncSingleTeamAuthorization) and middleware.auth_test_result is None:
            middleware.auth_test_result = answer


def build_bolt_app(
    engine: Engine, config: Config, tasks: BackgroundTasks
) -> tuple[AsyncApp, SlackSurface, SlackListeners]:
    """The Bolt AsyncApp with countersign's listeners, and the surface that shares its Web API client."""
    socket_mode = bool(config.slack_app_token)
    app = AsyncApp(
        name="countersign",
        # The token, not a client: Bolt also reads SLACK_BOT_TOKEN from the environment, and given a client
        # as well it warns that the token is unused. Its own client is configured below instead.
        token=config.slack_bot_token,
        signing_secret=config.slack_signing_secret or "",
        # Socket Mode requests arrive over an authenticated websocket; Bolt skips the check there anyway.
        request_verification_enabled=not socket_mode,
        # Acknowledge only once the listener returns: message listeners store the message durably first, and
        # every listener hands its slow work to a background task.
        process_before_response=True,
    )
    configure_web_client(app.client, config.slack_api_url, engine.observer)
    share_session(app.client)
    surface = SlackSurface(app.client)
    listeners = SlackListeners(engine, surface, tasks)
    surface.home_builder = listeners.home_view_for  # App Homes are re-published when approvals change
    listeners.register(app)
    return app, surface, listeners


class SlackPlugin:
    """The Slack :class:`~bot.server.ServerPlugin`."""

    name = PLATFORM

    def __init__(self) -> None:
        self.app: AsyncApp | None = None
        self.surface: SlackSurface | None = None
        self.listeners: SlackListeners | None = None
        self.verifier: SignatureVerifier | None = None
        self.tasks = BackgroundTasks()
        self._socket_handler: Any = None
        self._socket: SocketConnector | None = None
        self._auth_problem: str | None = "slack: not set up"

    def is_configured(self, config: Config) -> bool:
        """A bot token plus a signing secret (HTTP) or an app-level token (Socket Mode)."""
        return config.slack_configured

    async def setup(self, app: web.Application, engine: Engine, config: Config) -> None:
        """Register the surface and serve Slack: the HTTP route, or a Socket Mode connection."""
        self.app, self.surface, self.listeners = build_bolt_app(engine, config, self.tasks)
        try:
            self._auth_problem = await check_bot_token(self.app.client, self.app)
        except ConfigError:  # serve stops here: close() will not be called
            await self._close_session()
            raise
        engine.register_surface(PLATFORM, self.surface)
        if config.slack_app_token:
            from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler

            # Connected in the background, with back-off and one line per attempt (adapters/slack/socket.py).
            sdk_logger = OneLineLogger(logging.getLogger("slack_sdk.socket_mode"), {})
            self._socket_handler = AsyncSocketModeHandler(self.app, config.slack_app_token, logger=sdk_logger)  # type: ignore[arg-type]
            self._socket = SocketConnector(self._socket_handler)
            await self._socket.start()
            return
        self.verifier = SignatureVerifier(config.slack_signing_secret or "")
        app.router.add_post(EVENTS_PATH, self.handle)
        logger.info("slack listening over http", extra={"path": EVENTS_PATH})

    async def handle(self, request: web.Request) -> web.Response:
        """``POST /slack/events``: check the request (:mod:`.guard`), then hand it to Bolt."""
        assert self.app is not None and self.listeners is not None, "setup() first"
        raw = await read_body(request)
        checked = Refusal(413, "body too large") if raw is None else check_request(self.verifier, raw, request.headers)
        if isinstance(checked, Refusal):
            click = checked.payload if checked.payload and checked.payload.get("type") == "block_actions" else None
            if click is not None and self.listeners.on_unreadable_click(click):
                logger.warning("slack click unreadable, the clicker is told: %s", checked.reason)
                return web.Response(status=200)  # Slack must not show a failed click on top of the message
            logger.warning("slack request refused (%s): %s", checked.status, checked.reason)
            return web.Response(status=checked.status)
        try:
            headers: dict[str, str | Sequence[str]] = dict(request.headers)
            bolt_request = AsyncBoltRequest(body=checked.body, query=request.query_string, headers=headers)
            if bolt_request.body != checked.payload:
                # Bolt reads any form containing the word "payload" as an interactivity payload, so a slash command
                # like "/countersign policy set payload_sync never" would reach it empty: give it the real one.
                bolt_request.body = checked.payload
                bolt_request.context = build_async_context(AsyncBoltContext({}), checked.payload)
            response = await self.app.async_dispatch(bolt_request)
        except Exception as exc:  # a payload shape the guard let through and Bolt choked on: still not a 500
            logger.error("slack request could not be dispatched (%s)", type(exc).__name__)
            return web.Response(status=400)
        return await to_aiohttp_response(response)

    async def readiness_problem(self) -> str | None:
        """``None`` once ``auth.test`` passed (retried here until it does) and, in Socket Mode, the socket is open."""
        if self.app is None:
            return "slack: not set up"
        if self._auth_problem is not None:
            try:
                self._auth_problem = await check_bot_token(self.app.client, self.app)
            except ConfigError as exc:  # the token was revoked since start
                self._auth_problem = f"slack: {exc}"
        problems = [] if self._auth_problem is None else [self._auth_problem]
        if self._socket_handler is not None and not await self._socket_handler.client.is_connected():
            problems.append(self._socket.problem() if self._socket is not None else SOCKET_NOT_OPEN)
        return "; ".join(problems) or None

    async def wait_idle(self) -> None:
        """Wait for the work started after acks (tests, graceful shutdown)."""
        await self.tasks.wait_idle()

    async def close(self, grace_seconds: float = 10.0) -> None:
        """Disconnect Socket Mode; give running work ``grace_seconds`` to finish, then cancel it."""
        if self._socket is not None:
            await self._socket.close()
            self._socket = None
        if self._socket_handler is not None:
            await self._socket_handler.close_async()
            self._socket_handler = None
        try:
            await asyncio.wait_for(self.tasks.wait_idle(), grace_seconds)
        except TimeoutError:
            logger.warning("slack work still running at shutdown; cancelling it")
        await self.tasks.cancel()
        if self.surface is not None:
            await self.surface.close()
        await self._close_session()

    async def _close_session(self) -> None:
        """Close the Web API client's connections (:func:`~adapters.slack.surface.share_session`)."""
        if self.app is not None and self.app.client.session is not None:
            await self.app.client.session.close()

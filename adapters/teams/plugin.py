"""``TeamsPlugin``: serves ``POST /api/messages`` with the Microsoft 365 Agents SDK's ``CloudAdapter``.

Every request to that route passes the SDK's JWT check (``jwt_authorization_decorator``: Bot
Framework / Entra token, signature, audience = our app id); a missing or bad token gets 401. The
check guards only this route, never ``/healthz``. Anonymous access exists only with
``COUNTERSIGN_TEAMS_ANONYMOUS=1`` and is announced with a loud warning at start.

Whatever arrives, the route never answers 500: a body that is not an activity gets a 400 naming the
wrong fields (one log line), a card click always gets a 200 with a card or a sentence, and an
unexpected failure is logged and answered without any of its details.

Credentials are the SDK's own ``CONNECTIONS__SERVICE_CONNECTION__SETTINGS__…`` variables
(``Config.teams_settings``), read by ``load_configuration_from_env``; outgoing calls get their
tokens from MSAL (``MsalAuth``) unless another token provider factory is given.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.web_exceptions import NotAppKeyWarning
from microsoft_agents.activity import Activity, ActivityTypes, load_configuration_from_env
from microsoft_agents.hosting.aiohttp import CloudAdapter, jwt_authorization_decorator
from microsoft_agents.hosting.core import (
    AccessTokenProviderBase,
    AgentAuthConfiguration,
    AnonymousTokenProvider,
    ConnectionManager,
    TurnContext,
)

from adapters.teams.agent import ADAPTIVE_CARD_ACTION, GENERIC_FAILURE, TeamsAgent
from adapters.teams.cards import invoke_message_response
from adapters.teams.handler import PLATFORM, MalformedActivity, parse_activity
from adapters.teams.sdk_logging import quiet_sdk_logging
from adapters.teams.surface import TeamsSurface
from adapters.teams.token_precheck import TokenPrecheck
from bot.config import Config

if TYPE_CHECKING:
    from bot.engine.engine import Engine

logger = logging.getLogger(__name__)

MESSAGES_ROUTE = "/api/messages"
AGENT_CONFIGURATION_KEY = "agent_configuration"
"""The application key the SDK's JWT check reads its ``AgentAuthConfiguration`` from."""

TokenProviderFactory = Callable[[AgentAuthConfiguration], AccessTokenProviderBase]

ANONYMOUS_REMINDER_SECONDS = 3600.0
"""How often the anonymous-mode warning is repeated while it stays on."""
ANONYMOUS_WARNING = (
    "!!! TEAMS ANONYMOUS MODE: POST /api/messages accepts requests WITHOUT a Bot Framework token "
    "(COUNTERSIGN_TEAMS_ANONYMOUS=1). Anyone who can reach this server can talk to the bot and approve "
    "tool calls as any user. Use it for local testing only. !!!"
)


_SDK_ACTIVITY_LOGGER = "microsoft_agents.activity.activity"
_checking_request = contextvars.ContextVar("countersign_teams_checking_request", default=False)


class _RequestCheckLogFilter(logging.Filter):
    """Drops the SDK's ERROR-with-traceback about an invalid activity while we check a request body.

    The SDK logs every failed ``Activity`` validation that way; for a request we reject with a 400 we
    log one line of our own instead. Its other records pass untouched.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not _checking_request.get()


_REQUEST_CHECK_FILTER = _RequestCheckLogFilter()


@contextmanager
def _checking() -> Iterator[None]:
    token = _checking_request.set(True)
    try:
        yield
    finally:
        _checking_request.reset(token)


def _service_url_matches_token(request: web.Request, service_url: str | None) -> bool:
    """Whether the activity's ``serviceUrl`` is the one the channel's token vouches for.

    Bot Framework channel tokens carry a ``serviceurl`` claim equal to the activity's ``serviceUrl``.
    A request without that claim (anonymous mode, a token of another kind) has nothing to compare.
    """
    identity = request.get("claims_identity")
    claimed = identity.get_claim_value("serviceurl") if identity is not None else None
    if not isinstance(claimed, str) or not claimed:
        return True
    return claimed.rstrip("/").lower() == (service_url or "").rstrip("/").lower()


def _error(status: int, text: str) -> web.Response:
    return web.json_response({"error": text}, status=status)


def _msal_factory() -> TokenProviderFactory:
    from microsoft_agents.authentication.msal import MsalAuth

    return MsalAuth


def build_connections(
    config: Config, token_provider_factory: TokenProviderFactory | None = None
) -> tuple[AgentAuthConfiguration, ConnectionManager]:
    """The JWT check's configuration and the connection manager for outgoing calls.

    With credentials in ``config.teams_settings``, both come from the SDK's connection settings (the
    ``SERVICE_CONNECTION``); ``config.teams_anonymous`` additionally lets token-less requests in.
    With anonymous mode alone there are no credentials: requests and replies carry no tokens.
    """
    settings = dict(config.teams_settings)
    if any(key.upper().endswith("CLIENTID") for key in settings):
        sdk_config = load_configuration_from_env(settings)
        factory = token_provider_factory or _msal_factory()
        connections = ConnectionManager(provider_factory=factory, **sdk_config)
        if config.teams_anonymous:
            raise ValueError("Teams anonymous mode cannot be combined with credentials")
        auth_config = connections.get_default_connection_configuration()
        auth_config.VALIDATE_ISSUER = True  # the SDK's issuer allow-list is opt-in; a bot that verifies wants it
        return auth_config, connections
    if not config.teams_anonymous:
        raise ValueError("Teams needs CONNECTIONS__SERVICE_CONNECTION__SETTINGS__CLIENTID or anonymous mode")
    auth_config = AgentAuthConfiguration(anonymous_allowed=True)
    connections = ConnectionManager(
        provider_factory=lambda _config: AnonymousTokenProvider(),
        connections_configurations={"SERVICE_CONNECTION": auth_config},
    )
    return auth_config, connections


async def _on_turn_error(context: TurnContext, error: Exception) -> None:
    """Log the failure; tell the person one generic sentence (never the exception text)."""
    logger.error("teams turn failed", exc_info=error)
    if context.activity and context.activity.type == ActivityTypes.message:
        try:
            await context.send_activity(
                Activity(type=ActivityTypes.message, text="Sorry, something went wrong on the bot's side.")
            )
        except Exception:
            logger.warning("could not tell the person about the failure", exc_info=True)


class TeamsPlugin:
    """The Teams surface of ``countersign serve`` (``countersign.server_plugins`` entry point ``teams``).

    ``token_provider_factory`` makes the token provider of each SDK connection (default: MSAL); tests
    pass one that hands out a fixed token so outgoing calls reach a fake Bot Connector offline.
    """

    name = PLATFORM

    def __init__(self, token_provider_factory: TokenProviderFactory | None = None) -> None:
        self._token_provider_factory = token_provider_factory
        self.anonymous_reminder_seconds = ANONYMOUS_REMINDER_SECONDS
        self._anonymous_reminder: asyncio.Task[None] | None = None
        self._precheck = TokenPrecheck()
        self.adapter: CloudAdapter | None = None
        self.agent: TeamsAgent | None = None
        self.surface: TeamsSurface | None = None

    def is_configured(self, config: Config) -> bool:
        """Credentials are configured, or anonymous mode is switched on explicitly."""
        return config.teams_configured

    async def setup(self, app: web.Application, engine: Engine, config: Config) -> None:
        """Mount ``POST /api/messages`` behind the SDK's JWT check and register the Teams surface."""
        quiet_sdk_logging()
        auth_config, connections = build_connections(config, self._token_provider_factory)
        adapter = CloudAdapter(connection_manager=connections)
        adapter.on_turn_error = _on_turn_error
        self.adapter = adapter
        self.surface = TeamsSurface(adapter, engine, observer=engine.observer, user_views=config.teams_user_views)
        self.agent = TeamsAgent(engine)
        engine.register_surface(PLATFORM, self.surface)
        with warnings.catch_warnings():
            # The SDK reads this plain string key; aiohttp would prefer an AppKey.
            warnings.simplefilter("ignore", NotAppKeyWarning)
            app[AGENT_CONFIGURATION_KEY] = auth_config
        app.router.add_post(MESSAGES_ROUTE, self._prechecked(jwt_authorization_decorator(self._messages)))
        sdk_logger = logging.getLogger(_SDK_ACTIVITY_LOGGER)
        if _REQUEST_CHECK_FILTER not in sdk_logger.filters:
            sdk_logger.addFilter(_REQUEST_CHECK_FILTER)
        if auth_config.ANONYMOUS_ALLOWED:
            logger.warning(ANONYMOUS_WARNING)
            self._anonymous_reminder = asyncio.create_task(self._remind_anonymous(), name="teams-anonymous-reminder")

    def _prechecked(
        self, validated: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """``validated`` (the SDK's JWT check and the route) behind :class:`TokenPrecheck`: 401 for malformed tokens."""

        async def route(request: web.Request) -> web.StreamResponse:
            reason, kid = self._precheck.refusal(request.headers.get("Authorization"))
            if reason:
                logger.warning("teams request rejected", extra={"reason": reason})
                return _error(401, "Invalid token or authentication failed.")
            response = await validated(request)
            if kid is not None and "claims_identity" in request:
                self._precheck.validated(kid)
            return response

        return route

    async def _remind_anonymous(self) -> None:
        """Repeat the anonymous-mode warning while it stays on, so it cannot scroll away unnoticed."""
        while True:
            await asyncio.sleep(self.anonymous_reminder_seconds)
            logger.warning("still in anonymous mode: %s", ANONYMOUS_WARNING)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        assert self.adapter is not None and self.agent is not None, "setup() mounts this route"
        try:
            body: Any = await request.json()  # aiohttp keeps the bytes: the SDK reads them again
        except (ValueError, LookupError):  # not JSON, not UTF-8, or an unknown charset
            logger.warning("teams request rejected", extra={"reason": "the body is not JSON"})
            return _error(400, "the body is not JSON")
        try:
            with _checking():
                activity = parse_activity(body)
        except MalformedActivity as exc:
            logger.warning("teams request rejected", extra={"reason": str(exc)})
            return _error(400, f"not a valid activity: {exc}")
        if not _service_url_matches_token(request, activity.service_url):
            # A signed activity must not point our replies (and the token we attach to them) at another host.
            logger.warning("teams request rejected", extra={"reason": "the serviceUrl is not the token's"})
            return _error(401, "the activity's serviceUrl does not match its token")
        try:
            response = await self.adapter.process(request, self.agent)
        except Exception:  # the SDK failed outside the turn (which has its own handler)
            logger.exception("teams request failed", extra={"activity_type": activity.type})
            if activity.type == ActivityTypes.invoke and activity.name == ADAPTIVE_CARD_ACTION:
                return web.json_response(invoke_message_response(GENERIC_FAILURE))
            return _error(400, "the bot could not handle this activity")
        return response if response is not None else web.Response(status=202)

    async def readiness_problem(self) -> str | None:
        """``None`` once the credentials are loaded and the route is mounted (``setup`` raises otherwise)."""
        return None if self.adapter is not None else "teams: credentials not loaded"

    async def wait_idle(self) -> None:
        """Wait until every message handed to the engine has been handled (tests)."""
        if self.agent is not None:
            await self.agent.drain()

    async def close(self) -> None:
        """Stop typing indicators and cancel runs still in flight."""
        if self._anonymous_reminder is not None:
            self._anonymous_reminder.cancel()
        if self.agent is not None:
            await self.agent.close()
        if self.surface is not None:
            await self.surface.close()

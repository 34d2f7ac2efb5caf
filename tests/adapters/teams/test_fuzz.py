"""Fuzzing ``POST /api/messages``: every field of a message and of a card click, mutated, over real HTTP.

Hypothesis (seeded: ``derandomize=True``, no example database) takes a valid Teams payload, deletes
fields, replaces them with values of any JSON type, or adds unknown ones, and posts the result, signed
with a valid Bot Framework token, to the served app. Every field is also deleted and given a value of
the wrong type once, so that each one is covered whatever Hypothesis draws. Whatever arrives: no 500,
no tool runs, no unexpected failure logged, and afterwards the server still answers ``/healthz`` and
a normal message.

The examples are drawn in a worker thread (Hypothesis runs synchronously); every request and every
wait is handed to the test's event loop, where the app is served.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Coroutine
from copy import deepcopy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakes.engine_kit import asks_for, says
from tests.fakes.teams_stack import ADA, ANA, PERSONAL_CHAT, TeamsStack, action_value, approval_ids

EXAMPLES = 40
"""Random examples per payload type, on top of two explicit ones per field (about 100 requests in all)."""
ALLOWED = {200, 202, 400, 401, 501}
"""200 a click's answer, 202 a message taken, 400 not an activity, 401 a serviceUrl its token does not vouch
for, 501 an invoke we do not implement."""
UNEXPECTED = ("teams request failed", "card action failed", "teams turn failed", "agent run failed")


class _Delete:
    """The mutation that removes a field."""

    def __repr__(self) -> str:
        return "DELETE"


DELETE = _Delete()
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
# Outgoing replies go to the activity's serviceUrl: keep every URL the bot might call on this machine.
SERVICE_URLS = st.sampled_from(["", "not a url", "http://127.0.0.1:9/", "ftp://127.0.0.1/"])

Path = tuple[Any, ...]


def paths_of(node: Any, prefix: Path = ()) -> list[Path]:
    """Every key (and list index) path of a JSON document, parents before children."""
    found: list[Path] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, value in items:
        found.append((*prefix, key))
        found.extend(paths_of(value, (*prefix, key)))
    return found


def mutation(paths: list[Path]) -> st.SearchStrategy[tuple[Path, Any]]:
    """One change to one field: delete it, give it another value of any type, or add an unknown sibling."""

    def change(path: Path) -> st.SearchStrategy[tuple[Path, Any]]:
        values = SERVICE_URLS | JSON_VALUES if path == ("serviceUrl",) else JSON_VALUES
        replaced = st.one_of(st.just(DELETE), values).map(lambda value: (path, value))
        added = st.tuples(st.text(min_size=1, max_size=8), JSON_VALUES).map(
            lambda extra: ((*path[:-1], "x-" + extra[0]), extra[1])
        )
        return replaced | added

    return st.sampled_from(paths).flatmap(change)


def value_at(document: Any, path: Path) -> Any:
    """The value at ``path`` in ``document``."""
    for key in path:
        document = document[key]
    return document


def wrong_type(value: Any) -> Any:
    """A value of another JSON type than ``value``."""
    return "text" if isinstance(value, dict | list | bool | int | float) or value is None else 7


def mutated(base: dict[str, Any], changes: list[tuple[Path, Any]]) -> dict[str, Any]:
    """``base`` with ``changes`` applied in order (a change below an already replaced field is skipped)."""
    payload = deepcopy(base)
    for path, value in changes:
        parent: Any = payload
        for key in path[:-1]:
            try:
                parent = parent[key]
            except (KeyError, IndexError, TypeError):
                parent = None
                break
        last = path[-1]
        if isinstance(parent, dict):
            if value is DELETE:
                parent.pop(last, None)
            else:
                parent[last] = value
        elif isinstance(parent, list) and isinstance(last, int) and last < len(parent):
            if value is DELETE:
                del parent[last]
            else:
                parent[last] = value
    return payload


async def fuzz(stack: TeamsStack, base: dict[str, Any], caplog: pytest.LogCaptureFixture) -> Counter[int]:
    """Post ``EXAMPLES`` mutations of ``base``; assert each got an allowed status; the statuses seen."""
    loop = asyncio.get_running_loop()
    statuses: Counter[int] = Counter()

    def on_loop(work: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(work, loop).result(timeout=30)

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(st.lists(mutation(paths_of(base)), min_size=1, max_size=3))
    def random_changes(changes: list[tuple[Path, Any]]) -> None:
        post_one(changes)

    def post_one(changes: list[tuple[Path, Any]]) -> None:
        status, body = on_loop(stack.post(mutated(base, changes)))
        on_loop(stack.settle())
        statuses[status] += 1
        assert status in ALLOWED, (status, changes)
        assert "Traceback" not in repr(body)

    def every_field_once() -> None:
        for path in paths_of(base):
            post_one([(path, DELETE)])
            post_one([(path, wrong_type(value_at(base, path)))])

    with caplog.at_level(logging.WARNING):
        await asyncio.to_thread(every_field_once)
        await asyncio.to_thread(random_changes)
    unexpected = [r.getMessage() for r in caplog.records if r.getMessage() in UNEXPECTED]
    assert unexpected == []
    return statuses


async def assert_still_healthy(stack: TeamsStack, reply: str) -> None:
    async with stack.session.get(f"{stack.url}/healthz") as response:
        assert response.status == 200
    before = len(stack.connector.texts())
    assert await stack.say("hello", conversation=PERSONAL_CHAT, conversation_type="personal") == 202
    assert stack.connector.texts()[before:] == [reply]


def asks_to_delete_unless_greeted(messages: list[Any]) -> Any:
    """The model's answer: a sensitive call for anything but "hello"."""
    return says("Hello again.") if messages[-1].text == "hello" else asks_for("delete_file", path="x.log")


async def test_mutated_message_activities_never_get_a_500_and_run_no_tool(tmp_path, fakes, caplog):
    # Every message the model sees asks for a sensitive call: it may pause, never run.
    stack = await TeamsStack.open(tmp_path, *fakes, replies=[asks_to_delete_unless_greeted] * (4 * EXAMPLES))
    try:
        statuses = await fuzz(stack, stack.message("delete x.log"), caplog)

        assert statuses[400] and statuses[202], statuses  # both garbled and still-valid messages were sent
        assert stack.tools.executed == []
        await assert_still_healthy(stack, "Hello again.")
    finally:
        await stack.aclose()


async def test_mutated_card_clicks_never_get_a_500_and_run_no_tool(tmp_path, fakes, caplog):
    # Two approvals are needed: a click, however valid, can at most count as one of them.
    stack = await TeamsStack.open(tmp_path, *fakes, replies=[asks_for("delete_file", path="x.log"), says("Hi.")])
    try:
        await stack.engine.storage.policies.set_rule("global", "delete_file", updated_by=ADA.id, quorum=2)
        await stack.say("delete x.log")
        request, _ = stack.last_card()
        card = await stack.view_as(ANA)
        [approval_id] = approval_ids(card)
        click = stack.invoke(action_value(card, "edit"), ANA, card_activity_id=request.answered_id)

        statuses = await fuzz(stack, click, caplog)

        assert statuses[400] and statuses[200], statuses
        assert stack.tools.executed == []
        assert (await stack.engine.get_approval(approval_id)).is_pending
        await assert_still_healthy(stack, "Hi.")
    finally:
        await stack.aclose()

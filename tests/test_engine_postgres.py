"""End to end through the engine on PostgreSQL: the same engine, the same flow, another backend.

Each test's engines share one fresh schema of the test server, as replicas of the bot on several hosts
share one database.
"""

from __future__ import annotations

import asyncio

import pytest

from bot.engine.model import DecisionRequest
from bot.llm import ScriptedChatGenerator
from storage.postgres import PostgresStorage
from tests.fakes.engine_kit import (
    ADMIN,
    REQUESTER,
    Harnesses,
    asks_for,
    bounded,
    dangling_calls,
    echoes_results,
    says,
    tool_results,
)


@pytest.fixture
async def harnesses(tmp_path):
    opened = Harnesses(tmp_path)
    yield opened
    await opened.aclose()


def confirm(approval, actor: str = REQUESTER) -> DecisionRequest:
    return DecisionRequest(approval.approval_id, actor, "confirm", place=approval.thread.place)


async def test_a_message_pauses_a_decision_resumes_and_the_answer_is_posted(harnesses, postgres_url):
    h = await harnesses.open(database_url=postgres_url, replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    assert isinstance(h.engine.storage, PostgresStorage)
    assert not h.db_path.exists(), "no SQLite file is opened beside PostgreSQL"

    [approval] = await h.paused_approvals("delete a.txt")
    assert h.tools.executed == []
    result = await h.engine.decide(confirm(approval))
    reply = await bounded(h.surface.next_reply())
    await h.engine.wait_idle()

    assert result.resumed
    assert reply.text == "results: deleted a.txt"
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]
    history = await h.history()
    assert dangling_calls(history) == []
    assert tool_results(history) == [("delete_file", "deleted a.txt", False)]
    assert (await h.run_of(approval.run_id)).status == "finished"
    assert [e.actor for e in await h.audit("approved")] == [REQUESTER]


async def test_two_replicas_deciding_one_approval_at_once_execute_it_once(harnesses, postgres_url):
    replies = [asks_for("delete_file", path="a.txt"), says("Deleted.")]
    first = await harnesses.open(database_url=postgres_url, replies=replies)
    second = await harnesses.reopen(first)  # another replica, its own pool, the same database
    [approval] = await first.paused_approvals("delete a.txt")

    outcomes = await bounded(
        asyncio.gather(
            first.engine.decide(confirm(approval, REQUESTER)),
            second.engine.decide(confirm(approval, ADMIN)),
            return_exceptions=True,
        )
    )
    # Both replicas also try to resume the run, as a restart or a sweep might.
    await asyncio.gather(first.engine.resume(approval.run_id), second.engine.resume(approval.run_id))
    await first.engine.wait_idle()
    await second.engine.wait_idle()

    assert sum(not isinstance(o, Exception) for o in outcomes) == 1
    assert [type(o).__name__ for o in outcomes if isinstance(o, Exception)] == ["AlreadyDecided"]
    assert first.tools.runs_of("delete_file") == [{"path": "a.txt"}]
    assert [r.text for r in first.surface.replies + second.surface.replies] == ["Deleted."]


async def test_the_click_reaches_another_replica_after_the_first_one_stopped(harnesses, postgres_url):
    before = await harnesses.open(database_url=postgres_url, replies=[asks_for("delete_file", path="a.txt")])
    [approval] = await before.paused_approvals("delete a.txt")
    await before.close()

    after = await harnesses.reopen(before, generator=ScriptedChatGenerator([echoes_results]))
    result = await after.engine.decide(confirm(approval))
    reply = await bounded(after.surface.next_reply())
    await after.engine.wait_idle()

    assert result.resumed and reply.text == "results: deleted a.txt"
    assert before.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert (await after.run_of(approval.run_id)).status == "finished"

"""PostgreSQL faults: the server restarts or is unreachable, and countersign keeps its word.

These tests run a PostgreSQL server of their own (``tests/fakes/private_postgres.py``) that they stop
and start again; countersign is never restarted. Each test gets a fresh database on it.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from psycopg_pool import PoolTimeout

from bot.config import Config
from bot.engine.engine import Engine
from bot.engine.errors import MESSAGE_NOT_SAVED, DatabaseUnavailable
from bot.engine.model import DecisionRequest
from bot.engine.sentences import STEP_NOT_SAVED
from bot.llm import OpenAIChatGenerator, ScriptedChatGenerator
from bot.messages import ChatMessage
from storage import StorageError
from storage.postgres import open_postgres_storage
from tests.adapters.slack.test_approvals import ALICE, CHANNEL, Ops, ask
from tests.fakes.bot_connector import FakeBotConnector, FakeBotFrameworkIssuer, trust_issuer
from tests.fakes.engine_kit import REQUESTER, Harnesses, asks_for, bounded, echoes_results, says
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.private_postgres import PrivatePostgres
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.slack_stack import SlackStack, assert_every_payload_valid, button_values
from tests.fakes.teams_stack import ANA, TeamsStack

TRY_AGAIN = "I can't reach my database right now; nothing was decided — please try again in a minute."


@pytest.fixture
def database_url(server: PrivatePostgres) -> Iterator[str]:
    yield server.fresh_database_url()
    # A test that stopped the server and failed before starting it again leaves it running for the next.
    try:
        server.start_again()
    except Exception:
        pass  # already running


async def test_the_pool_replaces_every_connection_a_restart_killed_and_the_next_statements_succeed(
    server: PrivatePostgres, database_url: str
):
    storage = await open_postgres_storage(database_url, pool_min=4)
    try:
        await storage.messages.write_messages("t", [ChatMessage.from_user("before the restart")])
        server.restart()

        started = time.monotonic()
        await bounded(storage.messages.write_messages("t", [ChatMessage.from_user("after the restart")]))
        first = time.monotonic() - started
        for n in range(8):  # every idle connection of the pool died with the server: none reaches a caller
            assert await storage.messages.count_messages("t") == 2, n
        assert [m.text for m in await storage.messages.retrieve_messages("t")] == [
            "before the restart",
            "after the restart",
        ]
        assert first < 1.5, f"the first statement after a restart waited {first:.2f} s"
    finally:
        await storage.aclose()


async def test_a_statement_while_the_server_is_down_fails_fast_as_a_storage_error_and_works_once_it_is_back(
    server: PrivatePostgres, database_url: str
):
    storage = await open_postgres_storage(database_url)
    try:
        server.stop()
        started = time.monotonic()
        with pytest.raises(StorageError):
            await storage.messages.count_messages("t")
        assert time.monotonic() - started < 3.0, "a caller must learn within Slack's 3 s deadline"
        for _ in range(3):  # once the pool knows the server refuses connections, callers hear it sooner
            started = time.monotonic()
            with pytest.raises(StorageError):
                await storage.messages.count_messages("t")
            assert time.monotonic() - started < 1.0
        server.start_again()
        assert await bounded(storage.messages.count_messages("t")) == 0
    finally:
        await storage.aclose()


async def test_the_database_restarted_while_idle_then_a_decision_resumes_the_run_once(
    harnesses: Harnesses, server: PrivatePostgres, database_url: str
):
    h = await harnesses.open(database_url=database_url, replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")

    server.restart()

    result = await bounded(
        h.engine.decide(DecisionRequest(approval.approval_id, REQUESTER, "confirm", place=approval.thread.place))
    )
    reply = await bounded(h.surface.next_reply())
    await h.engine.wait_idle()
    assert result.resumed
    assert reply.text == "results: deleted a.txt"
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert (await h.run_of(approval.run_id)).status == "finished"


async def test_a_decision_while_the_database_is_down_is_refused_with_one_sentence_and_can_be_made_again_later(
    harnesses: Harnesses, server: PrivatePostgres, database_url: str
):
    h = await harnesses.open(database_url=database_url, replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")
    confirm = DecisionRequest(approval.approval_id, REQUESTER, "confirm", place=approval.thread.place)

    server.stop()
    with pytest.raises(DatabaseUnavailable) as refused:
        await bounded(h.engine.decide(confirm))
    assert str(refused.value) == TRY_AGAIN
    with pytest.raises(DatabaseUnavailable):
        await bounded(h.engine.check_can_decide(approval.approval_id, REQUESTER, approval.thread.place))
    server.start_again()

    assert (await h.engine.storage.approvals.get(approval.approval_id)).status == "pending", "nothing half-written"
    assert h.tools.executed == []
    result = await bounded(h.engine.decide(confirm))
    await bounded(h.surface.next_reply())
    await h.engine.wait_idle()
    assert result.resumed
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert [e.actor for e in await h.audit("approved")] == [REQUESTER]


async def test_a_step_that_cannot_be_written_is_told_in_the_thread_and_recovery_continues_it_once_the_database_is_back(
    harnesses: Harnesses, server: PrivatePostgres, database_url: str
):
    def database_gone_meanwhile(messages: list[ChatMessage]) -> ChatMessage:
        server.stop()  # while the model thinks: the pause it asks for cannot be written, nor the run's failure
        return asks_for("delete_file", path="a.txt")

    h = await harnesses.open(database_url=database_url, replies=[database_gone_meanwhile, says("Deleted nothing.")])
    with pytest.raises(StorageError):  # after the run, the thread's drain cannot read its inbox either
        await bounded(h.say("delete a.txt"), within=30)

    assert [r.text for r in h.surface.replies] == [STEP_NOT_SAVED], "told at once, not from the unreachable outbox"
    assert h.surface.renders == [] and h.tools.executed == []
    [run_id] = h.engine.parts.runner.stranded
    server.start_again()

    await bounded(h.engine.recover(), within=30)
    await bounded(h.engine.wait_idle(), within=30)

    assert (await h.run_of(run_id)).status == "finished"
    assert [r.text for r in h.surface.replies][-1] == "Deleted nothing."
    assert h.tools.executed == [] and not h.engine.parts.runner.stranded
    assert [e.subject for e in await h.audit("recovered")] == [run_id]


@pytest.fixture
async def slack_stack(
    tmp_path: Path, database_url: str
) -> AsyncIterator[tuple[SlackStack, FakeSlackAPI, FakeOpenAIServer, Ops]]:
    ops = Ops()
    async with FakeSlackAPI() as slack, FakeOpenAIServer() as openai:
        generator = OpenAIChatGenerator(api_key="test", api_base_url=openai.base_url, max_retries=0)
        stack = await SlackStack.start(
            db_path=tmp_path / "unused.db",
            slack=slack,
            generator=generator,
            tools=ops.tools(),
            database_url=database_url,
            default_ttl_seconds=3600,
        )
        try:
            yield stack, slack, openai, ops
        finally:
            await stack.stop()
        assert_every_payload_valid(slack.calls)


async def test_in_slack_a_click_while_the_database_is_down_is_told_to_try_again_and_an_event_gets_a_503(
    slack_stack, server: PrivatePostgres
):
    stack, slack, openai, ops = slack_stack
    openai.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
    openai.enqueue_text("Deleted old.log.")
    mention_ts, approval = await ask(stack, slack, "delete old.log")
    [approval_id] = button_values(approval.args["blocks"], "cs_approve")

    def click():
        return stack.requests.click(
            "cs_approve",
            approval_id,
            user=ALICE,
            channel=CHANNEL,
            message_ts=approval.response["ts"],
            thread_ts=mention_ts,
        )

    server.stop()
    started = time.monotonic()
    reply = await click()
    assert reply.status == 200 and time.monotonic() - started < 3.0, "acknowledged within Slack's deadline"
    [told] = await slack.wait_for("chat.postEphemeral")
    assert told.args["user"] == ALICE and told.args["text"] == TRY_AGAIN

    started = time.monotonic()
    event = await stack.requests.event(stack.requests.message(ALICE, CHANNEL, "are you there?", thread_ts=mention_ts))
    assert event.status == 503, "a message that could not be stored is redelivered by Slack"
    assert time.monotonic() - started < 3.0
    await stack.settle()
    assert ops.deleted == []

    server.start_again()
    reply = await click()
    assert reply.status == 200
    await stack.settle()
    assert ops.deleted == ["old.log"]
    assert slack.calls_to("chat.update"), "the approval message shows the decision"


async def test_the_configured_pool_size_caps_the_connections_of_a_replica(tmp_path: Path, database_url: str):
    config = Config(db_path=tmp_path / "unused.db", database_url=database_url, db_pool_size=3)
    engine = await Engine.create(config, generator=ScriptedChatGenerator([]), tools=[])
    try:
        pool = engine.storage.db.pool
        assert pool.max_size == 3
        holding = [await pool.getconn() for _ in range(3)]
        with pytest.raises(PoolTimeout):
            await pool.getconn(timeout=0.2)
        for conn in holding:
            await pool.putconn(conn)
    finally:
        await engine.stop()


@pytest.fixture
async def teams_fakes(monkeypatch):
    async with FakeBotConnector() as connector, FakeBotFrameworkIssuer() as issuer:
        trust_issuer(monkeypatch, issuer)
        yield connector, issuer


async def test_in_teams_a_message_and_a_click_while_the_database_is_down_are_answered_with_one_sentence(
    tmp_path: Path, teams_fakes, server: PrivatePostgres, database_url: str
):
    connector, _issuer = teams_fakes
    stack = await TeamsStack.open(
        tmp_path,
        *teams_fakes,
        replies=[asks_for("delete_file", path="a.txt"), echoes_results],
        database_url=database_url,
    )
    try:
        accepted = await stack.say("delete a.txt")
        card = await stack.view_as(ANA)  # the requester's own view, opened before the database went down

        server.stop()
        started = time.monotonic()
        status = await stack.say("anyone there?")
        assert status == accepted and time.monotonic() - started < 3.0, "never a 500, within the deadline"
        assert connector.texts()[-1] == MESSAGE_NOT_SAVED
        status, body = await stack.click("approve", card=card)
        assert status == 200
        assert TRY_AGAIN in json.dumps(body, ensure_ascii=False)
        assert stack.tools.executed == []

        server.start_again()
        status, _body = await stack.click("approve", card=card)
        await stack.settle()
        assert status == 200
        assert stack.tools.executed == [("delete_file", {"path": "a.txt"})]
    finally:
        await stack.aclose()

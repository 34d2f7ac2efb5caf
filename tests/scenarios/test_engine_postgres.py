"""End to end through the engine on PostgreSQL: the same engine, the same flow, another backend.

Each test's engines share one fresh schema of the test server, as replicas of the bot on several hosts
share one database.
"""

from __future__ import annotations

import asyncio

from bot.engine.model import AdminRequest, DecisionRequest
from bot.llm import ScriptedChatGenerator
from bot.tools import tool
from storage.postgres import PostgresStorage
from tests.fakes.engine_kit import (
    ADMIN,
    REQUESTER,
    asks_for,
    bounded,
    dangling_calls,
    echoes_results,
    says,
    tool_results,
)


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


async def test_messages_to_a_thread_whose_run_is_active_on_another_replica_are_queued_and_answered_in_order(
    harnesses, postgres_url
):
    started, release = asyncio.Event(), asyncio.Event()

    @tool(confirmation_default="never")
    async def migrate_db(target: str) -> str:
        """Migrate the database (slow).

        :param target: The target version.
        """
        started.set()
        await release.wait()
        return f"migrated to {target}"

    first = await harnesses.open(
        database_url=postgres_url,
        replies=[asks_for("migrate_db", target="v2"), echoes_results, says("second answer"), says("third answer")],
        extra_tools=[migrate_db],
    )
    second = await harnesses.reopen(first, generator=ScriptedChatGenerator([says("never used")]))
    running = asyncio.create_task(first.engine.handle_message(first.inbound("migrate to v2")))
    await bounded(started.wait())

    # While the first replica's run works, the thread's next messages reach the other replica: each is
    # queued there (the call returns at once), none starts a run beside the active one.
    later = second.inbound("and then?")
    await bounded(second.engine.handle_message(later))
    last = second.inbound("and finally?")
    await bounded(second.engine.handle_message(last))
    assert [q.message_id for q in second.surface.queued] == [later.message_id, last.message_id]
    assert [i.message["text"] for i in await first.engine.storage.inbox.waiting(first.thread().key)] == [
        "and then?",
        "and finally?",
    ]
    assert second.generator.calls == []

    release.set()
    await bounded(running)
    await first.engine.wait_idle()
    await second.engine.wait_idle()
    replies = first.surface.replies_in(first.thread()) + second.surface.replies_in(first.thread())
    assert replies == ["results: migrated to v2", "second answer", "third answer"]
    history = await first.history()
    assert [(m.role.value, m.text) for m in history if m.text] == [
        ("user", "migrate to v2"),
        ("assistant", "results: migrated to v2"),
        ("user", "and then?"),
        ("assistant", "second answer"),
        ("user", "and finally?"),
        ("assistant", "third answer"),
    ]
    assert dangling_calls(history) == []
    assert await first.engine.storage.inbox.waiting(first.thread().key) == []
    assert [r.status for r in await first.engine.storage.runs.list_by_status("running", "paused", "resuming")] == []


async def test_a_review_on_another_replica_releases_the_edited_result_and_the_tool_ran_once(harnesses, postgres_url):
    replies = [asks_for("delete_file", path="a.txt"), echoes_results]
    first = await harnesses.open(database_url=postgres_url, replies=replies)
    await first.engine.admin(AdminRequest("slack", "T1", "C1", ADMIN, "policy set delete_file review"))
    [review] = await first.paused_approvals("delete a.txt")
    assert (review.kind, review.result) == ("review", "deleted a.txt")
    second = await harnesses.reopen(first)

    await second.engine.decide(
        DecisionRequest(review.approval_id, REQUESTER, "modify", edited_result="gone", place=review.thread.place)
    )
    await second.engine.wait_idle()

    assert first.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert tool_results(await second.history()) == [("delete_file", "gone", False)]
    stored = await second.engine.get_approval(review.approval_id)
    assert (stored.status, stored.result, stored.final_result) == ("modified", "deleted a.txt", "gone")


# --- wake-ups: the engines here never sweep, so only a NOTIFY can get a waiting message started ---------


async def test_a_message_reaching_a_stopping_replica_is_answered_at_once_by_another_woken_by_notify(
    harnesses, postgres_url
):
    first = await harnesses.open(database_url=postgres_url, replies=[says("answered by the first replica")])
    second = await harnesses.reopen(first, generator=ScriptedChatGenerator([says("never used")]))
    await second.engine.stop_taking_work(grace=0)  # draining for a deploy: the load balancer still routes to it

    await bounded(second.engine.handle_message(second.inbound("are you there?")))

    reply = await bounded(first.surface.next_reply())
    assert reply.text == "answered by the first replica"
    await first.engine.wait_idle()
    assert second.generator.calls == []
    assert await first.engine.storage.inbox.waiting(first.thread().key) == []


async def test_messages_left_waiting_by_a_replica_that_stops_after_its_run_are_started_by_another_at_once(
    harnesses, postgres_url
):
    started, release = asyncio.Event(), asyncio.Event()

    @tool(confirmation_default="never")
    async def migrate_db(target: str) -> str:
        """Migrate the database (slow).

        :param target: The target version.
        """
        started.set()
        await release.wait()
        return f"migrated to {target}"

    first = await harnesses.open(
        database_url=postgres_url,
        replies=[asks_for("migrate_db", target="v2"), echoes_results],
        extra_tools=[migrate_db],
    )
    second = await harnesses.reopen(first, generator=ScriptedChatGenerator([says("second answer")]))
    running = asyncio.create_task(first.engine.handle_message(first.inbound("migrate to v2")))
    await bounded(started.wait())
    await bounded(second.engine.handle_message(second.inbound("and then?")))  # queued behind the first's run

    stopping = asyncio.create_task(first.engine.stop_taking_work(grace=10))
    release.set()  # the run finishes within the grace period; the first replica starts nothing new
    await bounded(asyncio.gather(running, stopping))

    reply = await bounded(second.surface.next_reply())
    assert reply.text == "second answer"
    await second.engine.wait_idle()
    assert first.surface.replies_in(first.thread()) == ["results: migrated to v2"]
    history = await second.history()
    assert [(m.role.value, m.text) for m in history if m.text][-2:] == [
        ("user", "and then?"),
        ("assistant", "second answer"),
    ]


async def test_a_run_released_past_the_grace_period_is_taken_over_at_once_by_a_replica_woken_by_notify(
    harnesses, postgres_url
):
    started = asyncio.Event()

    @tool(confirmation_default="never")
    async def migrate_db(target: str) -> str:
        """Migrate the database (slow).

        :param target: The target version.
        """
        started.set()
        await asyncio.Event().wait()  # still running when the grace period ends
        return f"migrated to {target}"

    first = await harnesses.open(
        database_url=postgres_url,
        replies=[asks_for("migrate_db", target="v2")],
        extra_tools=[migrate_db],
    )
    second = await harnesses.reopen(first, generator=ScriptedChatGenerator([says("carried on elsewhere")]))
    running = asyncio.create_task(first.engine.handle_message(first.inbound("migrate to v2")))
    await bounded(started.wait())

    await bounded(first.engine.stop_taking_work(grace=0.1))  # the run is cancelled and released, its lease expired
    await asyncio.gather(running, return_exceptions=True)

    notice = await bounded(second.surface.next_reply())
    assert "outcome of migrate_db is unknown" in notice.text
    assert (await bounded(second.surface.next_reply())).text == "carried on elsewhere"
    await second.engine.wait_idle()
    assert [r.status for r in await second.engine.storage.runs.list_by_status("running", "paused", "resuming")] == []

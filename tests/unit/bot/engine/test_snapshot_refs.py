"""A paused run's stored snapshot refers to the thread's stored history instead of copying it.

Real engines on a real SQLite file or PostgreSQL schema, a scripted model that records what it was sent,
recording tools. What is pinned: the stored snapshot stays the same size however long the thread is; a
resume (after a restart too) gives the model exactly the messages the run paused with, never ones
written to the thread later; a history that can no longer be read as it was fails the run closed;
self-contained snapshots (stored by earlier versions, or ``AgentSnapshot.to_dict()``) still work.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot import jsonio
from bot.agent import AgentSnapshot, SnapshotError
from bot.agent.snapshot import REFERENCED_SCHEMA_VERSION, SNAPSHOT_SCHEMA_VERSION, snapshot_data
from bot.agent.stored_snapshot import (
    HISTORY_REF_KEY,
    HistoryUnavailable,
    load_snapshot,
    stored_snapshot_data,
    stored_step,
)
from bot.engine.model import DecisionRequest
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ToolCall
from storage import open_async_storage
from tests.fakes.engine_kit import (
    PLATFORM,
    REQUESTER,
    Harnesses,
    asks,
    asks_for,
    call,
    dangling_calls,
    echoes_results,
    sent_to_llm,
    tool_results,
)
from tests.fakes.recording_surface import RecordingSurface
from tests.unit.bot.engine.test_decisions import admin

THREAD = "1700000000.000100"

OLD_SNAPSHOT = Path(__file__).parents[3] / "fixtures" / "snapshot_v1_stdlib_json.json"
"""A snapshot as countersign wrote it before orjson (and before snapshots referred to the history)."""


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(request, tmp_path):
    """Open engines on SQLite (a file) or PostgreSQL (a schema of this test's own): ``await backend.open()``."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    opened = Harnesses(tmp_path)
    opened.database_url = url

    async def open_harness(**kwargs):
        return await opened.open(database_url=url, **kwargs)

    opened.open_on_backend = open_harness
    yield opened
    await opened.aclose()


def earlier_conversation(n: int) -> list[ChatMessage]:
    """``n`` stored messages of a conversation held before the one under test."""
    return [
        ChatMessage.from_user(f"question {i}") if i % 2 == 0 else ChatMessage.from_assistant(f"answer {i}")
        for i in range(n)
    ]


def confirm(approval) -> DecisionRequest:
    return DecisionRequest(approval.approval_id, REQUESTER, "confirm", place=approval.thread.place)


def as_data(messages: list[ChatMessage]) -> list[dict]:
    return [m.to_dict() for m in messages]


async def stored(h, run_id: str) -> dict:
    """The run's snapshot as the runs table holds it."""
    return await h.engine.storage.runs.snapshot(run_id)


async def paused_after(backend, prior: int, *, review: bool = False, thread: str = THREAD, **open_kwargs):
    """An engine whose thread holds ``prior`` earlier messages, paused on a delete_file call (or its review)."""
    h = await backend.open_on_backend(replies=[asks_for("delete_file", path="a.txt")], **open_kwargs)
    return h, await pause_in(h, prior, review=review, thread=thread)


async def pause_in(h, prior: int, *, review: bool = False, thread: str = THREAD):
    if review:
        assert "mode=review" in await admin(h, "policy set delete_file review")
    if prior:
        await h.engine.storage.messages.write_messages(h.thread(thread).key, earlier_conversation(prior))
    [approval] = await h.paused_approvals("delete a.txt", thread=thread)
    return approval


# --- size --------------------------------------------------------------------------------------------------


async def test_the_stored_snapshot_does_not_grow_with_the_thread(backend):
    h = await backend.open_on_backend(history_last_k=1000)  # the whole thread is the run's history
    sizes = {}
    for prior, thread in ((10, "1700000000.000010"), (500, "1700000000.000500")):
        h.generator.replies.append(asks_for("delete_file", path="a.txt"))
        approval = await pause_in(h, prior, thread=thread)
        data = await stored(h, approval.run_id)
        assert data["schema_version"] == REFERENCED_SCHEMA_VERSION
        sizes[prior] = len(jsonio.dumps(data))
        full = snapshot_data(await load_snapshot(data, h.engine.storage.messages))
        assert len(full["messages"]) == prior + 3  # the system prompt, the history, the question, the call

    # Only the count of referenced messages differs (one digit more); a self-contained copy of 490 more
    # messages would be tens of kilobytes larger.
    assert abs(sizes[500] - sizes[10]) <= 8, sizes


def test_a_snapshot_with_nothing_stored_to_refer_to_stays_self_contained() -> None:
    reply = ChatMessage.from_assistant(tool_calls=[ToolCall("delete_file", {"path": "a.txt"}, id="c1")])
    system = ChatMessage.from_system("Be careful.")
    unstored = AgentSnapshot(run_id="r1", messages=[system, reply], pending_tool_calls=reply.tool_calls)
    without_thread = AgentSnapshot(
        run_id="r2", messages=[system, ChatMessage.from_user("hi"), reply], pending_tool_calls=reply.tool_calls
    )
    unstored.history_id = "slack:T1:C1:1.1"

    for snapshot in (unstored, without_thread):
        data = stored_snapshot_data(snapshot)
        assert data["schema_version"] == SNAPSHOT_SCHEMA_VERSION and HISTORY_REF_KEY not in data
        assert AgentSnapshot.from_dict(data) == snapshot


# --- resuming ----------------------------------------------------------------------------------------------


async def test_a_resume_after_a_restart_gives_the_model_exactly_the_messages_it_paused_with(backend):
    before, approval = await paused_after(backend, 40)  # more than history_last_k (30): a window of it
    first_call = sent_to_llm(before.generator, 0)
    data = await stored(before, approval.run_id)
    assert data["schema_version"] == REFERENCED_SCHEMA_VERSION
    assert len(data["messages"]) == 2  # the system prompt and the step's reply; the rest by reference

    after = await backend.reopen(before, generator=ScriptedChatGenerator([echoes_results]))
    assert (await after.engine.decide(confirm(approval))).resumed
    await after.engine.wait_idle()

    [resumed_call] = after.generator.calls
    sent = resumed_call["messages"]
    reply = (await load_snapshot(data, after.engine.storage.messages)).step_message
    assert as_data(sent[: len(first_call)]) == as_data(first_call)
    assert as_data(sent[len(first_call) : -1]) == as_data([reply])
    assert tool_results(sent[-1:]) == [("delete_file", "deleted a.txt", False)]
    assert after.surface.replies[-1].text == "results: deleted a.txt"
    assert after.tools.executed == [("delete_file", {"path": "a.txt"})]


async def test_a_snapshot_stored_self_contained_by_an_earlier_version_still_resumes(backend):
    before, approval = await paused_after(backend, 12)
    first_call = sent_to_llm(before.generator, 0)
    storage = before.engine.storage
    # What countersign stored before snapshots referred to the history: the whole transcript, inline.
    old = snapshot_data(await load_snapshot(await stored(before, approval.run_id), storage.messages))
    assert old["schema_version"] == SNAPSHOT_SCHEMA_VERSION and len(old["messages"]) == len(first_call) + 1
    await storage.runs.save_snapshot(approval.run_id, old)

    after = await backend.reopen(before, generator=ScriptedChatGenerator([echoes_results]))
    assert (await after.engine.decide(confirm(approval))).resumed
    await after.engine.wait_idle()

    sent = sent_to_llm(after.generator)
    assert as_data(sent[: len(first_call) + 1]) == as_data([*first_call, AgentSnapshot.from_dict(old).step_message])
    assert tool_results(sent[-1:]) == [("delete_file", "deleted a.txt", False)]
    assert after.tools.executed == [("delete_file", {"path": "a.txt"})]


async def test_messages_written_to_the_thread_after_the_pause_never_reach_the_resumed_run(backend):
    h, approval = await paused_after(backend, 6)
    h.generator.replies.append(echoes_results)
    first_call = sent_to_llm(h.generator, 0)
    later = [ChatMessage.from_user("written while paused"), ChatMessage.from_assistant("also later")]
    await h.engine.storage.messages.write_messages(h.thread().key, later)

    assert (await h.engine.decide(confirm(approval))).resumed
    await h.engine.wait_idle()

    sent = sent_to_llm(h.generator)
    assert not {m.id for m in later} & {m.id for m in sent}
    assert as_data(sent[: len(first_call)]) == as_data(first_call)
    assert len(sent) == len(first_call) + 2  # the step's reply and its result, nothing else
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]


async def test_a_run_whose_history_is_gone_fails_closed_and_says_so(backend):
    h, approval = await paused_after(backend, 6)
    h.generator.replies.append(echoes_results)
    await h.engine.storage.messages.delete_messages(h.thread().key)  # as a retention or erasure job would

    await h.engine.decide(confirm(approval))
    await h.engine.wait_idle()

    run = await h.run_of(approval.run_id)
    assert (run.status, run.error) == ("failed", "HistoryUnavailable")
    assert h.tools.executed == []  # never run with another history
    assert len(h.generator.calls) == 1  # the model is not asked again
    assert "no longer stored" in h.surface.replies[-1].text
    assert dangling_calls(await h.history()) == []


async def test_a_history_that_changed_under_the_reference_is_refused(tmp_path):
    storage = await open_async_storage(tmp_path / "cs.db")
    thread = "slack:T1:C1:1700000000.000100"
    try:
        history = earlier_conversation(5)
        await storage.messages.write_messages(thread, history)
        reply = ChatMessage.from_assistant(tool_calls=[ToolCall("delete_file", {"path": "a.txt"}, id="c1")])
        snapshot = AgentSnapshot(
            run_id="r1",
            messages=[ChatMessage.from_system("Be careful."), *history, reply],
            pending_tool_calls=reply.tool_calls,
            history_id=thread,
        )
        data = json.loads(jsonio.dumps(stored_snapshot_data(snapshot)))
        assert (await load_snapshot(json.loads(json.dumps(data)), storage.messages)).to_dict() == snapshot.to_dict()

        # The same number of messages up to the same one, but not the same messages.
        await storage.messages.delete_messages(thread)
        await storage.messages.write_messages(thread, [*earlier_conversation(4), history[-1]])
        with pytest.raises(HistoryUnavailable, match="no longer stored as it was"):
            await load_snapshot(json.loads(json.dumps(data)), storage.messages)
        # Fewer of them (the older ones pruned).
        await storage.messages.delete_messages(thread)
        await storage.messages.write_messages(thread, history[3:])
        with pytest.raises(HistoryUnavailable, match="2 of its 5 messages"):
            await load_snapshot(json.loads(json.dumps(data)), storage.messages)
        # The step alone needs no history: what supersede and recovery read.
        assert stored_step(json.loads(json.dumps(data))).step_message == reply
    finally:
        await storage.aclose()


# --- the stages and paths that read a stored snapshot ---------------------------------------------------------


async def test_a_review_pause_refers_to_the_history_and_releases_the_reviewed_result(backend):
    before, held = await paused_after(backend, 8, review=True)
    data = await stored(before, held.run_id)
    assert data["stage"] == "review" and data["schema_version"] == REFERENCED_SCHEMA_VERSION
    assert tool_results([ChatMessage.from_dict(m) for m in data["held_results"]]) == [
        ("delete_file", "deleted a.txt", False)
    ]
    first_call = sent_to_llm(before.generator)

    after = await backend.reopen(before, generator=ScriptedChatGenerator([echoes_results]))
    assert (await after.engine.decide(confirm(held))).resumed
    await after.engine.wait_idle()

    sent = sent_to_llm(after.generator)
    step = (await load_snapshot(data, after.engine.storage.messages)).step_message
    assert as_data(sent[: len(first_call) + 1]) == as_data([*first_call, step])
    assert tool_results(sent[len(first_call) :]) == [("delete_file", "deleted a.txt", False)]
    assert after.tools.executed == [("delete_file", {"path": "a.txt"})]  # ran once, before the review
    assert dangling_calls(await after.history()) == []


async def test_a_superseded_run_closes_its_step_from_the_referenced_snapshot(backend):
    h, approval = await paused_after(backend, 8)
    h.generator.replies.append(echoes_results)
    assert (await stored(h, approval.run_id))["schema_version"] == REFERENCED_SCHEMA_VERSION

    await h.say("never mind")
    await h.engine.wait_idle()

    assert (await h.engine.get_approval(approval.approval_id)).status == "superseded"
    assert h.tools.executed == []
    history = await h.history()
    assert dangling_calls(history) == []
    assert [m.text for m in history if m.text == "never mind"] == ["never mind"]


def test_agent_snapshot_from_dict_refuses_the_referenced_form_by_name() -> None:
    reply = ChatMessage.from_assistant(tool_calls=[ToolCall("delete_file", {"path": "a.txt"}, id="c1")])
    snapshot = AgentSnapshot(
        run_id="r1",
        messages=[ChatMessage.from_user("hi"), reply],
        pending_tool_calls=reply.tool_calls,
        history_id="slack:T1:C1:1.1",
    )
    data = stored_snapshot_data(snapshot)
    with pytest.raises(SnapshotError, match="refers to its thread's stored history"):
        AgentSnapshot.from_dict(data)
    assert AgentSnapshot.from_dict(snapshot.to_dict()) == snapshot  # the public form stays self-contained
    assert len(snapshot.to_dict()["messages"]) == 2 and "history_ref" not in snapshot.to_dict()


async def test_an_old_self_contained_snapshot_loads_without_reading_any_history(tmp_path):
    data = json.loads(OLD_SNAPSHOT.read_text(encoding="utf-8"))
    storage = await open_async_storage(tmp_path / "cs.db")  # holds no history at all
    try:
        loaded = await load_snapshot(json.loads(OLD_SNAPSHOT.read_text(encoding="utf-8")), storage.messages)
    finally:
        await storage.aclose()
    expected = AgentSnapshot.from_dict(data)
    assert as_data(loaded.messages) == as_data(expected.messages)
    assert (loaded.run_id, loaded.pending_tool_calls, loaded.decisions) == (
        expected.run_id,
        expected.pending_tool_calls,
        expected.decisions,
    )
    assert stored_step(json.loads(OLD_SNAPSHOT.read_text(encoding="utf-8"))).step_message == expected.step_message


async def test_a_run_pausing_twice_with_memories_resumes_each_time_with_exactly_its_transcript(backend):
    before = await backend.open_on_backend(replies=[asks_for("delete_file", path="a.txt")])
    await before.engine.storage.memories.add_memories(
        ["delete requests for scratch files are routine"], user_id=f"slack:T1:{REQUESTER}"
    )
    first = await pause_in(before, 5)
    paused_with = sent_to_llm(before.generator, 0)
    assert any((m.text or "").startswith("Relevant memories:") for m in paused_with)  # inline, never stored
    data = await stored(before, first.run_id)
    assert data["schema_version"] == REFERENCED_SCHEMA_VERSION and len(data["messages"]) == 3

    middle = await backend.reopen(before, generator=ScriptedChatGenerator([asks_for("delete_file", path="b.txt")]))
    await middle.engine.decide(confirm(first))
    await middle.engine.wait_idle()
    [second] = middle.surface.renders[-1].approvals
    assert second.run_id == first.run_id and second.approval_id != first.approval_id
    resumed_with = sent_to_llm(middle.generator, 0)
    assert as_data(resumed_with[: len(paused_with)]) == as_data(paused_with)

    after = await backend.reopen(middle, generator=ScriptedChatGenerator([echoes_results]))
    await after.engine.decide(confirm(second))
    await after.engine.wait_idle()

    sent = sent_to_llm(after.generator)
    assert as_data(sent[: len(resumed_with)]) == as_data(resumed_with)
    assert len(sent) == len(resumed_with) + 2  # the second step's reply and its result
    assert after.tools.executed == [("delete_file", {"path": "a.txt"}), ("delete_file", {"path": "b.txt"})]
    assert after.surface.replies[-1].text.startswith("results: deleted b.txt")


async def test_retention_keeps_the_history_a_paused_run_refers_to(backend):
    h, approval = await paused_after(backend, 6)
    h.generator.replies.append(echoes_results)
    first_call = sent_to_llm(h.generator, 0)
    idle = await h.engine.storage.messages.write_messages(h.thread("1600000000.000001").key, earlier_conversation(3))

    # Everything is older than the cutoff; only the idle thread goes (the paused run's thread is in use).
    pruned = await h.engine.storage.ops.prune(older_than=datetime.now(UTC) + timedelta(days=1))
    assert pruned.messages == idle

    assert (await h.engine.decide(confirm(approval))).resumed
    await h.engine.wait_idle()
    assert as_data(sent_to_llm(h.generator)[: len(first_call)]) == as_data(first_call)
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]


# --- the decision that completes a step starts the run and reads its history (issue 17) -----------------------


class ReadsTheRunWhileUpdating(RecordingSurface):
    """A surface that reads the run, and whether its engine works on it, each time a decided step is re-rendered.

    The re-render comes before the resume is handed over, so what it reads is the state the decision's own
    write left.
    """

    def __init__(self, engine) -> None:
        super().__init__()
        self.engine = engine
        self.seen: list[tuple[str, str | None, bool]] = []

    async def update_approvals(self, thread, message_ref, approvals):
        run = await self.engine.storage.runs.get(approvals[0].run_id)
        self.seen.append((run.status, run.owner, self.engine.lifecycle.fence(run.run_id) is not None))
        await super().update_approvals(thread, message_ref, approvals)


async def test_the_decision_that_completes_the_step_starts_the_run_in_its_own_write(backend):
    h = await backend.open_on_backend(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")
    surface = ReadsTheRunWhileUpdating(h.engine)
    h.engine.register_surface(PLATFORM, surface)  # from here on: the decision's re-render and the answer

    assert (await h.engine.decide(confirm(approval))).resumed
    await h.engine.wait_idle()

    # Running and owned by this process before its resume began: no start of its own after the decision.
    assert surface.seen == [("running", h.engine.lifecycle.owner, False)]
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert surface.replies[-1].text == "results: deleted a.txt"
    assert (await h.run_of(approval.run_id)).status == "finished"


async def test_a_decision_that_leaves_the_step_open_neither_claims_nor_starts_the_run(backend):
    h = await backend.open_on_backend(
        replies=[asks(call("delete_file", path="a.txt"), call("delete_file", path="b.txt")), echoes_results]
    )
    first, second = await h.paused_approvals("delete a.txt and b.txt")
    surface = ReadsTheRunWhileUpdating(h.engine)
    h.engine.register_surface(PLATFORM, surface)

    assert not (await h.engine.decide(confirm(first))).resumed
    assert surface.seen == [("paused", None, False)]
    assert (await h.engine.decide(confirm(second))).resumed
    await h.engine.wait_idle()

    assert surface.seen[1:] == [("running", h.engine.lifecycle.owner, False)]
    assert h.tools.executed == [("delete_file", {"path": "a.txt"}), ("delete_file", {"path": "b.txt"})]
    assert len(h.generator.calls) == 2
    assert (await h.run_of(first.run_id)).status == "finished"


async def test_a_history_replaced_under_the_reference_before_the_decision_fails_the_run_closed(backend):
    h, approval = await paused_after(backend, 6)
    h.generator.replies.append(echoes_results)
    thread = h.thread().key
    stored_history = await h.history()
    # As many messages up to the same newest one, but not the messages the run paused with.
    others = [ChatMessage.from_user(f"other {i}") for i in range(len(stored_history) - 1)]
    await h.engine.storage.messages.delete_messages(thread)
    await h.engine.storage.messages.write_messages(thread, [*others, stored_history[-1]])

    result = await h.engine.decide(confirm(approval))
    await h.engine.wait_idle()

    assert result.approval.status == "approved"  # the decision stands
    run = await h.run_of(approval.run_id)
    assert (run.status, run.error) == ("failed", "HistoryUnavailable")
    assert h.tools.executed == [] and len(h.generator.calls) == 1
    assert "no longer stored" in h.surface.replies[-1].text


async def test_a_malformed_history_reference_fails_the_run_closed_never_the_decision(backend):
    h, approval = await paused_after(backend, 6)
    h.generator.replies.append(echoes_results)
    data = await stored(h, approval.run_id)
    data[HISTORY_REF_KEY] = {**data[HISTORY_REF_KEY], "count": "several"}
    assert await h.engine.storage.runs.transition(approval.run_id, "paused", "paused", snapshot_json=data)

    result = await h.engine.decide(confirm(approval))
    await h.engine.wait_idle()

    assert result.resumed and result.approval.status == "approved"  # decided and audited, whatever the snapshot
    assert (await h.engine.get_approval(approval.approval_id)).status == "approved"
    run = await h.run_of(approval.run_id)
    assert (run.status, run.error) == ("failed", "SnapshotError")
    assert h.tools.executed == [] and len(h.generator.calls) == 1
    assert dangling_calls(await h.history()) == []

"""One run at a time per thread; different threads run at the same time; thread ids may contain ':'."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from bot.engine.model import DecisionRequest
from bot.messages import ChatMessage
from tests.fakes.engine_kit import REQUESTER, Harness, asks_for, bounded, says


class GatedGenerator:
    """A model whose every answer waits until the test opens the gate; it records who is waiting."""

    def __init__(self) -> None:
        self.waiting: list[str] = []
        self.gate = asyncio.Event()
        self.arrived = asyncio.Condition()

    async def run_async(self, messages, tools=None, generation_kwargs=None, streaming_callback=None):
        last_user = next(m.text for m in reversed(messages) if m.role == "user")
        async with self.arrived:
            self.waiting.append(last_user)
            self.arrived.notify_all()
        await self.gate.wait()
        return {"replies": [ChatMessage.from_assistant(f"answer to {last_user}")]}

    async def wait_for_waiting(self, count: int) -> None:
        async with self.arrived:
            await self.arrived.wait_for(lambda: len(self.waiting) >= count)


async def test_different_threads_run_at_the_same_time(tmp_path):
    generator = GatedGenerator()
    harness = await Harness.open(tmp_path, generator=generator)
    try:
        first = asyncio.create_task(harness.say("one", thread="100.1"))
        second = asyncio.create_task(harness.say("two", thread="200.2"))
        await bounded(generator.wait_for_waiting(2))  # both model calls are in flight at once
        generator.gate.set()
        await bounded(asyncio.gather(first, second))
        assert sorted(r.text for r in harness.surface.replies) == ["answer to one", "answer to two"]
    finally:
        await harness.close()


async def test_a_second_message_in_a_thread_waits_for_the_first_run_to_finish(tmp_path):
    generator = GatedGenerator()
    harness = await Harness.open(tmp_path, generator=generator)
    try:
        first = asyncio.create_task(harness.say("one"))
        await bounded(generator.wait_for_waiting(1))
        second = asyncio.create_task(harness.say("two"))
        # The second message must not reach the model while the first runs (bounded wait, expected to time out).
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(generator.wait_for_waiting(2), 0.5)
        assert generator.waiting == ["one"]
        generator.gate.set()
        await bounded(asyncio.gather(first, second))
        assert generator.waiting == ["one", "two"]
        assert [r.text for r in harness.surface.replies] == ["answer to one", "answer to two"]
    finally:
        await harness.close()


async def test_a_message_to_a_free_thread_starts_its_run_as_it_is_stored_and_a_busy_threads_message_only_waits(
    tmp_path,
):
    generator = GatedGenerator()
    harness = await Harness.open(tmp_path, generator=generator)
    storage = harness.engine.storage
    thread = harness.thread()
    try:
        # Stored and started in one write, before the adapter acknowledges the event: the run is this process's.
        received = await harness.engine.receive(harness.inbound("one"))
        run, item = received.started
        assert (run.status, run.owner, run.requester) == ("running", harness.engine.lifecycle.owner, REQUESTER)
        assert item.id == received.item_id and await storage.inbox.waiting(thread.key) == []
        assert generator.waiting == []  # the model is asked only once the message is processed
        first = asyncio.create_task(harness.engine.process(received))
        await bounded(generator.wait_for_waiting(1))

        # The thread is busy here: the next message is stored only, and runs when the first run ends.
        queued = await harness.engine.receive(harness.inbound("two"))
        assert queued.started is None
        assert [w.id for w in await storage.inbox.waiting(thread.key)] == [queued.item_id]
        second = asyncio.create_task(harness.engine.process(queued))
        generator.gate.set()
        await bounded(asyncio.gather(first, second))
        assert generator.waiting == ["one", "two"]
        assert [r.text for r in harness.surface.replies] == ["answer to one", "answer to two"]
        assert (await storage.runs.get(run.run_id)).status == "finished"
    finally:
        await harness.close()


async def test_ask_once_is_remembered_for_a_channel_whose_id_contains_colons(tmp_path):
    channel = "19:abc@thread.tacv2"
    replies = [
        asks_for("delete_file", path="a.txt"),
        says("Deleted."),
        asks_for("delete_file", path="a.txt"),
        says("Again."),
    ]
    harness = await Harness.open(tmp_path, replies=replies)
    try:
        await harness.engine.storage.policies.set_rule("global", "delete_file", updated_by="test", mode="once")
        approvals = await harness.paused_approvals("delete a.txt", channel=channel, thread=f"{channel};messageid=1")
        clicked = approvals[0]
        await harness.engine.decide(
            DecisionRequest(clicked.approval_id, REQUESTER, "confirm", place=clicked.thread.place)
        )
        await harness.engine.wait_idle()
        renders_before = len(harness.surface.renders)
        await harness.say("delete a.txt again", channel=channel, thread=f"{channel};messageid=1")
        assert len(harness.surface.renders) == renders_before  # not asked again
        assert harness.tools.runs_of("delete_file") == [{"path": "a.txt"}, {"path": "a.txt"}]
    finally:
        await harness.close()


async def test_an_unreadable_stored_policy_mode_fails_closed_and_asks(tmp_path):
    harness = await Harness.open(tmp_path, replies=[asks_for("read_logs", service="web"), says("ok")])
    try:
        await harness.engine.storage.policies.set_rule("global", "read_logs", updated_by="test", mode="never")
        with sqlite3.connect(harness.db_path) as raw:  # a row damaged outside countersign
            assert raw.execute("UPDATE policy_rules SET mode = 'bogus' WHERE tool_key = 'read_logs'").rowcount == 1
        approvals = await harness.paused_approvals("read the logs")
        assert [a.tool_name for a in approvals] == ["read_logs"]
        assert harness.tools.runs_of("read_logs") == []
    finally:
        await harness.close()


async def test_a_message_while_another_process_runs_the_thread_waits_and_runs_when_that_run_ends(tmp_path):
    harness = await Harness.open(tmp_path, replies=[says("here I am")])
    try:
        thread = harness.thread()
        await harness.engine.storage.runs.create(  # a run another replica is working on right now
            "run-elsewhere",
            chat_history_id=thread.key,
            platform=thread.platform,
            workspace=thread.workspace,
            channel=thread.channel,
            thread=thread.thread,
            requester=REQUESTER,
        )
        inbound = harness.inbound("are you there?")
        await harness.engine.handle_message(inbound)
        assert [q.message_id for q in harness.surface.queued] == [inbound.message_id]
        assert harness.surface.replies == [], "nobody is asked to send it again"
        assert await harness.history() == [] and harness.generator.calls == []
        [waiting] = await harness.engine.storage.inbox.waiting(thread.key)
        assert waiting.message["text"] == "are you there?"

        # The other replica finishes and drains the thread, as the process that ends a run does.
        assert await harness.engine.storage.runs.transition("run-elsewhere", "running", "finished")
        await harness.engine.lifecycle.drain(thread)
        assert harness.surface.replies_in(thread) == ["here I am"]
        assert [m.text for m in await harness.history()] == ["are you there?", "here I am"]
        assert await harness.engine.storage.inbox.waiting(thread.key) == []
    finally:
        await harness.close()

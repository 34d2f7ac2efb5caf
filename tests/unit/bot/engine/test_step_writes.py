"""A run's storage work goes with its steps' batches (issue 17), and the invariants hold, on both backends.

The agent's history writes wait for the step's next write (bot/engine/history.py): the model's reply whose calls
run goes with the ledger's ``begin`` (durable before the tool runs), the results and the answer with the run's
end. Reads a step needs ride along: the run (a stop asked elsewhere) with the call's outcome, the thread's
waiting messages with the pause or the end, the history and memories with the write that starts the run.
"""

from __future__ import annotations

import sqlite3

from bot.engine.history import StepHistory
from bot.engine.ledger import ledger_key
from bot.messages import ChatMessage
from bot.tools import tool
from storage import Batch, open_async_storage
from tests.fakes.engine_kit import (
    REQUESTER,
    Harnesses,
    asks_for,
    dangling_calls,
    recalls,
    says,
    sent_to_llm,
    tool_results,
)


def _peeking_tool(seen: dict, storage_of):
    @tool(confirmation_default="never")
    async def peek(name: str) -> str:
        """Look at something.

        :param name: What.
        """
        storage = storage_of()
        [run] = await storage.runs.list_by_status("running")
        seen["history"] = await storage.messages.retrieve_messages(run.chat_history_id)
        seen["entry"] = await storage.ledger.get(ledger_key(run.run_id, "call_peek"))
        return f"saw {name}"

    return peek


async def test_a_calls_reply_is_stored_with_its_ledger_entry_before_the_tool_runs(harnesses, database_url):
    seen: dict = {}
    reply = asks_for("peek", name="disk")
    reply.tool_calls[0].id = "call_peek"
    h = await harnesses.open(
        replies=[reply, says("done")],
        database_url=database_url,
        extra_tools=[_peeking_tool(seen, lambda: h.engine.storage)],
    )

    await h.say("peek at the disk")

    assert [m.role.value for m in seen["history"]] == ["user", "assistant"]
    assert seen["history"][-1].tool_calls[0].id == "call_peek", "the reply is durable before its call runs"
    assert seen["entry"].status == "executing"
    history = await h.history()
    assert tool_results(history) == [("peek", "saw disk", False)] and dangling_calls(history) == []
    assert history[-1].text == "done"


async def test_a_run_that_fails_after_its_tool_ran_keeps_the_result_in_its_history(harnesses, database_url):
    seen: dict = {}
    h = await harnesses.open(
        replies=[asks_for("peek", name="api"), RuntimeError("model down")],
        database_url=database_url,
        extra_tools=[_peeking_tool(seen, lambda: h.engine.storage)],
    )

    await h.say("peek at the api")

    [failed] = await h.engine.storage.runs.list_by_status("failed")
    history = await h.history()
    assert dangling_calls(history) == []
    [(name, result, error)] = tool_results(history)
    assert (name, result, error) == ("peek", "saw api", False), "the real result, written as the run failed"
    assert failed.error == "RuntimeError"


async def test_a_stop_asked_elsewhere_while_a_tool_runs_stops_the_run_after_that_step(harnesses, database_url):
    @tool(confirmation_default="never")
    async def long_job(name: str) -> str:
        """Run a long job.

        :param name: The job.
        """
        storage = h.engine.storage
        [run] = await storage.runs.list_by_status("running")
        assert await storage.runs.request_stop(run.run_id, "U_OTHER")  # as another process would
        return f"job {name} done"

    h = await harnesses.open(
        replies=[asks_for("long_job", name="x"), says("never said")], extra_tools=[long_job], database_url=database_url
    )

    await h.say("run job x")

    [stopped] = await h.engine.storage.runs.list_by_status("stopped")
    assert stopped.error == "stopped by U_OTHER"
    assert len(h.generator.calls) == 1, "the model is not asked again after the stop"
    history = await h.history()
    assert tool_results(history) == [("long_job", "job x done", False)] and dangling_calls(history) == []


async def test_a_run_started_on_arrival_reads_its_history_and_memories_as_it_would_itself(harnesses, database_url):
    h = await harnesses.open(replies=[says("first answer"), recalls], database_url=database_url)
    await h.engine.storage.memories.add_memories(["staging is eu-2"], user_id=f"slack:T1:{REQUESTER}")
    await h.say("hello")

    await h.say("where is staging?")

    sent = sent_to_llm(h.generator)
    assert [m.text for m in sent if m.role.value in ("user", "assistant")] == [
        "hello",
        "first answer",
        "where is staging?",
    ]
    assert any(m.role.value == "system" and "staging is eu-2" in m.text for m in sent)
    assert h.surface.replies_in(h.thread())[-1].startswith("- staging is eu-2")


async def test_a_message_that_arrives_while_a_run_works_starts_after_it_ends(harnesses, database_url):
    @tool(confirmation_default="never")
    async def note(text: str) -> str:
        """Note something.

        :param text: What.
        """
        # Another person writes in the thread while this run works: the message waits in the inbox.
        received = await h.engine.receive(h.inbound("and then?"))
        assert received is not None and received.started is None
        return "noted"

    h = await harnesses.open(
        replies=[asks_for("note", text="a"), says("first"), says("second")],
        extra_tools=[note],
        database_url=database_url,
    )

    await h.say("note a")
    await h.engine.wait_idle()

    assert h.surface.replies_in(h.thread()) == ["first", "second"]
    assert await h.engine.storage.inbox.waiting(h.thread().key) == []


async def test_a_run_whose_end_cannot_be_written_keeps_its_results_in_its_history(tmp_path):
    seen: dict = {}
    opened = Harnesses(tmp_path)
    try:
        h = await opened.open(
            replies=[asks_for("peek", name="db"), says("all fine")],
            extra_tools=[_peeking_tool(seen, lambda: h.engine.storage)],
        )
        # The run's end (its answer owed, its audit entry) is refused: the history it carried is written on failing.
        with sqlite3.connect(h.db_path) as raw:
            raw.execute(
                "CREATE TRIGGER audit_down BEFORE INSERT ON audit WHEN NEW.action = 'finished' "
                "BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
            )

        await h.say("peek at the db")

        [failed] = await h.engine.storage.runs.list_by_status("failed")
        history = await h.history()
        assert dangling_calls(history) == [] and tool_results(history) == [("peek", "saw db", False)]
        assert len(h.surface.replies_in(h.thread())) == 1  # the person is told
    finally:
        await opened.aclose()


async def test_step_history_holds_an_open_runs_writes_in_order_and_writes_any_other_at_once(tmp_path):
    storage = await open_async_storage(tmp_path / "cs.db")
    try:
        history = StepHistory(storage)
        history.open("run-1", "thread-a")
        first, second = ChatMessage.from_user("one"), ChatMessage.from_assistant("two")

        assert await history.write_messages("thread-a", [first]) is None
        assert await history.write_messages("thread-a", [second]) is None
        assert await history.write_messages("thread-b", [ChatMessage.from_user("elsewhere")]) == 1
        assert await storage.messages.retrieve_messages("thread-a") == []

        [write] = history.take("run-1")  # consecutive writes of the thread: one write, in order
        assert write.chat_history_id == "thread-a"
        assert [m.text for m in write.messages] == ["one", "two"]
        assert history.take("run-1") == []
        batch = Batch()
        write.add_to(batch)
        assert (await storage.batches.apply(batch)).applied
        assert [m.text for m in await storage.messages.retrieve_messages("thread-a")] == ["one", "two"]

        await history.write_messages("thread-a", [ChatMessage.from_user("three")])
        history.give_back("run-1", [write])
        assert [len(w.messages) for w in history.take("run-1")] == [2, 1]  # given back first, before newer ones
        await history.write_messages("thread-a", [ChatMessage.from_user("four")])
        assert len(history.close("run-1")) == 1  # dropped: a run closed writes nothing more
        assert await history.write_messages("thread-a", [ChatMessage.from_user("five")]) == 1  # not open: at once
    finally:
        await storage.aclose()

"""End to end through the engine: restarts, crashes, expiry, superseding messages and model failures."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from bot.agent.tool_runner import OUTCOME_UNKNOWN
from bot.engine.decisions import EXPIRED_FEEDBACK
from bot.engine.engine import SUPERSEDED_RESULT
from bot.engine.errors import ApprovalClosed, ApprovalExpired
from bot.engine.model import AdminRequest, DecisionRequest
from bot.llm import OpenAIChatGenerator, ScriptedChatGenerator
from bot.tools import tool
from tests.fakes.engine_kit import (
    ADMIN,
    CHANNEL,
    PLATFORM,
    REQUESTER,
    WORKSPACE,
    asks,
    asks_for,
    bounded,
    call,
    dangling_calls,
    echoes_results,
    says,
    sent_to_llm,
    tool_results,
)
from tests.fakes.openai_server import FakeOpenAIServer


def confirm(approval, actor: str = REQUESTER) -> DecisionRequest:
    return DecisionRequest(approval.approval_id, actor, "confirm", place=approval.thread.place)


# --- restarts ---------------------------------------------------------------------------------------------


async def test_a_click_after_a_restart_resumes_the_run_in_the_new_engine_and_runs_the_tool_once(harnesses):
    before = await harnesses.open(replies=[asks_for("delete_file", path="a.txt")])
    [approval] = await before.paused_approvals("delete a.txt")
    await before.close()

    after = await harnesses.reopen(before, generator=ScriptedChatGenerator([echoes_results]))
    assert (await after.engine.get_approval(approval.approval_id)).status == "pending"
    result = await after.engine.decide(confirm(approval))
    reply = await after.surface.next_reply()
    await after.engine.wait_idle()

    assert result.resumed
    assert before.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert reply.text == "results: deleted a.txt"
    [update] = after.surface.updates
    assert update.message_ref == before.surface.renders[0].message_ref, "the old message is updated in place"
    assert (await after.run_of(approval.run_id)).status == "finished"


async def test_a_paused_run_whose_tools_changed_across_a_restart_fails_cleanly_without_running(harnesses):
    before = await harnesses.open(replies=[asks_for("delete_file", path="a.txt")])
    [approval] = await before.paused_approvals("delete a.txt")
    await before.close()
    before.tool_list = [t for t in before.tool_list if t.name != "scale_service"]  # a new deploy drops a tool

    after = await harnesses.reopen(before, generator=ScriptedChatGenerator([says("still here")]))
    await after.engine.decide(confirm(approval))
    await after.engine.wait_idle()

    assert before.tools.executed == []
    assert (await after.run_of(approval.run_id)).status == "failed"
    last = after.surface.replies_in(after.thread())[-1]
    assert last.startswith("Sorry, this request cannot continue") and "scale_service" in last, last
    await after.say("hello?")
    assert after.surface.replies_in(after.thread())[-1] == "still here"
    assert dangling_calls(sent_to_llm(after.generator)) == []


async def test_a_corrupt_stored_snapshot_fails_only_its_run_and_the_thread_stays_usable(harnesses):
    harness = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), says("still here")])
    [approval] = await harness.paused_approvals("delete a.txt")
    with sqlite3.connect(harness.db_path) as raw:  # damaged outside countersign
        raw.execute("UPDATE runs SET snapshot_json = '{not json' WHERE run_id = ?", [approval.run_id])

    await harness.engine.decide(confirm(approval))
    await harness.engine.wait_idle()

    assert harness.tools.executed == []
    assert (await harness.run_of(approval.run_id)).status == "failed"
    assert harness.surface.replies_in(harness.thread())[-1].startswith("Sorry, something went wrong")
    await harness.say("hello?")
    assert harness.surface.replies_in(harness.thread())[-1] == "still here"


async def test_a_step_decided_before_a_crash_is_resumed_when_the_engine_starts(harnesses):
    before = await harnesses.open(replies=[asks_for("delete_file", path="a.txt")])
    [approval] = await before.paused_approvals("delete a.txt")
    # The decision landed but the process died before resuming: record it straight in storage.
    assert await before.engine.storage.approvals.decide(
        approval.approval_id, status="approved", decided_by=REQUESTER, now=before.clock()
    )
    await before.close()

    after = await harnesses.reopen(before, generator=ScriptedChatGenerator([echoes_results]))
    await after.engine.wait_idle()

    assert before.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert after.surface.replies_in(after.thread()) == ["results: deleted a.txt"]


async def test_a_crash_while_a_tool_runs_gives_outcome_unknown_never_reruns_it_and_continues_the_run(harnesses):
    started, release = asyncio.Event(), asyncio.Event()
    calls = []

    @tool(confirmation_default="never")
    async def deploy(version: str) -> str:
        """Deploy a version.

        :param version: The version to deploy.
        """
        calls.append(version)
        started.set()
        await release.wait()
        return f"deployed {version}"

    before = await harnesses.open(replies=[asks_for("deploy", version="1.2.3")], extra_tools=[deploy])
    running = asyncio.create_task(before.engine.handle_message(before.inbound("deploy 1.2.3")))
    await bounded(started.wait())
    # The process dies mid-tool: nothing in the engine gets to run its clean-up.
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    [run] = await before.engine.storage.runs.list_by_status("running")
    [entry] = await before.engine.storage.ledger.executing(run.run_id)

    # A process starting while the lease is live leaves the run alone ...
    bystander = await harnesses.reopen(before, generator=ScriptedChatGenerator([says("never used")]))
    assert (await bystander.run_of(run.run_id)).owner == run.owner
    assert bystander.surface.calls == [] and bystander.generator.calls == []
    # ... and once the lease has expired, the next process takes the run over and continues it.
    before.clock.advance(seconds=before.engine.config.lease_seconds + 1)
    after = await harnesses.reopen(before, generator=ScriptedChatGenerator([echoes_results]))
    await after.engine.wait_idle()

    assert calls == ["1.2.3"], "the tool was not run again"
    recovered = await after.run_of(run.run_id)
    assert (recovered.status, recovered.recoveries) == ("finished", 1)
    closed = await after.engine.storage.ledger.get(entry.tool_call_id)
    assert (closed.status, closed.result) == ("failed", OUTCOME_UNKNOWN)
    told, answer = after.surface.replies_in(after.thread())
    assert "restarted" in told and "deploy is unknown" in told and "not re-run" in told
    assert answer == f"results: {OUTCOME_UNKNOWN}"
    history = await after.history()
    assert dangling_calls(history) == []
    assert tool_results(history) == [("deploy", OUTCOME_UNKNOWN, True)]
    assert (await after.audit("recovered"))[0].details["unknown_outcome"] == ["deploy"]
    assert bystander.surface.calls == []

    await after.say("what happened?")
    sent = sent_to_llm(after.generator)
    assert dangling_calls(sent) == [] and ("deploy", OUTCOME_UNKNOWN, True) in tool_results(sent)
    assert calls == ["1.2.3"]
    release.set()


# --- expiry -----------------------------------------------------------------------------------------------


async def test_an_expired_approval_rejects_the_call_updates_the_rendering_and_resumes_the_run(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")

    h.clock.advance(hours=23)
    assert await h.engine.sweep_expired() == 0
    h.clock.advance(hours=2)
    assert await h.engine.sweep_expired() == 1
    await h.engine.wait_idle()

    assert h.tools.executed == []
    assert (await h.engine.get_approval(approval.approval_id)).status == "expired"
    assert h.surface.last_update_for(approval.approval_id).status == "expired"
    expired = EXPIRED_FEEDBACK.format(tool_name="delete_file")
    assert "expired without a decision" in expired
    assert tool_results(sent_to_llm(h.generator)) == [("delete_file", expired, True)]
    notice = f"{REQUESTER}: the approval for delete_file expired without a decision, so it was not run."
    assert h.surface.replies_in(h.thread()) == [notice, f"results: {expired}"]  # the requester is told
    assert [e.subject for e in await h.audit("expired")] == [approval.approval_id]
    with pytest.raises(ApprovalExpired):
        await h.engine.decide(confirm(approval))
    assert h.tools.executed == []


async def test_a_click_after_the_deadline_but_before_the_sweep_is_refused_as_expired(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    answer = await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, "ttl delete_file 30m"))
    assert "ttl=30m" in answer
    [approval] = await h.paused_approvals("delete a.txt")
    assert (approval.expires_at - approval.created_at).total_seconds() == 1800

    h.clock.advance(minutes=31)
    with pytest.raises(ApprovalExpired):
        await h.engine.decide(confirm(approval))
    await h.engine.wait_idle()

    assert h.tools.executed == []
    assert await h.engine.sweep_expired() == 1
    await h.engine.wait_idle()
    assert h.tools.executed == [] and (await h.engine.get_approval(approval.approval_id)).status == "expired"


# --- supersede --------------------------------------------------------------------------------------------


async def test_a_new_message_supersedes_the_paused_run_and_runs_with_a_valid_history(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), says("OK, I will not delete it.")])
    [approval] = await h.paused_approvals("delete a.txt")

    await h.say("actually, don't")

    assert (await h.engine.get_approval(approval.approval_id)).status == "superseded"
    assert h.surface.last_update_for(approval.approval_id).status == "superseded"
    assert (await h.run_of(approval.run_id)).status == "finished"
    sent = sent_to_llm(h.generator)
    assert dangling_calls(sent) == []
    assert tool_results(sent) == [("delete_file", SUPERSEDED_RESULT, True)]
    assert [m.text for m in sent if m.role == "user"] == ["delete a.txt", "actually, don't"]
    assert h.surface.replies_in(h.thread()) == ["OK, I will not delete it."]
    with pytest.raises(ApprovalClosed):
        await h.engine.decide(confirm(approval))
    await h.engine.wait_idle()
    assert h.tools.executed == []


async def test_supersede_sends_the_real_model_api_a_history_without_dangling_calls(harnesses):
    async with FakeOpenAIServer() as server:
        server.enqueue_tool_calls([("delete_file", {"path": "a.txt"}, "call_abc")])
        server.enqueue_text("Fine, nothing deleted.")
        generator = OpenAIChatGenerator(api_key="test", api_base_url=server.base_url, max_retries=0)
        h = await harnesses.open(generator=generator)
        await h.paused_approvals("delete a.txt")

        await h.say("never mind")

        messages = server.requests[-1]["messages"]
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
        assert [c["id"] for c in messages[2]["tool_calls"]] == ["call_abc"]
        assert messages[3] == {"role": "tool", "tool_call_id": "call_abc", "content": SUPERSEDED_RESULT}
        assert messages[4] == {"role": "user", "content": "never mind"}
        assert h.surface.replies_in(h.thread()) == ["Fine, nothing deleted."]


# --- pausing ----------------------------------------------------------------------------------------------


async def test_a_pause_whose_write_fails_stores_no_approval_and_the_run_fails_with_a_message(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), says("ok")])
    # The pause's audit entry is refused: its approvals, the paused run and the shown place go with it.
    with sqlite3.connect(h.db_path) as raw:
        raw.execute(
            "CREATE TRIGGER audit_down BEFORE INSERT ON audit WHEN NEW.action = 'paused' "
            "BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
        )

    await h.say("delete a.txt")

    assert h.surface.renders == []
    assert await h.engine.storage.approvals.pending() == []
    [run] = await h.engine.storage.runs.list_by_status("failed")
    assert run.step == 0 and not run.has_snapshot
    assert len(h.surface.replies_in(h.thread())) == 1  # the person is told
    assert h.tools.executed == []
    with sqlite3.connect(h.db_path) as raw:
        raw.execute("DROP TRIGGER audit_down")
    await h.say("hello")
    assert h.surface.replies_in(h.thread())[-1] == "ok"  # the thread stays usable


# --- model failures ---------------------------------------------------------------------------------------


async def test_a_model_failure_fails_the_run_with_a_short_message_and_the_thread_stays_usable(harnesses):
    async with FakeOpenAIServer() as server:
        server.enqueue_error(500)
        server.enqueue_text("Hello again.")
        generator = OpenAIChatGenerator(api_key="test", api_base_url=server.base_url, max_retries=0)
        h = await harnesses.open(generator=generator)

        await h.say("hello?")
        [failed] = await h.engine.storage.runs.list_by_status("failed")
        [apology] = h.surface.replies_in(h.thread())
        assert apology.startswith("Sorry, the language model could not answer") and len(apology) < 200
        assert "test" not in apology and "500" not in apology

        await h.say("hello again")

        assert h.surface.replies_in(h.thread())[-1] == "Hello again."
        assert [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "user"] == [
            "hello?",
            "hello again",
        ], "nothing was lost"
        assert failed.error == "LLMError"


async def test_a_model_failure_after_an_approval_closes_the_executed_step_cleanly(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), RuntimeError("model down"), says("ok")])
    [approval] = await h.paused_approvals("delete a.txt")

    await h.engine.decide(confirm(approval))
    await h.engine.wait_idle()

    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert (await h.run_of(approval.run_id)).status == "failed"
    assert h.surface.replies_in(h.thread())[-1].startswith("Sorry")
    await h.say("and now?")
    assert dangling_calls(sent_to_llm(h.generator)) == []
    assert h.surface.replies_in(h.thread())[-1] == "ok"


async def test_a_crash_mid_step_keeps_the_real_result_of_a_call_that_had_finished(harnesses):
    started, release = asyncio.Event(), asyncio.Event()

    @tool(confirmation_default="never")
    async def drain_node(node: str) -> str:
        """Drain a node (slow).

        :param node: The node.
        """
        started.set()
        await release.wait()
        return f"drained {node}"

    logs = call("read_logs", service="web")
    before = await harnesses.open(replies=[asks(logs, call("drain_node", node="n1"))], extra_tools=[drain_node])
    # One tool at a time, in call order: read_logs has finished (ledger 'done') once drain_node starts.
    before.engine.agent.tool_invoker_kwargs["max_workers"] = 1
    running = asyncio.create_task(before.engine.handle_message(before.inbound("drain n1")))
    await bounded(started.wait())
    [run] = await before.engine.storage.runs.list_by_status("running")
    finished = await before.engine.storage.ledger.get(f"{run.run_id}:{logs.id}")
    assert finished.status == "done"
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running

    before.clock.advance(seconds=before.engine.config.lease_seconds + 1)
    after = await harnesses.reopen(before, generator=ScriptedChatGenerator([echoes_results]))
    await after.engine.wait_idle()

    assert before.tools.runs_of("read_logs") == [{"service": "web"}]
    history = await after.history()
    assert dangling_calls(history) == []
    assert sorted(tool_results(history)) == [
        ("drain_node", OUTCOME_UNKNOWN, True),
        ("read_logs", finished.result, False),
    ], "a call that ran is not reported to the model as not run"
    release.set()


async def test_two_replicas_on_one_database_decide_and_resume_a_call_once(harnesses):
    first = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), says("Deleted.")])
    second = await harnesses.reopen(first)  # another bot process on the same database file
    [approval] = await first.paused_approvals("delete a.txt")

    outcomes = await asyncio.gather(
        first.engine.decide(confirm(approval, REQUESTER)),
        second.engine.decide(confirm(approval, ADMIN)),
        return_exceptions=True,
    )
    # Both replicas also try to resume the run, as a restart or a sweep might.
    await asyncio.gather(first.engine.resume(approval.run_id), second.engine.resume(approval.run_id))
    await first.engine.wait_idle()
    await second.engine.wait_idle()

    assert sum(not isinstance(o, Exception) for o in outcomes) == 1
    assert [type(o).__name__ for o in outcomes if isinstance(o, Exception)] == ["AlreadyDecided"]
    assert first.tools.runs_of("delete_file") == [{"path": "a.txt"}]
    replies = [r.text for r in first.surface.replies + second.surface.replies]
    assert replies == ["Deleted."]  # one resume: no second answer, no failed second run

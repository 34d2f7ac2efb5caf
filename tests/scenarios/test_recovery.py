"""Recovery across processes: owned runs, recovery by what is durable, the outbox, the inbox, shutdown.

Each test leaves the database as a process that died at one point would (the durable state is written
straight through the stores, as crash tests with failpoints produce it), then opens another engine on
the same file and checks what a person would notice: which tools ran, how often, and what the thread
was told.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from bot.agent.stored_snapshot import load_snapshot
from bot.agent.tool_runner import OUTCOME_UNKNOWN
from bot.engine.errors import AlreadyDecided, ApprovalClosed
from bot.engine.lifecycle import MAX_RECOVERIES
from bot.engine.model import DecisionRequest
from bot.engine.outbox import address_of
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage
from bot.tools import tool
from storage import NewApproval
from tests.fakes.engine_kit import (
    REQUESTER,
    Harness,
    asks_for,
    bounded,
    dangling_calls,
    echoes_results,
    says,
    tool_results,
)
from tests.fakes.recording_surface import RecordingSurface

DEAD = "dead-host-1-abc"


def confirm(approval, actor: str = REQUESTER) -> DecisionRequest:
    return DecisionRequest(approval.approval_id, actor, "confirm", place=approval.thread.place)


async def approved_and_claimed_by_a_dead_process(h: Harness, *, write_step: bool, started: bool = False) -> tuple:
    """A paused delete_file call, approved; its resume claimed by a process that then died.

    ``write_step``: the dead process had also written the step to the history (it died right before the
    ledger entry, ``before_ledger``); otherwise it died right after its claim (``after_claim``): a resume's claim
    leaves the run ``resuming``, a decision's (``started``) ``running``.
    """
    [approval] = await h.paused_approvals("delete a.txt")
    storage = h.engine.storage
    assert await storage.approvals.decide(approval.approval_id, status="approved", decided_by=REQUESTER, now=h.clock())
    assert await storage.leases.claim_paused(
        approval.run_id, DEAD, h.clock() + timedelta(seconds=30), step=1, start=started or write_step
    )
    if write_step:
        snapshot = await load_snapshot(await storage.runs.snapshot(approval.run_id), storage.messages)
        await storage.messages.write_messages(h.thread().key, [snapshot.step_message])
    return approval


def lease_runs_out(h: Harness) -> None:
    h.clock.advance(seconds=h.engine.config.lease_seconds + 1)


@pytest.mark.parametrize(
    ("write_step", "started"),
    [(False, False), (False, True), (True, True)],
    ids=["after_claim_of_a_resume", "after_claim_of_a_decision", "before_ledger"],
)
async def test_an_approved_call_whose_resume_died_before_it_started_runs_exactly_once(harnesses, write_step, started):
    before = await harnesses.open(replies=[asks_for("delete_file", path="a.txt")])
    approval = await approved_and_claimed_by_a_dead_process(before, write_step=write_step, started=started)

    # While the dead process's lease runs, nobody touches its run.
    bystander = await harnesses.reopen(before, generator=ScriptedChatGenerator([says("never used")]))
    await bystander.engine.wait_idle()
    assert before.tools.executed == [] and bystander.surface.calls == []
    assert (await bystander.run_of(approval.run_id)).owner == DEAD

    lease_runs_out(before)
    after = await harnesses.reopen(before, generator=ScriptedChatGenerator([echoes_results]))
    await after.engine.wait_idle()
    again = await harnesses.reopen(before, generator=ScriptedChatGenerator([says("never used")]))
    await again.engine.wait_idle()

    assert before.tools.executed == [("delete_file", {"path": "a.txt"})]
    notice, answer = after.surface.replies_in(after.thread())
    assert "restarted" in notice and "delete_file had been approved and had not started: it ran now" in notice
    assert answer == "results: deleted a.txt"
    history = await after.history()
    assert dangling_calls(history) == [] and tool_results(history) == [("delete_file", "deleted a.txt", False)]
    assert (await after.run_of(approval.run_id)).status == "finished"
    assert again.surface.calls == [] and bystander.surface.calls == []


async def test_two_processes_recovering_at_once_run_the_call_once_and_tell_the_thread_once(harnesses):
    before = await harnesses.open(replies=[asks_for("delete_file", path="a.txt")])
    approval = await approved_and_claimed_by_a_dead_process(before, write_step=True)
    first = await harnesses.reopen(before, generator=ScriptedChatGenerator([echoes_results]))
    second = await harnesses.reopen(before, generator=ScriptedChatGenerator([echoes_results]))

    lease_runs_out(before)
    await asyncio.gather(first.engine.recover(), second.engine.recover())
    await asyncio.gather(first.engine.wait_idle(), second.engine.wait_idle())

    assert before.tools.executed == [("delete_file", {"path": "a.txt"})]
    told = first.surface.replies_in(first.thread()) + second.surface.replies_in(second.thread())
    assert len(told) == 2 and told[1] == "results: deleted a.txt"
    assert (await first.run_of(approval.run_id)).recoveries == 1
    takeovers = [
        h.engine.observer.registry.get_sample_value("countersign_lease_takeovers_total") for h in (first, second)
    ]
    assert sorted(takeovers) == [0, 1]  # counted by the one process that took the run over


async def test_a_stale_button_after_a_crash_says_the_outcome_is_unknown_not_already_approved(harnesses):
    started = asyncio.Event()

    @tool
    async def restart_service(name: str) -> str:
        """Restart a service.

        :param name: The service.
        """
        started.set()
        await asyncio.Event().wait()  # the process dies while this runs
        return "restarted"

    before = await harnesses.open(replies=[asks_for("restart_service", name="web")], extra_tools=[restart_service])
    [approval] = await before.paused_approvals("restart web")
    await before.engine.decide(confirm(approval))
    await bounded(started.wait())
    for task in list(before.engine.tasks):  # the process dies mid-tool
        task.cancel()
    await before.engine.wait_idle()

    lease_runs_out(before)
    after = await harnesses.reopen(before, generator=ScriptedChatGenerator([echoes_results]))
    await after.engine.wait_idle()
    notice, answer = after.surface.replies_in(after.thread())
    assert "The outcome of restart_service is unknown" in notice
    assert answer == f"results: {OUTCOME_UNKNOWN}"

    with pytest.raises(AlreadyDecided) as refused:
        await after.engine.decide(confirm(approval))
    assert "outcome is unknown" in str(refused.value) and "not run again" in str(refused.value)


async def test_a_stale_button_on_an_approved_call_that_never_ran_says_it_never_ran(harnesses):
    before = await harnesses.open(replies=[asks_for("delete_file", path="a.txt")])
    approval = await approved_and_claimed_by_a_dead_process(before, write_step=False)
    await before.engine.storage.runs.transition(approval.run_id, "resuming", "failed", error="gave up")

    with pytest.raises(AlreadyDecided) as refused:
        await before.engine.decide(confirm(approval))
    assert "never ran" in str(refused.value)
    assert before.tools.executed == []


async def test_a_process_that_died_while_pausing_leaves_no_undecidable_approval_and_the_run_is_retried(harnesses):
    before = await harnesses.open(replies=[])
    thread = before.thread()
    storage = before.engine.storage
    # The dead process took the message from the inbox, asked the model, stored the approval ... and died.
    await storage.inbox.enqueue(address_of(thread), REQUESTER, ChatMessage.from_user("delete a.txt").to_dict())
    run, _ = await storage.inbox.start_next(thread.key, "run-dead", DEAD, before.clock() + timedelta(seconds=30))
    [orphan] = await storage.approvals.create_many(
        [
            NewApproval(
                run_id="run-dead",
                step=1,
                tool_call_id="call_orphan",
                tool_name="delete_file",
                arguments={"path": "a.txt"},
                requester=REQUESTER,
                platform=thread.platform,
                chat_history_id=thread.key,
                expires_at=before.clock() + timedelta(hours=1),
                created_at=before.clock(),
            )
        ]
    )
    # ... and had shown it in the thread, so a click can come from there.
    await storage.places.record([orphan.approval_id], thread.place, now=before.clock())

    lease_runs_out(before)
    after = await harnesses.reopen(
        before, generator=ScriptedChatGenerator([asks_for("delete_file", path="a.txt"), echoes_results])
    )
    await after.engine.wait_idle()

    assert (await storage.approvals.get(orphan.approval_id)).status == "cancelled"
    with pytest.raises(ApprovalClosed):
        await after.engine.decide(DecisionRequest(orphan.approval_id, REQUESTER, "confirm", place=thread.place))
    notice = after.surface.replies_in(thread)[0]
    assert "restarted" in notice and "picked it up" in notice
    [rendering] = after.surface.renders
    assert [a.tool_name for a in rendering.approvals] == ["delete_file"]
    assert (await after.run_of("run-dead")).status == "paused"
    assert before.tools.executed == []

    # The new approval is its own step: approving it runs the call once, and its card shows only it.
    [fresh] = rendering.approvals
    await after.engine.decide(confirm(fresh))
    await after.engine.wait_idle()
    assert before.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert after.surface.replies_in(thread)[-1] == "results: deleted a.txt"
    assert [a.approval_id for a in after.surface.updates[-1].approvals] == [fresh.approval_id]


async def test_a_run_that_died_during_the_model_call_is_retried_from_its_stored_history(harnesses):
    before = await harnesses.open(replies=[])
    thread = before.thread()
    storage = before.engine.storage
    await storage.inbox.enqueue(address_of(thread), REQUESTER, ChatMessage.from_user("status?").to_dict())
    await storage.inbox.start_next(thread.key, "run-dead", DEAD, before.clock() + timedelta(seconds=30))

    lease_runs_out(before)
    after = await harnesses.reopen(before, generator=ScriptedChatGenerator([says("all green")]))
    await after.engine.wait_idle()

    assert after.surface.replies_in(thread)[1:] == ["all green"]
    [sent] = after.generator.calls
    assert [m.text for m in sent["messages"] if m.role == "user"] == ["status?"]
    assert [m.text for m in await after.history()] == ["status?", "all green"]


async def test_an_answer_computed_before_a_crash_is_posted_without_asking_the_model_again(harnesses):
    before = await harnesses.open(replies=[])
    thread = before.thread()
    storage = before.engine.storage
    await storage.inbox.enqueue(address_of(thread), REQUESTER, ChatMessage.from_user("status?").to_dict())
    await storage.inbox.start_next(thread.key, "run-dead", DEAD, before.clock() + timedelta(seconds=30))
    await storage.messages.write_messages(thread.key, [ChatMessage.from_assistant("all green")])

    lease_runs_out(before)
    after = await harnesses.reopen(before, generator=ScriptedChatGenerator([]))
    await after.engine.wait_idle()

    assert after.surface.replies_in(thread)[1:] == ["all green"]
    assert after.generator.calls == []
    assert (await after.run_of("run-dead")).status == "finished"


async def test_an_answer_owed_while_no_surface_is_registered_is_delivered_once_one_is(harnesses):
    h = await harnesses.open(replies=[says("done")])
    surface = h.engine.surfaces.pop("slack")
    await h.say("hello")
    assert surface.calls == []
    [owed] = await h.engine.storage.outbox.undelivered()
    assert owed.text == "done"

    h.engine.register_surface("slack", surface)
    await h.engine.recover()  # the sweep
    await h.engine.recover()
    assert surface.replies_in(h.thread()) == ["done"]
    assert await h.engine.storage.outbox.undelivered() == []


class FlakySurface(RecordingSurface):
    """Fails the first ``failures`` posts, as a platform outage would."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def post_reply(self, thread, text):
        if self.failures:
            self.failures -= 1
            raise ConnectionError("platform unavailable")
        await super().post_reply(thread, text)


async def test_an_answer_whose_post_failed_is_retried_by_the_sweep(harnesses):
    h = await harnesses.open(replies=[says("done")])
    flaky = FlakySurface(failures=1)
    h.engine.register_surface("slack", flaky)
    await h.say("hello")
    assert flaky.replies == []
    await h.engine.recover()
    assert flaky.replies == [], "not before its retry time"
    h.clock.advance(seconds=31)
    await h.engine.recover()
    assert flaky.replies_in(h.thread()) == ["done"]


async def test_two_messages_to_one_thread_on_two_processes_run_in_order_without_interleaving(harnesses):
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
        replies=[asks_for("migrate_db", target="v2"), echoes_results, says("second answer")],
        extra_tools=[migrate_db],
    )
    second = await harnesses.reopen(first, generator=ScriptedChatGenerator([says("never used")]))
    running = asyncio.create_task(first.engine.handle_message(first.inbound("migrate to v2")))
    await bounded(started.wait())
    later = second.inbound("and then?")
    await second.engine.handle_message(later)
    assert [q.message_id for q in second.surface.queued] == [later.message_id]
    assert second.generator.calls == []

    release.set()
    await bounded(running)
    await first.engine.wait_idle()
    assert first.surface.replies_in(first.thread()) == ["results: migrated to v2", "second answer"]
    history = await first.history()
    assert [(m.role.value, m.text) for m in history if m.text] == [
        ("user", "migrate to v2"),
        ("assistant", "results: migrated to v2"),
        ("user", "and then?"),
        ("assistant", "second answer"),
    ]
    assert dangling_calls(history) == []


async def test_a_graceful_shutdown_lets_work_finish_then_hands_what_remains_to_another_process(harnesses):
    started = asyncio.Event()

    @tool(confirmation_default="never")
    async def long_backup(db: str) -> str:
        """Back up a database (never finishes in this test).

        :param db: The database.
        """
        started.set()
        await asyncio.Event().wait()
        return "backed up"

    first = await harnesses.open(replies=[asks_for("long_backup", db="main")], extra_tools=[long_backup])
    running = asyncio.create_task(first.engine.handle_message(first.inbound("back up main")))
    await bounded(started.wait())
    [run] = await first.engine.storage.runs.list_by_status("running")

    await bounded(first.engine.stop_taking_work(grace=0.05))
    assert running.done()
    # Taking no new work: a message now is stored for another process, not run here.
    await first.engine.handle_message(first.inbound("anyone?", thread="1700000000.000900"))
    released = await first.engine.storage.runs.get(run.run_id)
    assert released.owner is None

    # No waiting for the lease: the next process continues at once.
    def model(messages: list[ChatMessage]) -> ChatMessage:  # the two threads recover concurrently
        return echoes_results(messages) if messages[-1].role == "tool" else says("yes")

    after = await harnesses.reopen(first, generator=ScriptedChatGenerator([model, model]))
    await after.engine.wait_idle()
    assert after.surface.replies_in(after.thread())[-1] == f"results: {OUTCOME_UNKNOWN}"
    assert after.surface.replies_in(after.thread("1700000000.000900")) == ["yes"]
    await first.close()


async def test_work_that_finishes_within_the_grace_period_is_answered_before_shutdown(harnesses):
    started, release = asyncio.Event(), asyncio.Event()

    @tool(confirmation_default="never")
    async def quick_check(host: str) -> str:
        """Check a host.

        :param host: The host.
        """
        started.set()
        await release.wait()
        return f"{host} ok"

    h = await harnesses.open(replies=[asks_for("quick_check", host="web1"), echoes_results], extra_tools=[quick_check])
    running = asyncio.create_task(h.engine.handle_message(h.inbound("check web1")))
    await bounded(started.wait())
    stopping = asyncio.create_task(h.engine.stop_taking_work(grace=5))
    release.set()
    await bounded(stopping)
    assert running.done() and not running.cancelled()
    assert h.surface.replies_in(h.thread()) == ["results: web1 ok"]


async def test_the_heartbeat_keeps_a_working_run_owned(harnesses):
    started, release = asyncio.Event(), asyncio.Event()

    @tool(confirmation_default="never")
    async def slow_report(name: str) -> str:
        """Build a report (slow).

        :param name: The report.
        """
        started.set()
        await release.wait()
        return "report ready"

    h = await harnesses.open(
        replies=[asks_for("slow_report", name="q3"), echoes_results],
        extra_tools=[slow_report],
        heartbeat_seconds=0.01,
        lease_seconds=30,
    )
    running = asyncio.create_task(h.engine.handle_message(h.inbound("q3 report")))
    await bounded(started.wait())
    [run] = await h.engine.storage.runs.list_by_status("running")
    h.clock.advance(seconds=20)

    for _ in range(500):  # the heartbeat runs every 10 ms: wait for its first beat after the clock moved
        if (await h.engine.storage.runs.get(run.run_id)).lease_expires_at > run.lease_expires_at:
            break
        await asyncio.sleep(0.01)
    assert (await h.engine.storage.runs.get(run.run_id)).lease_expires_at == h.clock() + timedelta(seconds=30)
    h.clock.advance(seconds=20)  # past the first lease, within the renewed one
    other = await harnesses.reopen(h, generator=ScriptedChatGenerator([says("never used")]))
    await other.engine.wait_idle()
    assert other.surface.calls == []
    release.set()
    await bounded(running)
    assert h.surface.replies_in(h.thread()) == ["results: report ready"]


async def test_a_run_that_keeps_killing_its_process_is_closed_and_the_person_told(harnesses):
    before = await harnesses.open(replies=[])
    thread = before.thread()
    storage = before.engine.storage
    await storage.inbox.enqueue(address_of(thread), REQUESTER, ChatMessage.from_user("crash me").to_dict())
    await storage.inbox.start_next(thread.key, "run-poison", DEAD, before.clock())
    for attempt in range(MAX_RECOVERIES):  # each taker died in turn
        assert await storage.leases.claim_expired("run-poison", f"{DEAD}-{attempt}", before.clock(), now=before.clock())

    lease_runs_out(before)
    after = await harnesses.reopen(before, generator=ScriptedChatGenerator([says("back")]))
    await after.engine.wait_idle()

    [told] = after.surface.replies_in(thread)
    assert "could not continue it" in told
    assert (await after.run_of("run-poison")).status == "failed"
    assert after.generator.calls == []
    await after.say("hello again")  # the thread is usable again
    assert after.surface.replies_in(thread)[-1] == "back"


async def test_two_processes_sweeping_at_once_expire_each_approval_once_and_resume_each_run_once(harnesses):
    threads = [f"1700000000.{n:06d}" for n in range(12)]
    asks_then_answers = [asks_for("delete_file", path="a.txt")] * len(threads) + [echoes_results] * len(threads)
    first = await harnesses.open(replies=asks_then_answers)
    for name in threads:
        await first.paused_approvals("delete a.txt", thread=name)
    second = await harnesses.reopen(first, generator=ScriptedChatGenerator([echoes_results] * len(threads)))
    first.clock.advance(hours=25)
    counts = await asyncio.gather(first.engine.sweep_expired(batch=5), second.engine.sweep_expired(batch=5))
    await asyncio.gather(first.engine.wait_idle(), second.engine.wait_idle())

    assert sum(counts) == len(threads)
    assert len(await first.audit("expired")) == len(threads)
    posted = [text for h in (first, second) for name in threads for text in h.surface.replies_in(h.thread(name))]
    notice = f"{REQUESTER}: the approval for delete_file expired without a decision, so it was not run."
    answers = [text for text in posted if text != notice]
    assert len(answers) == len(threads) and all("expired without a decision" in a for a in answers)
    assert posted.count(notice) == len(threads)  # each requester is told once, whichever process expired it
    assert first.tools.executed == []


async def test_a_run_that_cannot_be_recovered_is_failed_with_a_notice_not_left_running(harnesses):
    before = await harnesses.open(replies=[asks_for("delete_file", path="a.txt")])
    approval = await approved_and_claimed_by_a_dead_process(before, write_step=False)
    thread = before.thread()
    # A decision that matches no call of the stored step (a damaged record): the step cannot be replayed.
    [stray] = await before.engine.storage.approvals.create_many(
        [
            NewApproval(
                run_id=approval.run_id,
                step=1,
                tool_call_id="call_not_in_the_step",
                tool_name="delete_file",
                arguments={"path": "b.txt"},
                requester=REQUESTER,
                platform=thread.platform,
                chat_history_id=thread.key,
                expires_at=before.clock() + timedelta(hours=1),
                created_at=before.clock(),
            )
        ]
    )
    await before.engine.storage.approvals.decide(
        stray.approval_id, status="approved", decided_by=REQUESTER, now=before.clock()
    )

    lease_runs_out(before)
    after = await harnesses.reopen(before, generator=ScriptedChatGenerator([]))
    await after.engine.wait_idle()

    run = await after.run_of(approval.run_id)
    assert (run.status, run.owner) == ("failed", None)
    assert after.surface.replies_in(thread)[-1].startswith("Sorry, something went wrong")
    assert before.tools.executed == []


async def test_a_process_that_lost_its_lease_stops_and_leaves_the_run_to_the_one_that_took_it(harnesses):
    started, release = asyncio.Event(), asyncio.Event()

    @tool(confirmation_default="never")
    async def rebuild_index(name: str) -> str:
        """Rebuild a search index (slow).

        :param name: The index.
        """
        started.set()
        await release.wait()
        return f"rebuilt {name}"

    stalled = await harnesses.open(
        replies=[asks_for("rebuild_index", name="docs"), says("never posted")], extra_tools=[rebuild_index]
    )
    running = asyncio.create_task(stalled.engine.handle_message(stalled.inbound("rebuild docs")))
    await bounded(started.wait())
    # The process stalls past its lease; another one takes the run over and finishes it.
    lease_runs_out(stalled)
    taker = await harnesses.reopen(stalled, generator=ScriptedChatGenerator([echoes_results]))
    await taker.engine.wait_idle()
    assert taker.surface.replies_in(taker.thread())[-1] == f"results: {OUTCOME_UNKNOWN}"

    # Back to life: its next heartbeat finds the run taken, and it drops its work without a word.
    await stalled.engine.lifecycle.beat()
    await bounded(running)
    release.set()
    assert stalled.surface.replies == []
    assert len(stalled.generator.calls) == 1, "it asked the model nothing more"
    [finished] = await taker.engine.storage.runs.list_by_status("finished")
    assert (finished.owner, finished.recoveries) == (None, 1)

"""Storage reads per decision, end to end: every decision reads the policy as it is now, once, and the reads a
conversation needs are not repeated (issue 17).

Real engine, real SQLite file, scripted model, recording surface; the per-conversation counts come from the
engine benchmark's own counter, which wraps the storage threads' queues.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from bot.engine.engine import ClaimedStep
from bot.engine.errors import NotShownHere
from bot.tools import tool
from storage import scope_channel
from tests.fakes.bench_modules import engine_bench
from tests.fakes.engine_kit import (
    ADMIN,
    CHANNEL,
    PLATFORM,
    REQUESTER,
    WORKSPACE,
    asks,
    asks_for,
    call,
    echoes_results,
    sent_to_llm,
    tool_results,
)
from tests.fakes.recording_surface import RecordingSurface, Rendering, Update
from tests.fakes.storage_data import new_approval
from tests.unit.bot.engine.test_decisions import admin, decision

FIRST_STEP = 1
"""The step number of a run's first pause."""


def tightening_tool(holder: dict):
    """``tighten``: an admin's change landing while the run works: delete_file now asks U_BOB, here."""

    @tool
    async def tighten() -> str:
        """Make delete_file ask U_BOB in this channel."""
        await holder["storage"].policies.set_rule(
            scope_channel(PLATFORM, WORKSPACE, CHANNEL),
            "delete_file",
            updated_by=ADMIN,
            mode="always",
            approvers=["U_BOB"],
        )
        return "tightened"

    return tighten


async def test_a_policy_tightened_while_a_run_works_applies_to_its_next_call(harnesses):
    holder: dict = {}
    h = await harnesses.open(
        replies=[
            asks(call("delete_file", path="a.txt"), call("tighten")),  # both run: delete_file is "never" now
            asks_for("delete_file", path="a.txt"),  # the same call again, after the policy was tightened
            echoes_results,
        ],
        extra_tools=[tightening_tool(holder)],
    )
    holder["storage"] = h.engine.storage
    await admin(h, "policy set delete_file never")
    await admin(h, "policy set tighten never")

    [approval] = await h.paused_approvals("delete a.txt twice")

    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}]  # the second call waits: no policy was reused
    assert (approval.tool_name, approval.policy_mode, approval.approvers) == ("delete_file", "always", ("U_BOB",))


async def test_a_review_policy_set_while_a_call_waits_for_approval_holds_its_result_after_the_click(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")
    assert approval.kind == "approval"

    await admin(h, "policy set delete_file always+review")  # tightened between the pause and the click
    await h.engine.decide(decision(approval))
    await h.engine.wait_idle()

    # Read again when the approved call ran (time of use): its result now waits for a reviewer.
    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}]
    [review] = h.surface.renders[-1].approvals
    assert (review.kind, review.result, review.policy_mode) == ("review", "deleted a.txt", "always+review")
    assert len(h.generator.calls) == 1  # the model has not seen the result
    await h.engine.decide(decision(review))
    await h.engine.wait_idle()
    assert tool_results(sent_to_llm(h.generator)) == [("delete_file", "deleted a.txt", False)]


async def test_a_paused_call_is_stored_with_the_policy_its_check_read(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    await admin(h, "policy set delete_file always")
    await h.engine.storage.policies.set_rule(
        scope_channel(PLATFORM, WORKSPACE, CHANNEL),
        "delete_file",
        updated_by=ADMIN,
        approvers=["U_BOB"],
        quorum=2,
        four_eyes=True,
        ttl_seconds=600,
    )

    [approval] = await h.paused_approvals("delete a.txt")

    assert (approval.policy_mode, approval.approvers, approval.quorum, approval.four_eyes) == (
        "always",
        ("U_BOB",),
        2,
        True,
    )
    assert (approval.expires_at - approval.created_at).total_seconds() == 600


async def test_a_conversation_reads_each_policy_once_per_decision_and_never_rereads_what_it_holds(tmp_path):
    threads = 4
    figures, profile = await engine_bench().run_conversations(threads, 0.0, tmp_path / "bench.db", profile=True)
    assert figures["failures"] == 0
    per_conversation = {name: count / threads for name, (count, _wait, _run) in profile.stats.items()}

    def reads(name: str) -> float:
        return per_conversation.get(name, 0)

    # The check before the call asks from the views read when the message arrived (with the run's start), and its
    # pause checks that view in its own write; the review check after the approved call ran is read with the call's
    # outcome. No policy read is a round trip of its own.
    assert reads("SQLitePolicyStore.view") == reads("SQLitePolicyStore.views") == 0
    [start] = [name for name in per_conversation if "inbox.start_next" in name]
    [pause] = [name for name in per_conversation if "approvals.create_many" in name]
    assert "policies.views" in start and "policies.unchanged" in pause
    assert reads(start) == reads(pause) == 1
    assert reads("batch: ledger.finish + runs.get + policies.view") == 1
    assert reads("SQLitePolicyStore.resolve") == reads("SQLiteConditionalRules.rules") == 0
    # The channel's and the workspace's access rules together, with the thread's latest run.
    assert reads("reads: runs.latest_for_thread + access.rules") == 1
    assert reads("SQLiteApprovalStore.get_clicked") == 1  # the click: the approval and its place together
    assert reads("SQLiteApprovalStore.get") == reads("SQLiteApprovalPlaces.shown_in") == 0
    # The step is read in the decision's batch (after its claim, which starts the run too), with the history its
    # snapshot refers to and the policies of the calls it may run (a deny set since stops them); the re-render and
    # the resume reuse them: the resume has no round trip of its own to start, nor to check the policies again.
    decision = (
        "batch: tool_settings.is_not + approvals.decide + leases.claim_paused + approvals.step"
        " + messages.retrieve_messages"
        " + policies.views + audit.append"
    )
    assert reads(decision) == 1
    assert reads("batch: runs.transition + messages.retrieve_messages") == reads("SQLiteRunStore.transition") == 0
    assert reads("SQLiteApprovalStore.step") == 0
    assert reads("SQLiteRunStore.snapshot") == 0  # it came with the fully decided step
    assert reads("SQLiteApprovalStore.for_run") == 0
    assert reads("SQLiteConversationStore.load") == 0  # no approvers named: no direct-message copies to update
    # The stop check after the tool is answered by the run read with the call's outcome.
    assert reads("SQLiteRunStore.get") == 0
    # Nothing of the run's history, memories or waiting messages is a round trip of its own.
    assert reads("SQLiteChatMessageStore.write_messages") == reads("SQLiteChatMessageStore.retrieve_messages") == 0
    assert reads("SQLiteMemoryStore.search_memories") == reads("SQLiteThreadInbox.waiting") == 0
    assert figures["round_trips_per_conversation"] <= 10.5  # 10, and now and then a heartbeat


async def test_on_postgresql_the_bench_counts_each_top_level_storage_call_once_and_a_conversation_makes_ten(
    tmp_path, postgres_url
):
    threads = 4
    figures, profile = await engine_bench().run_conversations(
        threads, 0.0, tmp_path / "unused.db", profile=True, database_url=postgres_url
    )
    assert figures["backend"] == "postgresql"
    assert figures["failures"] == 0
    per_conversation = {name: count / threads for name, (count, _wait, _run) in profile.stats.items()}

    def calls(name: str) -> float:
        return per_conversation.get(name, 0)

    # A batch is one round trip, named by its entries as on SQLite; the store methods it calls are part of it.
    decision = (
        "batch: tool_settings.is_not + approvals.decide + leases.claim_paused + approvals.step"
        " + messages.retrieve_messages"
        " + policies.views + audit.append"
    )
    assert calls(decision) == 1
    assert calls("batch: ledger.finish + runs.get + policies.view") == 1
    assert calls("reads: runs.latest_for_thread + access.rules") == 1
    assert calls("PostgresApprovalStore.get_clicked") == 1  # a call of its own, counted by its class's name
    assert calls("PostgresApprovalStore.decide") == calls("PostgresRunLeases.claim_paused") == 0
    assert calls("PostgresThreadInbox.start_next") == calls("PostgresPolicyStore.views") == 0
    assert calls("PostgresChatMessageStore.write_messages") == calls("PostgresAuditLog.append") == 0
    # Every counted call is in the profile once, and nothing in it was counted twice.
    assert sum(count for count, _wait, _run in profile.stats.values()) == profile.round_trips
    assert figures["round_trips_per_conversation"] <= 10.5  # 10, and now and then a heartbeat


async def test_a_decision_resumes_only_the_step_it_decided_never_a_later_pause_of_the_run(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")
    # Meanwhile the run paused again at a later step (as a recovered run does), with a call still to decide.
    storage = h.engine.storage
    assert await storage.runs.transition(approval.run_id, "paused", "paused", step=FIRST_STEP + 1)
    [later] = await storage.approvals.create_many(
        [
            new_approval(
                approval.run_id,
                "call_later",
                step=FIRST_STEP + 1,
                chat_history_id=h.thread().key,
                requester=REQUESTER,
                created_at=h.clock(),
                expires_at=h.clock() + timedelta(hours=1),
            )
        ]
    )

    await h.engine.decide(decision(approval))
    await h.engine.wait_idle()

    run = await h.run_of(approval.run_id)
    assert (run.status, run.step) == ("paused", FIRST_STEP + 1)
    assert (await storage.approvals.get(later.approval_id)).status == "pending"
    assert h.tools.executed == [] and len(h.generator.calls) == 1


async def test_a_click_whose_place_is_not_a_place_key_is_refused_as_shown_elsewhere(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")

    with pytest.raises(NotShownHere):
        await h.engine.decide(decision(approval, place=[approval.thread.place]))

    assert (await h.engine.get_approval(approval.approval_id)).status == "pending"
    assert h.tools.executed == []


class ClickWhileRendering(RecordingSurface):
    """A surface whose approval message is clicked (approved) while it is still being posted."""

    def __init__(self, engine) -> None:
        super().__init__()
        self.engine = engine
        self.clicked: list = []

    async def render_approvals(self, thread, approvals):
        ref = await super().render_approvals(thread, approvals)
        if not self.clicked:
            self.clicked.append(await self.engine.decide(decision(approvals[0])))
        return ref


async def test_a_click_that_lands_while_the_approval_is_posted_is_shown_on_the_posted_message(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    surface = ClickWhileRendering(h.engine)
    h.engine.register_surface(PLATFORM, surface)

    await h.say("delete a.txt")
    await h.engine.wait_idle()

    [rendering] = [c for c in surface.calls if isinstance(c, Rendering)]
    # The click found no message to update yet; the pause caught up once the message's reference was stored.
    [update] = [c for c in surface.calls if isinstance(c, Update)]
    assert update.message_ref == rendering.message_ref
    assert [a.status for a in update.approvals] == ["approved"]
    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}]


async def test_a_claimed_resume_started_again_with_the_step_read_after_its_claim_does_nothing(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")
    await h.engine.decide(decision(approval))
    await h.engine.wait_idle()
    assert h.surface.replies_in(h.thread()) == ["results: deleted a.txt"]

    # The same claim started once more, with the step as it was read right after the claim.
    step = await h.engine.storage.approvals.step(approval.run_id, FIRST_STEP)
    as_claimed = replace(step, run=replace(step.run, status="running", owner=h.engine.lifecycle.owner))
    await h.engine.resume(approval.run_id, claimed=ClaimedStep(as_claimed))
    await h.engine.wait_idle()

    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}]
    assert len(h.generator.calls) == 2
    assert h.surface.replies_in(h.thread()) == ["results: deleted a.txt"]
    assert (await h.run_of(approval.run_id)).status == "finished"

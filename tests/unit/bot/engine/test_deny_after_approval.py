"""``deny`` is a kill switch: a call runs only if its tool's policy, when the call is about to run, is not ``deny``.

An admin who sets ``deny`` stops calls already approved (or approved after the deny was set) that have not run yet:
after a click, after a resume by the sweep, and after a recovery by another process. The policy is judged exactly as
the confirmation strategy judges it (conditional rules included) on the call's final arguments (an edit's). A call
stopped this way gets a rejection result the model reads, an audit entry, and the thread its answer; the approval
stays as it was decided. Every other mode leaves an approved call alone.

A ``deny`` set through the admin command also closes the calls still waiting at once (issue 30,
``test_rejudging.py``); the tests of a call approved *while* it waits write the rule as it lands when the click wins
the race with that re-judging (:func:`deny_racing_the_click`): the check before the run still stops the call.

Real engines on a real SQLite file or PostgreSQL schema, a scripted model, recording tools and surface.
"""

from __future__ import annotations

import pytest

from bot.canonical import args_digest
from bot.engine.decisions import BLOCKED_AFTER_APPROVAL, BLOCKED_AFTER_APPROVAL_FEEDBACK
from bot.engine.errors import AlreadyDecided
from bot.engine.ledger import ledger_key
from bot.llm import ScriptedChatGenerator
from storage.policy_rules import scope_workspace
from tests.fakes.engine_kit import (
    ADMIN,
    PLATFORM,
    REQUESTER,
    WORKSPACE,
    Harnesses,
    asks,
    asks_for,
    call,
    dangling_calls,
    echoes_results,
    says,
    sent_to_llm,
    tool_results,
)
from tests.scenarios.test_recovery import approved_and_claimed_by_a_dead_process, lease_runs_out
from tests.unit.bot.engine.test_conditions import judged_tool
from tests.unit.bot.engine.test_decisions import admin, decision

BLOCKED = BLOCKED_AFTER_APPROVAL_FEEDBACK.format(tool_name="delete_file")


@pytest.fixture(params=["sqlite", "postgres"])
async def harnesses(request, tmp_path):
    """Harnesses whose engines open on SQLite (a file) or PostgreSQL (a schema of this test's own)."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    opened = Harnesses(tmp_path)
    plain_open = opened.open

    async def open_on_backend(**kwargs):
        return await plain_open(database_url=url, **kwargs)

    opened.open = open_on_backend
    yield opened
    await opened.aclose()


async def deny_racing_the_click(h, condition: str | None = None) -> None:
    """``policy set delete_file deny [when <condition>]`` as stored, before the re-judging of the waiting approvals
    (which a click may beat): the rule alone, as the admin command writes it."""
    scope = scope_workspace(PLATFORM, WORKSPACE)
    if condition is None:
        await h.engine.storage.policies.set_rule(scope, "delete_file", updated_by=ADMIN, mode="deny")
    else:
        await h.engine.storage.conditions.set_rule(
            scope, "delete_file", condition, "deny", updated_by=ADMIN, now=h.clock()
        )


async def blocked_entries(h) -> list:
    return await h.audit(BLOCKED_AFTER_APPROVAL)


async def test_a_call_denied_while_it_waits_does_not_run_when_approved_and_the_model_is_told(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")

    await deny_racing_the_click(h)  # the kill switch, while the call waits
    await h.engine.decide(decision(approval))
    await h.engine.wait_idle()

    assert h.tools.executed == []
    assert tool_results(sent_to_llm(h.generator)) == [("delete_file", BLOCKED, True)]
    assert h.surface.replies_in(h.thread()) == [f"results: {BLOCKED}"]
    history = await h.history()
    assert dangling_calls(history) == [] and tool_results(history) == [("delete_file", BLOCKED, True)]
    [entry] = await blocked_entries(h)
    assert entry.subject == approval.approval_id
    assert (entry.details["tool"], entry.details["run_id"]) == ("delete_file", approval.run_id)
    assert entry.details["policy"] == {"scope": "workspace:slack:T1", "rule": "delete_file", "set_by": "U_ADMIN"}
    assert (await h.engine.get_approval(approval.approval_id)).status == "approved"  # stays as decided
    assert (await h.run_of(approval.run_id)).status == "finished"


async def test_an_approved_call_waiting_for_its_resume_is_stopped_by_a_deny_set_before_it_runs(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")
    # Approved while no process could resume it (the decision alone is durable), then denied: the sweep resumes it.
    storage = h.engine.storage
    assert await storage.approvals.decide(approval.approval_id, status="approved", decided_by=REQUESTER, now=h.clock())
    await admin(h, "policy set delete_file deny")

    await h.engine.recover()  # the sweep's resume of decided, paused runs
    await h.engine.wait_idle()

    assert h.tools.executed == []
    assert h.surface.replies_in(h.thread()) == [f"results: {BLOCKED}"]
    assert dangling_calls(await h.history()) == []
    assert [e.subject for e in await blocked_entries(h)] == [approval.approval_id]


@pytest.mark.parametrize(("path", "runs"), [("a.txt", False), ("b.txt", True)], ids=["matching", "not_matching"])
async def test_a_conditional_deny_stops_an_approved_call_only_when_its_arguments_match(harnesses, path, runs):
    h = await harnesses.open(replies=[asks_for("delete_file", path=path), echoes_results])
    [approval] = await h.paused_approvals(f"delete {path}")

    await deny_racing_the_click(h, "path=a.txt")
    await h.engine.decide(decision(approval))
    await h.engine.wait_idle()

    if runs:
        assert h.tools.executed == [("delete_file", {"path": path})]
        assert h.surface.replies_in(h.thread()) == [f"results: deleted {path}"]
        assert await blocked_entries(h) == []
    else:
        assert h.tools.executed == []
        assert h.surface.replies_in(h.thread()) == [f"results: {BLOCKED}"]
        [entry] = await blocked_entries(h)
        assert (entry.details["policy"]["condition"], entry.details["policy"]["set_by"]) == ("path=a.txt", "U_ADMIN")
    assert dangling_calls(await h.history()) == []


@pytest.mark.parametrize(
    ("denied", "edited_to", "runs"),
    [("b.txt", "b.txt", False), ("a.txt", "b.txt", True)],
    ids=["edited_into_a_denied_call", "edited_out_of_a_denied_call"],
)
async def test_an_edited_call_is_judged_on_the_arguments_it_would_run_with(harnesses, denied, edited_to, runs):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")

    await deny_racing_the_click(h, f"path={denied}")
    await h.engine.decide(decision(approval, action="modify", edited_params={"path": edited_to}))
    await h.engine.wait_idle()

    assert h.tools.executed == ([("delete_file", {"path": edited_to})] if runs else [])
    assert tool_results(sent_to_llm(h.generator)) == (
        [("delete_file", f"deleted {edited_to}", False)] if runs else [("delete_file", BLOCKED, True)]
    )
    assert len(await blocked_entries(h)) == (0 if runs else 1)
    assert dangling_calls(await h.history()) == []


@pytest.mark.parametrize("mode", ["never", "always", "once", "review"])
async def test_an_approved_call_runs_exactly_once_whatever_other_mode_is_set_meanwhile(harnesses, mode):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")

    await admin(h, f"policy set delete_file {mode}")
    await h.engine.decide(decision(approval))
    await h.engine.wait_idle()
    if mode == "review":  # the call ran; its result waits for a reviewer first
        [review] = h.surface.renders[-1].approvals
        await h.engine.decide(decision(review))
        await h.engine.wait_idle()

    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert h.surface.replies_in(h.thread()) == ["results: deleted a.txt"]
    assert await blocked_entries(h) == []


async def test_a_call_the_policy_let_run_at_the_pause_is_stopped_too_and_the_approved_one_runs(harnesses):
    h = await harnesses.open(
        replies=[
            asks(call("read_logs", service="web"), call("delete_file", path="a.txt")),  # read_logs is declared never
            echoes_results,
        ]
    )
    [approval] = await h.paused_approvals("read the logs, then delete a.txt")

    await admin(h, "policy set read_logs deny")
    await h.engine.decide(decision(approval))
    await h.engine.wait_idle()

    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]
    read_logs_blocked = BLOCKED_AFTER_APPROVAL_FEEDBACK.format(tool_name="read_logs")
    assert sorted(tool_results(sent_to_llm(h.generator))) == [
        ("delete_file", "deleted a.txt", False),
        ("read_logs", read_logs_blocked, True),
    ]
    [entry] = await blocked_entries(h)
    assert (entry.subject, entry.details["tool"]) == (approval.run_id, "read_logs")  # no approval: the run
    assert dangling_calls(await h.history()) == []


@pytest.mark.parametrize(
    ("write_step", "started"),
    [(False, False), (False, True), (True, True)],
    ids=["after_claim_of_a_resume", "after_claim_of_a_decision", "before_ledger"],
)
async def test_a_recovered_approved_call_is_stopped_by_a_deny_set_before_the_recovery(harnesses, write_step, started):
    before = await harnesses.open(replies=[asks_for("delete_file", path="a.txt")])
    approval = await approved_and_claimed_by_a_dead_process(before, write_step=write_step, started=started)
    await admin(before, "policy set delete_file deny")

    lease_runs_out(before)
    after = await harnesses.reopen(before, generator=ScriptedChatGenerator([echoes_results]))
    await after.engine.wait_idle()

    assert before.tools.executed == []
    notice, answer = after.surface.replies_in(after.thread())
    assert "restarted" in notice and "it ran now" not in notice
    assert answer == f"results: {BLOCKED}"
    history = await after.history()
    assert dangling_calls(history) == [] and tool_results(history) == [("delete_file", BLOCKED, True)]
    assert [e.subject for e in await blocked_entries(after)] == [approval.approval_id]
    assert (await after.run_of(approval.run_id)).status == "finished"


async def test_a_call_that_ran_before_the_crash_keeps_its_result_when_a_deny_is_set_before_the_recovery(harnesses):
    before = await harnesses.open(replies=[asks_for("delete_file", path="a.txt")])
    approval = await approved_and_claimed_by_a_dead_process(before, write_step=True)
    # The dead process ran the call (its outcome is in the ledger) and died before writing the result to the thread.
    storage = before.engine.storage
    key = ledger_key(approval.run_id, (await storage.approvals.get(approval.approval_id)).tool_call_id)
    assert await storage.ledger.begin(
        key, args_digest({"path": "a.txt"}), run_id=approval.run_id, tool_name="delete_file"
    )
    assert await storage.ledger.finish(key, ok=True, result="deleted a.txt")
    await admin(before, "policy set delete_file deny")

    lease_runs_out(before)
    after = await harnesses.reopen(before, generator=ScriptedChatGenerator([echoes_results]))
    await after.engine.wait_idle()

    # Not about to run: it ran. The model gets its real result, and nothing claims it was blocked.
    assert before.tools.executed == []
    assert after.surface.replies_in(after.thread())[-1] == "results: deleted a.txt"
    history = await after.history()
    assert dangling_calls(history) == [] and tool_results(history) == [("delete_file", "deleted a.txt", False)]
    assert await blocked_entries(after) == []


async def test_a_deny_closes_the_waiting_call_and_lifting_it_before_the_click_does_not_reopen_it(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), says("Not deleted.")])
    await admin(h, "policy set delete_file always")
    [approval] = await h.paused_approvals("delete a.txt")
    await admin(h, "policy set delete_file deny")  # closes the waiting call (issue 30)
    await admin(h, "policy set delete_file always")  # lifted again before anyone clicked
    await h.engine.wait_idle()

    with pytest.raises(AlreadyDecided):
        await h.engine.decide(decision(approval))
    assert h.tools.executed == []
    assert (await h.engine.get_approval(approval.approval_id)).status == "rejected"
    assert await blocked_entries(h) == []


async def test_a_tool_that_no_rule_could_deny_is_not_judged_again_before_its_approved_call_runs(harnesses):
    # With no deny anywhere in the tool's policy, nothing is evaluated before the approved call runs: the tool's own
    # needs_approval (a user's callable, which only ever asks or lets run) is asked at the pause and, as for every
    # call, by the review check after it ran; never in between.
    ran: list[dict] = []
    runs_seen: list[int] = []  # how many times the tool had run when needs_approval was asked

    def judge(arguments: dict) -> bool:
        runs_seen.append(len(ran))
        return True

    h = await harnesses.open(
        extra_tools=[judged_tool(judge, ran)], replies=[asks_for("deploy", env="prod"), echoes_results]
    )
    [approval] = await h.paused_approvals("deploy prod")
    await h.engine.decide(decision(approval))
    await h.engine.wait_idle()

    assert ran == [{"env": "prod"}]
    assert runs_seen == [0, 1], "asked at the pause and after the call, not again before it ran"
    assert await blocked_entries(h) == []

"""Review after acting, end to end through the engine: the tool runs once, a person decides what the model sees.

Real engine, real SQLite file, scripted model, recording surface; tools record every execution.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.canonical import args_digest
from bot.engine.errors import AlreadyDecided, InvalidEdit, NotAnApprover
from bot.engine.ledger import ledger_key
from bot.engine.outbox import address_of
from bot.engine.presentation import display_result, outcome_sentence
from bot.engine.review import WITHHELD_AFTER_RESTART
from bot.hooks.review import REVIEW_EXPIRED_RESULT
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage
from tests.fakes.engine_kit import (
    ADMIN,
    REQUESTER,
    asks_for,
    dangling_calls,
    echoes_results,
    sent_to_llm,
    tool_results,
)
from tests.unit.bot.engine.test_decisions import admin, decision


async def reviewed(harnesses, mode: str = "review", **open_kwargs):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results], **open_kwargs)
    assert "mode=" + mode in await admin(h, f"policy set delete_file {mode}")
    return h


async def test_a_review_tool_runs_at_once_and_its_result_waits_for_a_person(harnesses):
    h = await reviewed(harnesses)

    [review] = await h.paused_approvals("delete a.txt")

    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert (review.kind, review.result, review.policy_mode) == ("review", "deleted a.txt", "review")
    assert len(h.generator.calls) == 1  # the model has not seen the result
    assert (await h.run_of(review.run_id)).status == "paused"
    assert "waits for review" in outcome_sentence(review)
    assert await h.history() and all(
        m.tool_call_result is None or m.tool_call_result.result != "deleted a.txt" for m in await h.history()
    )


async def test_approve_gives_the_model_the_result_as_it_is(harnesses):
    h = await reviewed(harnesses)
    [review] = await h.paused_approvals("delete a.txt")

    result = await h.engine.decide(decision(review))
    await h.engine.wait_idle()

    assert result.resumed and result.approval.status == "approved"
    assert tool_results(sent_to_llm(h.generator)) == [("delete_file", "deleted a.txt", False)]
    assert h.surface.replies[-1].text == "results: deleted a.txt"
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]  # never twice
    assert dangling_calls(await h.history()) == []


async def test_edit_result_gives_the_model_the_edited_text(harnesses):
    h = await reviewed(harnesses)
    [review] = await h.paused_approvals("delete a.txt")

    result = await h.engine.decide(decision(review, action="modify", edited_result="the file is gone"))
    await h.engine.wait_idle()

    assert result.approval.status == "modified" and result.approval.final_result == "the file is gone"
    assert result.approval.result == "deleted a.txt"  # the full original stays stored
    assert tool_results(sent_to_llm(h.generator)) == [("delete_file", "the file is gone", False)]
    assert "Result edited by" in outcome_sentence(h.surface.last_update_for(review.approval_id))
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]


async def test_an_empty_edit_is_refused_and_the_review_stays_open(harnesses):
    h = await reviewed(harnesses)
    [review] = await h.paused_approvals("delete a.txt")

    with pytest.raises(InvalidEdit):
        await h.engine.decide(decision(review, action="modify", edited_result="   "))

    assert (await h.engine.get_approval(review.approval_id)).status == "pending"


async def test_reject_gives_the_model_the_feedback_marked_as_rejected_by_a_reviewer(harnesses):
    h = await reviewed(harnesses)
    [review] = await h.paused_approvals("delete a.txt")

    await h.engine.decide(decision(review, action="reject", feedback="say nothing about files"))
    await h.engine.wait_idle()

    [(name, text, error)] = tool_results(sent_to_llm(h.generator))
    assert (name, error) == ("delete_file", True)
    assert text == (
        "The result of tool 'delete_file' was rejected by a reviewer. Reviewer feedback: say nothing about files"
    )
    assert "deleted a.txt" not in str([m.to_dict() for m in sent_to_llm(h.generator)])


async def test_an_expired_review_withholds_the_result(harnesses):
    h = await reviewed(harnesses)
    [review] = await h.paused_approvals("delete a.txt")

    h.clock.advance(days=2)
    assert await h.engine.sweep_expired() == 1
    await h.engine.wait_idle()

    assert tool_results(sent_to_llm(h.generator)) == [("delete_file", REVIEW_EXPIRED_RESULT, True)]
    assert "withheld" in outcome_sentence(await h.engine.get_approval(review.approval_id))
    with pytest.raises(Exception, match="expired|Expired"):
        await h.engine.decide(decision(review))
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]


async def test_review_decisions_are_audited_as_reviews_and_say_whether_the_result_was_edited(harnesses):
    h = await harnesses.open(
        replies=[
            asks_for("delete_file", path="a.txt"),
            echoes_results,
            asks_for("delete_file", path="b.txt"),
            echoes_results,
            asks_for("delete_file", path="c.txt"),
            echoes_results,
        ]
    )
    await admin(h, "policy set delete_file review")
    secret_edit = "gone; api token=hunter2hunter2"
    [edited] = await h.paused_approvals("delete a.txt")
    await h.engine.decide(decision(edited, action="modify", edited_result=secret_edit))
    await h.engine.wait_idle()
    [approved] = await h.paused_approvals("delete b.txt")
    await h.engine.decide(decision(approved))
    await h.engine.wait_idle()
    [expired] = await h.paused_approvals("delete c.txt")
    h.clock.advance(days=2)
    assert await h.engine.sweep_expired() == 1

    by_subject = {e.subject: e for e in await h.audit() if e.action in ("modified", "approved", "expired")}
    assert by_subject[edited.approval_id].details["kind"] == "review"
    assert by_subject[edited.approval_id].details["edited"] is True
    assert (by_subject[approved.approval_id].details["kind"], by_subject[approved.approval_id].details["edited"]) == (
        "review",
        False,
    )
    assert by_subject[expired.approval_id].details["kind"] == "review"
    audited = str([e.details for e in await h.audit()])
    assert "hunter2" not in audited and "deleted a.txt" not in audited  # neither result text is in the audit log


async def test_a_review_survives_a_restart_and_the_tool_never_runs_twice(harnesses):
    h = await reviewed(harnesses)
    [review] = await h.paused_approvals("delete a.txt")
    await h.close()

    again = await harnesses.reopen(h)
    result = await again.engine.decide(decision(review, action="modify", edited_result="done, quietly"))
    await again.engine.wait_idle()

    assert result.resumed
    assert tool_results(sent_to_llm(again.generator)) == [("delete_file", "done, quietly", False)]
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert again.surface.replies[-1].text == "results: done, quietly"


async def test_exactly_one_decision_wins_and_four_eyes_and_approvers_apply(harnesses):
    h = await reviewed(harnesses)
    await admin(h, "four-eyes delete_file on")
    [review] = await h.paused_approvals("delete a.txt")

    with pytest.raises(NotAnApprover):
        await h.engine.decide(decision(review, actor=REQUESTER))
    await h.engine.decide(decision(review, actor=ADMIN))
    with pytest.raises(AlreadyDecided):
        await h.engine.decide(decision(review, actor=ADMIN, action="reject"))
    await h.engine.wait_idle()

    assert tool_results(sent_to_llm(h.generator)) == [("delete_file", "deleted a.txt", False)]
    assert [(e.actor, e.action) for e in await h.audit() if e.subject == review.approval_id] == [
        ("U_ADMIN", "decision refused"),
        ("U_ADMIN", "approved"),
        ("U_REQ", "decision refused"),
    ]


async def test_a_quorum_counts_reviewers(harnesses):
    h = await reviewed(harnesses)
    await admin(h, "approvers delete_file @U_ANA @U_BEN")
    await admin(h, "quorum delete_file 2")
    [review] = await h.paused_approvals("delete a.txt")

    first = await h.engine.decide(decision(review, actor="U_ANA"))
    assert not first.resumed and first.message == "Your approval was recorded (1/2)."
    with pytest.raises(InvalidEdit):
        await h.engine.decide(decision(review, actor="U_BEN", action="modify", edited_result="x"))
    await h.engine.decide(decision(review, actor="U_BEN"))
    await h.engine.wait_idle()

    assert tool_results(sent_to_llm(h.generator)) == [("delete_file", "deleted a.txt", False)]


async def test_always_plus_review_asks_before_and_after_and_runs_the_tool_once(harnesses):
    h = await reviewed(harnesses, mode="always+review")
    [approval] = await h.paused_approvals("delete a.txt")
    assert approval.kind == "approval" and h.tools.executed == []

    await h.engine.decide(decision(approval))
    await h.engine.wait_idle()

    [review] = h.surface.renders[-1].approvals
    assert (review.kind, review.result) == ("review", "deleted a.txt")
    assert len(h.generator.calls) == 1
    await h.engine.decide(decision(review))
    await h.engine.wait_idle()

    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert tool_results(sent_to_llm(h.generator)) == [("delete_file", "deleted a.txt", False)]


async def test_a_superseded_review_never_releases_the_result(harnesses):
    h = await reviewed(harnesses)
    h.generator.replies.append(echoes_results)
    [review] = await h.paused_approvals("delete a.txt")

    await h.say("never mind")
    await h.engine.wait_idle()

    assert (await h.engine.get_approval(review.approval_id)).status == "superseded"
    assert "deleted a.txt" not in str([m.to_dict() for m in sent_to_llm(h.generator)])
    assert dangling_calls(await h.history()) == []


async def test_the_result_shown_for_review_is_masked_and_truncated_and_kept_whole(harnesses):
    secret = "sk-" + "a" * 40
    h = await harnesses.open(
        replies=[asks_for("set_secret", name="db", api_key=secret, note="x" * 5000), echoes_results]
    )
    await admin(h, "policy set set_secret review")

    [review] = await h.paused_approvals("store it")

    assert review.result == "stored db"
    shown, cut = display_result(review.__class__(**{**review.__dict__, "result": f"token={secret} " + "y" * 5000}))
    assert secret not in shown and cut and len(shown) <= 2000


# --- recovery: a process that died around a review -------------------------------------------------------

DEAD = "dead-host-1-abc"


async def test_a_process_that_died_after_the_tool_but_before_the_review_never_releases_the_result(harnesses):
    before = await harnesses.open(replies=[])
    await admin(before, "policy set delete_file review")
    thread, storage = before.thread(), before.engine.storage
    # The dead process started the run, stored the model's call, ran the tool through the ledger ... and died.
    await storage.inbox.enqueue(address_of(thread), REQUESTER, ChatMessage.from_user("delete a.txt").to_dict())
    await storage.inbox.start_next(thread.key, "run-dead", DEAD, before.clock() + timedelta(seconds=30))
    step = asks_for("delete_file", path="a.txt")
    await storage.messages.write_messages(thread.key, [step])
    key = ledger_key("run-dead", step.tool_calls[0].id)
    assert await storage.ledger.begin(key, args_digest({"path": "a.txt"}), run_id="run-dead", tool_name="delete_file")
    assert await storage.ledger.finish(key, True, "deleted a.txt")

    before.clock.advance(seconds=before.engine.config.lease_seconds + 1)
    after = await harnesses.reopen(before, generator=ScriptedChatGenerator([echoes_results]))
    await after.engine.wait_idle()

    assert tool_results(sent_to_llm(after.generator)) == [("delete_file", WITHHELD_AFTER_RESTART, True)]
    assert before.tools.executed == []  # the dead process's run is not repeated either
    assert after.surface.replies_in(thread)[-1] == f"results: {WITHHELD_AFTER_RESTART}"


async def test_a_resume_that_died_after_the_review_was_decided_releases_what_the_reviewer_decided(harnesses):
    before = await harnesses.open(replies=[asks_for("delete_file", path="a.txt")])
    await admin(before, "policy set delete_file review")
    [review] = await before.paused_approvals("delete a.txt")
    storage = before.engine.storage
    assert await storage.approvals.decide(
        review.approval_id, status="modified", decided_by=REQUESTER, final_result="tidied up", now=before.clock()
    )
    assert await storage.leases.claim_paused(review.run_id, DEAD, before.clock() + timedelta(seconds=30))

    before.clock.advance(seconds=before.engine.config.lease_seconds + 1)
    after = await harnesses.reopen(before, generator=ScriptedChatGenerator([echoes_results]))
    await after.engine.wait_idle()

    assert tool_results(sent_to_llm(after.generator)) == [("delete_file", "tidied up", False)]
    assert before.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert dangling_calls(await after.history()) == []

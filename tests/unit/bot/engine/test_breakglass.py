"""Break-glass through the engine: after the delay the requester may run an undecided call once, with a reason;
it is marked, audited, announced and reviewed; never for deny, tainted, other people, too early or too often."""

from __future__ import annotations

import pytest

from bot.engine.admin_syntax import parse_command
from bot.engine.breakglass import MARK, BreakGlassRefused
from bot.engine.errors import AlreadyDecided, CommandError, NotAnApprover
from bot.engine.model import AdminRequest, DecisionRequest, Mention, Note
from bot.engine.presentation import breakglass_review_sentence, outcome_sentence
from tests.fakes.engine_kit import (
    ADMIN,
    CHANNEL,
    OTHER,
    PLATFORM,
    REQUESTER,
    WORKSPACE,
    asks,
    asks_for,
    call,
    says,
)
from tests.fakes.taint_kit import fetch_url_tool


async def command(h, text: str, actor: str = ADMIN) -> str:
    return await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, actor, text))


def glass(view, actor: str = REQUESTER, reason: str | None = "prod is down, nobody answers") -> DecisionRequest:
    return DecisionRequest(view.approval_id, actor, "breakglass", feedback=reason, place=view.thread.place)


def test_the_grammar():
    set_ = parse_command("policy set delete_file always breakglass after 5m")
    assert (set_.name, set_.tool_key, set_.value, set_.breakglass) == ("policy set", "delete_file", "always", 300)
    assert parse_command("policy set delete_file always #ops breakglass off").breakglass == 0
    conditional = parse_command("policy set delete_file always breakglass after 1h when path=a")
    assert conditional.breakglass == 3600 and conditional.condition is not None
    assert parse_command("policy set delete_file always").breakglass is None
    assert parse_command("breakglass list").name == "breakglass list"
    review = parse_command("breakglass review ab12cd34 not-ok too broad a change")
    assert review.value == ("ab12cd34", "not-ok", "too broad a change")
    assert parse_command("breakglass review ab12 ok").value == ("ab12", "ok", None)
    for bad in (
        "policy set delete_file always breakglass",
        "policy set delete_file always breakglass after x",
        "policy reset delete_file breakglass off",
        "breakglass review ab12 maybe",
    ):
        with pytest.raises(CommandError):
            parse_command(bad)


async def test_after_the_delay_the_requester_breaks_glass_once_marked_audited_and_reviewed(harnesses, database_url):
    h = await harnesses.open(
        replies=[asks_for("delete_file", path="old.log"), says("done")],
        database_url=database_url,
        breakglass_channel="C_BREAKGLASS",
    )
    answer = await command(h, "policy set delete_file always breakglass after 5m")
    assert "may break glass after 5m" in answer
    assert "Only countersign admins" in await command(h, "policy set delete_file always breakglass off", OTHER)
    [view] = await h.paused_approvals("delete old.log")

    h.clock.advance(minutes=4, seconds=59)
    with pytest.raises(BreakGlassRefused, match="wait 1s"):
        await h.engine.decide(glass(view))
    h.clock.advance(seconds=1)
    with pytest.raises(BreakGlassRefused, match="needs a reason"):
        await h.engine.decide(glass(view, reason="  "))
    with pytest.raises(NotAnApprover, match="Only the person who asked"):
        await h.engine.decide(glass(view, actor=ADMIN))
    assert (await h.engine.get_approval(view.approval_id)).is_pending and h.tools.runs_of("delete_file") == []

    result = await h.engine.decide(glass(view))
    await h.engine.wait_idle()

    assert "Break glass" in result.message
    assert h.tools.runs_of("delete_file") == [{"path": "old.log"}], "ran once"
    decided = await h.engine.get_approval(view.approval_id)
    assert decided.status == "approved" and decided.decided_by == REQUESTER
    assert decided.feedback == MARK + "prod is down, nobody answers"
    assert outcome_sentence(decided).startswith("🔴 BREAK GLASS: run by")
    registry = h.engine.observer.registry  # type: ignore[attr-defined]
    assert (
        registry.get_sample_value("countersign_decisions_total", {"action": "breakglass", "outcome": "recorded"}) == 1
    )
    [entry] = await h.audit("break-glass")
    assert entry.actor == REQUESTER and entry.subject == view.approval_id
    assert await h.audit("approved") == []
    [post] = [r for r in h.surface.replies if r.thread.channel == "C_BREAKGLASS"]
    assert "Break glass" in post.text and "delete_file" in post.text and "nobody answers" in post.text
    with pytest.raises(AlreadyDecided):
        await h.engine.decide(glass(view))
    assert h.tools.runs_of("delete_file") == [{"path": "old.log"}], "still once"

    listing = await command(h, "breakglass list", OTHER)
    assert f"delete_file by {REQUESTER}" in listing and view.approval_id[:8] in listing and "due" in listing
    assert "someone else must review" in await command(h, f"breakglass review {view.approval_id[:8]} ok", REQUESTER)
    assert "needs a note" in await command(h, f"breakglass review {view.approval_id[:8]} not-ok", ADMIN)
    assert "Only the person who asked and countersign admins" in await command(
        h, f"breakglass review {view.approval_id[:8]} ok", OTHER
    )
    done = await command(h, f"breakglass review {view.approval_id[:8]} not-ok too broad", ADMIN)
    assert "recorded: not-ok" in done
    [review] = await h.audit("break-glass review")
    assert review.actor == ADMIN and review.details["outcome"] == "not-ok" and review.details["note"] == "too broad"
    assert await command(h, "breakglass list") == "No break-glass review is open."


async def test_every_approver_of_the_tool_gets_a_direct_message(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.log"), says("done")])
    h.surface.direct.update({"U_APP1", "U_APP2"})
    await command(h, "approvers delete_file <@U_APP1> <@U_APP2>")
    await command(h, "policy set delete_file always breakglass after 1m")
    await h.say("delete a.log")
    [view] = next(r for r in h.surface.renders if r.thread.channel == CHANNEL).approvals
    h.clock.advance(minutes=1)

    await h.engine.decide(glass(view))
    await h.engine.wait_idle()

    dms = {r.thread.channel for r in h.surface.replies if "Break glass" in r.text}
    assert dms == {"D-U_APP1", "D-U_APP2"}
    assert h.tools.runs_of("delete_file") == [{"path": "a.log"}]


async def test_not_without_the_setting(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="x"), says("ok")])
    await command(h, "policy set delete_file always breakglass after 1m")
    await command(h, "policy set delete_file always breakglass off")
    [view] = await h.paused_approvals("delete x")
    h.clock.advance(hours=1)
    with pytest.raises(BreakGlassRefused, match="not turned on"):
        await h.engine.decide(glass(view))
    assert [e.details["fields"] for e in await h.audit("breakglass")] == [
        {"breakglass_seconds": None},
        {"breakglass_seconds": 60},
    ]


async def test_never_for_a_tainted_call(harnesses):
    h2 = await harnesses.open(replies=_tainted_delete(), extra_tools=[fetch_url_tool()])
    await command(h2, "policy set delete_file always breakglass after 1m")
    [tainted] = await h2.paused_approvals("clean up what the page says")
    assert tainted.provenance and tainted.provenance["tainted"]
    h2.clock.advance(hours=1)
    with pytest.raises(BreakGlassRefused, match="untrusted text"):
        await h2.engine.decide(glass(tainted))
    assert h2.tools.runs_of("delete_file") == []
    [refused] = [e for e in await h2.audit("decision refused") if e.details["action"] == "breakglass"]
    assert refused.details["reason"] == "BreakGlassRefused"


def _tainted_delete() -> list:
    from tests.fakes.taint_kit import INJECTED

    return [asks_for("fetch_url", url="https://evil.example"), asks_for("delete_file", path=INJECTED), says("ok")]


async def test_a_deny_tool_never_pauses_so_there_is_nothing_to_break(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.log"), says("refused")])
    await command(h, "policy set delete_file deny breakglass after 1m")
    await h.say("delete a.log")
    await h.engine.wait_idle()
    assert await h.engine.storage.approvals.pending() == [] and h.tools.runs_of("delete_file") == []


async def test_the_rate_limit_per_person(harnesses):
    h = await harnesses.open(
        replies=[asks(call("delete_file", path="a"), call("delete_file", path="b")), says("done")],
        breakglass_limit=1,
    )
    await command(h, "policy set delete_file always breakglass after 1m")
    first, second = await h.paused_approvals("delete a and b")
    h.clock.advance(minutes=1)

    await h.engine.decide(glass(first))
    with pytest.raises(BreakGlassRefused, match="1 times in the last 24 h"):
        await h.engine.decide(glass(second))
    assert (await h.engine.get_approval(second.approval_id)).is_pending


async def test_a_limit_of_zero_turns_it_off(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a"), says("done")], breakglass_limit=0)
    await command(h, "policy set delete_file always breakglass after 1m")
    [view] = await h.paused_approvals("delete a")
    h.clock.advance(minutes=1)
    with pytest.raises(BreakGlassRefused, match="turned off here"):
        await h.engine.decide(glass(view))


async def test_the_delay_and_the_open_review_survive_a_restart(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.log"), says("done")])
    await command(h, "policy set delete_file always breakglass after 10m")
    [view] = await h.paused_approvals("delete a.log")
    h.clock.advance(minutes=6)
    h2 = await harnesses.reopen(h)
    with pytest.raises(BreakGlassRefused, match="wait 4m"):
        await h2.engine.decide(glass(view))
    h.clock.advance(minutes=4)

    await h2.engine.decide(glass(view))
    await h2.engine.wait_idle()
    h3 = await harnesses.reopen(h2)

    assert h3.tools.runs_of("delete_file") == [{"path": "a.log"}]
    assert view.approval_id[:8] in await command(h3, "breakglass list")
    h.clock.advance(hours=23, minutes=59)
    assert await h3.engine.offer_breakglass_due() == 0, "the review is not due yet"
    h.clock.advance(minutes=5)
    assert await h3.engine.offer_breakglass_due() == 1
    h.clock.advance(minutes=5)
    assert await h3.engine.offer_breakglass_due() == 0, "reminded once"
    [reminder] = [r for r in h3.surface.replies if "review overdue" in r.text]
    assert reminder.thread == view.thread and REQUESTER in reminder.text
    assert "OVERDUE" in await command(h3, "breakglass list")
    await command(h3, f"breakglass review {view.approval_id[:8]} ok", ADMIN)
    h.clock.advance(days=2)
    assert await h3.engine.offer_breakglass_due() == 0 and await command(h3, "breakglass list") == (
        "No break-glass review is open."
    )


async def test_the_requester_is_told_once_after_the_delay_and_can_break_glass_by_command(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.log"), says("done")])
    await command(h, "policy set delete_file always breakglass after 5m")
    [view] = await h.paused_approvals("delete a.log")
    h.clock.advance(minutes=4)
    assert await h.engine.offer_breakglass_due() == 0, "not before the delay"
    h.clock.advance(minutes=1)
    h2 = await harnesses.reopen(h)

    assert await h2.engine.offer_breakglass_due() == 1
    assert await h2.engine.offer_breakglass_due() == 0, "once"
    [offer] = [r for r in h2.surface.replies if "may break glass" in r.text]
    assert offer.thread == view.thread and f"breakglass run {view.approval_id[:8]}" in offer.text
    assert "None of your pending calls" in await command(h2, f"breakglass run {view.approval_id[:8]} now", OTHER)

    answer = await command(h2, f"breakglass run {view.approval_id[:8]} prod down, OPS-3", REQUESTER)
    await h2.engine.wait_idle()

    assert "Break glass" in answer
    assert h2.tools.runs_of("delete_file") == [{"path": "a.log"}]
    assert (await h2.engine.get_approval(view.approval_id)).feedback == MARK + "prod down, OPS-3"


async def test_a_deny_set_after_the_pause_still_stops_a_broken_glass_call(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.log"), says("blocked")])
    await command(h, "policy set delete_file always breakglass after 1m")
    [view] = await h.paused_approvals("delete a.log")
    await command(h, "policy set delete_file deny")  # closes the waiting call at once (issue 30)
    h.clock.advance(minutes=1)

    with pytest.raises(AlreadyDecided):
        await h.engine.decide(glass(view))
    await h.engine.wait_idle()

    assert h.tools.runs_of("delete_file") == [], "deny wins over break-glass, as over an approval"
    assert await h.audit("closed by policy")


async def test_the_card_offers_break_glass_once_the_delay_passed_and_shows_the_review_after_it(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.log"), says("done")])
    await command(h, "policy set delete_file always breakglass after 5m")
    [view] = await h.paused_approvals("delete a.log")
    assert view.breakglass_open is False
    h.clock.advance(minutes=4)
    with pytest.raises(BreakGlassRefused, match="wait 1m"):  # before a surface asks for the reason
        await h.engine.check_can_break_glass(view.approval_id, REQUESTER, view.thread.place)
    h.clock.advance(minutes=1)
    assert (await h.engine.get_approval(view.approval_id)).breakglass_open is True
    with pytest.raises(NotAnApprover, match="Only the person who asked"):
        await h.engine.check_can_break_glass(view.approval_id, ADMIN, view.thread.place)
    assert (await h.engine.check_can_break_glass(view.approval_id, REQUESTER, view.thread.place)).breakglass_open

    updates = len(h.surface.updates)
    assert await h.engine.offer_breakglass_due() == 1
    assert len(h.surface.updates) == updates + 1, "the card is re-rendered when the offer opens"
    assert h.surface.last_update_for(view.approval_id).breakglass_open  # type: ignore[union-attr]

    await h.engine.decide(glass(view))
    await h.engine.wait_idle()
    decided = await h.engine.get_approval(view.approval_id)
    assert decided.breakglass_open is False and decided.breakglass_review is None
    assert "a review is due" in outcome_sentence(decided)
    with pytest.raises(NotAnApprover, match="someone else must review"):
        await h.engine.check_can_review_breakglass(view.approval_id, REQUESTER)
    with pytest.raises(CommandError, match="needs a note"):
        await h.engine.review_breakglass(view.approval_id, ADMIN, "not-ok", " ")

    answer = await h.engine.review_breakglass(view.approval_id, ADMIN, "not-ok", "too broad")

    assert "recorded: not-ok" in answer
    shown = h.surface.last_update_for(view.approval_id)
    assert shown is not None and shown.breakglass_review is not None
    assert (shown.breakglass_review.reviewer, shown.breakglass_review.outcome) == (ADMIN, "not-ok")
    assert breakglass_review_sentence(shown).startswith(f"Review: not OK by {ADMIN} at ")  # type: ignore[union-attr]
    assert "reviewed. Reason:" in outcome_sentence(shown)
    with pytest.raises(CommandError, match="No open break-glass review"):
        await h.engine.review_breakglass(view.approval_id, ADMIN, "ok")


async def test_a_tainted_call_is_never_offered_break_glass_on_its_card(harnesses):
    h = await harnesses.open(replies=_tainted_delete(), extra_tools=[fetch_url_tool()])
    await command(h, "policy set delete_file always breakglass after 1m")
    [tainted] = await h.paused_approvals("clean up what the page says")
    h.clock.advance(hours=1)
    assert (await h.engine.get_approval(tainted.approval_id)).breakglass_open is False
    assert await h.engine.offer_breakglass_due() == 0


def test_a_review_request_note_keeps_its_approval_through_the_outbox_json():
    asking = Note(("Break glass: ", Mention("U1"), " ran it."), review="ap-1")
    assert Note.from_json(asking.to_json()) == asking
    plain = Note(("Decided by ", Mention("U1")))
    assert plain.to_json() == '["Decided by ", {"mention": "U1"}]', "notes stored before keep their format"
    assert Note.from_json(plain.to_json()) == plain
    with pytest.raises(ValueError):
        Note.from_json('{"review": "ap-1", "parts": "not a list"}')


async def test_the_channel_post_and_the_dms_ask_for_the_review(harnesses):
    h = await harnesses.open(
        replies=[asks_for("delete_file", path="a.log"), says("done")], breakglass_channel="C_BREAKGLASS"
    )
    h.surface.direct.add("U_APP1")
    await command(h, "approvers delete_file <@U_APP1>")
    await command(h, "policy set delete_file always breakglass after 1m")
    await h.say("delete a.log")
    [view] = next(r for r in h.surface.renders if r.thread.channel == CHANNEL).approvals
    h.clock.advance(minutes=1)

    await h.engine.decide(glass(view))
    await h.engine.wait_idle()

    asked = {r.thread.channel: r.note for r in h.surface.replies if r.note is not None and r.note.review}
    assert set(asked) == {"C_BREAKGLASS", "D-U_APP1"}
    assert {note.review for note in asked.values()} == {view.approval_id}

"""End to end through the engine: untrusted and secret values reach the surface in full, are masked and
truncated for display, and are kept in full in storage."""

from __future__ import annotations

import logging

import pytest

from bot.engine.model import DecisionRequest
from bot.engine.presentation import DEFAULT_VALUE_LIMIT, display_arguments, outcome_sentence
from bot.messages import ChatRole
from bot.redaction import MASK
from tests.fakes.engine_kit import REQUESTER, asks_for, echoes_results, sent_to_llm

SECRET = "sk-live-7f3a9c0d1e2b4a5968"
NEW_SECRET = "sk-live-rotated-000111222"
LONG_NOTE = "<!channel> <@U_BOSS> <https://evil.example|click> " + "x" * 10_240


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.DEBUG)
    return caplog


async def test_the_surface_gets_full_values_and_display_arguments_masks_and_truncates_them(harnesses):
    h = await harnesses.open(replies=[asks_for("set_secret", name="stripe", api_key=SECRET, note=LONG_NOTE)])

    [view] = await h.paused_approvals("store the stripe key")

    assert view.arguments == {"name": "stripe", "api_key": SECRET, "note": LONG_NOTE}, "full values, unescaped"
    name, key, note = display_arguments(view.arguments)
    assert (name.text, name.secret, name.truncated) == ("stripe", False, False)
    assert (key.text, key.secret) == (MASK, True) and SECRET not in key.text
    assert note.truncated and len(note.text) <= DEFAULT_VALUE_LIMIT and note.text.startswith("<!channel>")
    stored = await h.engine.storage.approvals.get(view.approval_id)
    assert stored.arguments["note"] == LONG_NOTE and stored.arguments["api_key"] == SECRET


async def test_secrets_stay_out_of_logs_and_the_audit_log_through_a_whole_decision(harnesses, logs):
    h = await harnesses.open(replies=[asks_for("set_secret", name="stripe", api_key=SECRET), echoes_results])
    [view] = await h.paused_approvals("store the stripe key")

    await h.engine.decide(
        DecisionRequest(
            view.approval_id, REQUESTER, "modify", edited_params={"api_key": NEW_SECRET}, place=view.thread.place
        )
    )
    await h.engine.wait_idle()

    assert h.tools.runs_of("set_secret") == [{"name": "stripe", "api_key": NEW_SECRET, "note": ""}]
    logged = "\n".join(r.getMessage() + repr(r.__dict__) for r in logs.records)
    assert SECRET not in logged and NEW_SECRET not in logged
    audited = repr([(e.action, e.subject, e.details) for e in await h.audit()])
    assert SECRET not in audited and NEW_SECRET not in audited
    assert "api_key" in audited, "the audit names the changed field"
    decided = await h.engine.get_approval(view.approval_id)
    assert NEW_SECRET not in outcome_sentence(decided) and MASK in outcome_sentence(decided)


async def test_the_modification_note_masks_a_new_secret_while_the_tool_gets_it_in_full(harnesses):
    h = await harnesses.open(replies=[asks_for("set_secret", name="stripe", api_key=SECRET), echoes_results])
    [view] = await h.paused_approvals("store the stripe key")

    await h.engine.decide(
        DecisionRequest(
            view.approval_id,
            REQUESTER,
            "modify",
            edited_params={"api_key": NEW_SECRET, "note": "rot"},
            place=view.thread.place,
        )
    )
    await h.engine.wait_idle()

    [note] = [m for m in sent_to_llm(h.generator) if m.role == ChatRole.USER and m.meta.get("modification_of")]
    assert NEW_SECRET not in note.text and MASK in note.text and '"note": "rot"' in note.text
    assert h.tools.runs_of("set_secret") == [{"name": "stripe", "api_key": NEW_SECRET, "note": "rot"}]

"""Previews (issue 30): computing them with a time limit, binding approvals to their digest, re-checking
before the run, ``approved_preview``, ``preview_required``, and Respond's Haystack mapping."""

from __future__ import annotations

import asyncio
import threading

import pytest

from bot.hitl import apply_decisions
from bot.hitl.previews import (
    CHANGED_SINCE_APPROVED,
    DEFAULT_PREVIEW_TIMEOUT,
    Preview,
    approval_refusal,
    compute_preview,
    preview_digest,
    preview_timeout,
    reask_text,
    recheck,
    run_arguments,
    shown_preview,
)
from bot.hitl.respond import HUMAN_RESPONSE_PREFIX, RespondRefused, respond_decision
from bot.messages import ChatMessage, ToolCall
from bot.redaction import MASK
from bot.tools import tool


class World:
    """A fake world a deployment tool acts on: its preview reads it, the tool changes it."""

    def __init__(self) -> None:
        self.pods = 3
        self.applied: list[str] = []


WORLD = World()


def plan(manifest: str) -> str:
    return f"{manifest}: {WORLD.pods} pods will restart"


@tool(preview=plan, preview_required=True)
def apply_manifest(manifest: str, approved_preview: str) -> str:
    """Apply a manifest.

    :param manifest: The file.
    """
    WORLD.applied.append(approved_preview)
    return "applied"


@pytest.fixture(autouse=True)
def fresh_world() -> None:
    WORLD.pods, WORLD.applied = 3, []


def test_approved_preview_is_hidden_from_the_model_and_the_flags_are_kept() -> None:
    assert "approved_preview" not in apply_manifest.parameters["properties"]
    assert apply_manifest.preview is plan and apply_manifest.preview_required
    assert not apply_manifest.respondable


async def test_a_sync_preview_runs_in_a_worker_thread_and_its_digest_binds_the_text() -> None:
    seen: list[bool] = []

    def where(manifest: str) -> str:
        seen.append(threading.current_thread() is threading.main_thread())
        return plan(manifest)

    t = tool(apply_manifest.function, preview=where)
    preview = await compute_preview(t, {"manifest": "web.yaml"}, 1.0)

    assert preview == Preview("ok", "web.yaml: 3 pods will restart", preview_digest("web.yaml: 3 pods will restart"))
    assert seen == [False]


async def test_an_async_preview_and_a_structured_result() -> None:
    async def rows(manifest: str) -> dict[str, int]:
        return {"rows": 2, "files": 1}

    preview = await compute_preview(tool(apply_manifest.function, preview=rows), {"manifest": "x"}, 1.0)
    assert preview is not None and preview.text == '{"files": 1, "rows": 2}'


async def test_a_tool_without_a_preview_has_none() -> None:
    @tool
    def echo(text: str) -> str:
        return text

    assert await compute_preview(echo, {"text": "a"}, 1.0) is None
    assert recheck(echo, None, None).run
    assert approval_refusal(echo, None) is None


async def test_a_preview_that_times_out_is_shown_as_such_and_refuses_approval_when_required() -> None:
    release = threading.Event()

    def slow(manifest: str) -> str:
        release.wait(5)
        return "late"

    required = tool(apply_manifest.function, preview=slow, preview_required=True)
    optional = tool(apply_manifest.function, preview=slow)
    try:
        preview = await compute_preview(required, {"manifest": "x"}, 0.05)
    finally:
        release.set()
    assert preview is not None and (preview.status, preview.digest) == ("timeout", None)
    assert "did not finish within 0.05s" in preview.text
    assert "timed out" in (approval_refusal(required, preview) or "")
    assert approval_refusal(optional, preview) is None


async def test_a_preview_that_fails_is_shown_without_a_traceback() -> None:
    def broken(manifest: str) -> str:
        raise RuntimeError("cluster unreachable")

    required = tool(apply_manifest.function, preview=broken, preview_required=True)
    preview = await compute_preview(required, {"manifest": "x"}, 1.0)
    assert preview is not None and preview.status == "failed"
    assert preview.text == "The preview failed: RuntimeError: cluster unreachable"
    assert "failed" in (approval_refusal(required, preview) or "")
    assert approval_refusal(tool(apply_manifest.function, preview=broken), preview) is None


async def test_a_world_that_changes_after_the_click_is_re_asked_with_both_previews_then_runs_once() -> None:
    args = {"manifest": "web.yaml"}
    approved = await compute_preview(apply_manifest, args, 1.0)
    assert approved is not None
    WORLD.pods = 5  # the world changes between the click and the run

    fresh = await compute_preview(apply_manifest, args, 1.0)
    check = recheck(apply_manifest, approved.digest, fresh)
    assert not check.run and CHANGED_SINCE_APPROVED in check.reason
    assert check.fresh is not None
    body = reask_text(approved, check.fresh, 500)
    assert "3 pods" in body and "5 pods" in body and CHANGED_SINCE_APPROVED in body
    assert WORLD.applied == []

    # The re-asked approval binds to the new preview; the second re-check matches and the call runs once.
    again = await compute_preview(apply_manifest, args, 1.0)
    second = recheck(apply_manifest, check.fresh.digest, again)
    assert second.run
    apply_manifest.function(**run_arguments(apply_manifest, args, check.fresh))
    assert WORLD.applied == ["web.yaml: 5 pods will restart"]


async def test_approved_preview_receives_exactly_the_approved_plan_and_never_the_models() -> None:
    args = {"manifest": "web.yaml", "approved_preview": "forged by the model"}
    approved = await compute_preview(apply_manifest, {"manifest": "web.yaml"}, 1.0)
    kwargs = run_arguments(apply_manifest, args, approved)
    assert kwargs == {"manifest": "web.yaml", "approved_preview": "web.yaml: 3 pods will restart"}


async def test_an_edit_recomputes_the_preview_so_the_old_approval_no_longer_matches() -> None:
    approved = await compute_preview(apply_manifest, {"manifest": "web.yaml"}, 1.0)
    edited = await compute_preview(apply_manifest, {"manifest": "db.yaml"}, 1.0)
    assert approved is not None and edited is not None
    assert edited.text == "db.yaml: 3 pods will restart" and edited.digest != approved.digest
    assert not recheck(apply_manifest, approved.digest, edited).run


async def test_a_re_check_that_fails_never_runs_a_call_approved_on_a_good_preview() -> None:
    approved = await compute_preview(apply_manifest, {"manifest": "web.yaml"}, 1.0)
    assert approved is not None
    failed = Preview("failed", "The preview failed: OSError: gone", None)
    assert not recheck(apply_manifest, approved.digest, failed).run
    assert not recheck(apply_manifest, approved.digest, None).run
    optional = tool(apply_manifest.function, preview=plan)
    assert recheck(optional, None, failed).run  # approved knowing it had none, and it still has none


def test_a_preview_is_masked_and_cut_like_a_result() -> None:
    secret = Preview("ok", "export GITHUB_TOKEN=ghp_abcdef123456 " + "x" * 400, "d")
    text, cut = shown_preview(secret, 100)
    assert MASK in text and "ghp_abcdef" not in text
    assert cut and len(text) <= 100 and text.endswith("chars)")
    assert shown_preview(Preview("ok", "short", "d"), 100) == ("short", False)


def test_the_time_limit_setting_takes_durations() -> None:
    assert preview_timeout({}) == DEFAULT_PREVIEW_TIMEOUT == 10.0
    assert preview_timeout({"COUNTERSIGN_PREVIEW_TIMEOUT": "30s"}) == 30.0
    assert preview_timeout({"COUNTERSIGN_PREVIEW_TIMEOUT": "2m"}) == 120.0
    with pytest.raises(ValueError, match="COUNTERSIGN_PREVIEW_TIMEOUT"):
        preview_timeout({"COUNTERSIGN_PREVIEW_TIMEOUT": "soon"})


def test_respond_maps_to_a_non_executing_decision_with_the_marked_text_as_the_result() -> None:
    @tool(respondable=True)
    def ticket(summary: str) -> str:
        raise AssertionError("a responded call never runs")

    call = ToolCall("ticket", {"summary": "disk full"}, id="c1")
    decision = respond_decision(ticket, "c1", "  the ticket is INC-4411 ")
    assert (decision.execute, decision.tool_call_id) == (False, "c1")
    assert decision.feedback == HUMAN_RESPONSE_PREFIX + "the ticket is INC-4411"

    applied = apply_decisions(ChatMessage.from_assistant(tool_calls=[call]), [decision], {"ticket": ticket})
    assert applied.to_execute == []
    result = applied.messages[-1].tool_call_result
    assert result is not None and result.result == HUMAN_RESPONSE_PREFIX + "the ticket is INC-4411"
    assert result.error is False  # the call's answer, not a failure


def test_respond_is_refused_unless_the_tool_or_the_policy_allows_it() -> None:
    @tool
    def restart(service: str) -> str:
        return service

    with pytest.raises(RespondRefused, match="respondable"):
        respond_decision(restart, "c1", "done by hand")
    assert respond_decision(restart, "c1", "done by hand", policy_allows=True).feedback
    with pytest.raises(RespondRefused, match="some text"):
        respond_decision(restart, "c1", "   ", policy_allows=True)


async def test_the_event_loop_keeps_serving_while_a_sync_preview_runs() -> None:
    started, release = threading.Event(), threading.Event()

    def blocking(manifest: str) -> str:
        started.set()
        release.wait(5)
        return "done"

    task = asyncio.create_task(compute_preview(tool(apply_manifest.function, preview=blocking), {"manifest": "x"}, 5))
    await asyncio.to_thread(started.wait, 5)
    assert not task.done()  # the loop ran this line while the preview was still blocked
    release.set()
    preview = await task
    assert preview is not None and preview.text == "done"

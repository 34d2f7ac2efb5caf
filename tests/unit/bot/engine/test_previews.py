"""Previews through the engine (issue 30): computed at the pause and stored with the approval, preview_required
refusing Approve, and the re-check before the run: a changed world re-asks instead of running."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from bot.engine.model import DecisionRequest
from bot.engine.previewing import NOT_RUN_AFTER_RESTART, PreviewRequired, preview_sections
from bot.hitl.previews import CHANGED_SINCE_APPROVED, preview_digest
from bot.llm import ScriptedChatGenerator
from bot.tools import Tool, tool
from tests.fakes.engine_kit import REQUESTER, asks_for, dangling_calls, echoes_results, says, tool_results

DEAD = "dead-process"


def decision(view, action: str = "confirm", **kwargs) -> DecisionRequest:
    return DecisionRequest(view.approval_id, REQUESTER, action, place=view.thread.place, **kwargs)


@dataclass
class Cluster:
    """A fake world the preview reads: how many pods a manifest restarts, changed by the test after a click."""

    pods: int = 3
    applied: list[dict] = field(default_factory=list)
    previews: int = 0
    fail: bool = False
    slow: threading.Event | None = None

    def tools(self) -> list[Tool]:
        world = self

        def plan(path: str) -> str:
            world.previews += 1
            if world.fail:
                raise RuntimeError("cluster unreachable")
            if world.slow is not None:
                world.slow.wait(5)
            return f"{world.pods} pods of {path} will restart"

        @tool(preview=plan)
        def apply_manifest(path: str, approved_preview: str) -> str:
            """Apply a manifest.

            :param path: The manifest file.
            """
            world.applied.append({"path": path, "approved_preview": approved_preview})
            return f"applied {path}"

        @tool(preview=plan, preview_required=True)
        def apply_strict(path: str) -> str:
            """Apply a manifest, only with a preview.

            :param path: The manifest file.
            """
            world.applied.append({"path": path})
            return f"applied {path}"

        return [apply_manifest, apply_strict]


async def test_the_preview_is_computed_at_the_pause_stored_shown_and_audited(harnesses, database_url):
    world = Cluster()
    h = await harnesses.open(
        replies=[asks_for("apply_manifest", path="web.yaml"), says("done")],
        extra_tools=world.tools(),
        database_url=database_url,
    )
    [view] = await h.paused_approvals("apply web.yaml")

    assert view.preview is not None and view.preview["text"] == "3 pods of web.yaml will restart"
    assert view.preview["digest"] == preview_digest("3 pods of web.yaml will restart")
    stored = await h.engine.storage.approvals.get(view.approval_id)
    assert stored.preview == view.preview
    [section] = preview_sections(view.preview, 500)
    assert (section.label, section.text) == ("preview", "3 pods of web.yaml will restart")

    await h.engine.decide(decision(view))
    await h.engine.wait_idle()

    assert world.applied == [{"path": "web.yaml", "approved_preview": "3 pods of web.yaml will restart"}]
    assert world.previews == 2, "once at the pause, once right before the run"
    [approved] = await h.audit("approved")
    assert approved.details["preview_digest"] == view.preview["digest"]
    assert approved.details["preview_status"] == "ok"


async def test_a_world_changed_after_the_click_re_asks_with_both_previews_and_runs_once_when_approved_again(
    harnesses, database_url
):
    world = Cluster()
    h = await harnesses.open(
        replies=[asks_for("apply_manifest", path="web.yaml"), says("done")],
        extra_tools=world.tools(),
        database_url=database_url,
    )
    [view] = await h.paused_approvals("apply web.yaml")
    world.pods = 7  # the world changes between the pause and the click's run

    renders = len(h.surface.renders)
    await h.engine.decide(decision(view))
    await h.engine.wait_idle()

    assert world.applied == [], "a changed preview never runs"
    assert len(h.surface.renders) == renders + 1, "asked again"
    [again] = h.surface.renders[-1].approvals
    assert again.approval_id != view.approval_id and again.is_pending
    assert again.preview["text"] == "7 pods of web.yaml will restart"
    assert again.preview["approved"]["text"] == "3 pods of web.yaml will restart"
    labels = [(s.label, s.text) for s in preview_sections(again.preview, 500)]
    assert labels == [
        (CHANGED_SINCE_APPROVED, f"The preview {CHANGED_SINCE_APPROVED}."),
        ("approved preview", "3 pods of web.yaml will restart"),
        ("preview now", "7 pods of web.yaml will restart"),
    ]
    [paused_again] = [e for e in await h.audit("paused") if e.details.get("reasked")]
    [what] = paused_again.details["reasked"]
    assert what["approval"] == view.approval_id
    assert what["approved_digest"] == view.preview["digest"]
    assert what["new_digest"] == preview_digest("7 pods of web.yaml will restart")
    assert (await h.run_of(again.run_id)).status == "paused"

    await h.engine.decide(decision(again))
    await h.engine.wait_idle()

    assert world.applied == [{"path": "web.yaml", "approved_preview": "7 pods of web.yaml will restart"}]
    assert (await h.run_of(again.run_id)).status == "finished"
    assert h.surface.replies[-1].text.endswith("done")


async def test_preview_required_refuses_approve_after_a_failed_preview_but_reject_works(harnesses, database_url):
    world = Cluster(fail=True)
    h = await harnesses.open(
        replies=[asks_for("apply_strict", path="web.yaml"), says("not applied")],
        extra_tools=world.tools(),
        database_url=database_url,
    )
    [view] = await h.paused_approvals("apply web.yaml")
    assert view.preview["status"] == "failed"
    assert "cluster unreachable" in view.preview["text"]
    [section] = preview_sections(view.preview, 500)
    assert section.label == "preview failed"

    with pytest.raises(PreviewRequired, match="needs a preview"):
        await h.engine.decide(decision(view))
    assert (await h.engine.get_approval(view.approval_id)).is_pending
    await h.engine.decide(decision(view, "reject"))
    await h.engine.wait_idle()
    assert world.applied == []


async def test_a_failed_preview_without_preview_required_can_be_approved_and_re_checks_fail_closed(
    harnesses, database_url
):
    world = Cluster(fail=True)
    h = await harnesses.open(
        replies=[asks_for("apply_manifest", path="web.yaml"), says("done")],
        extra_tools=world.tools(),
        database_url=database_url,
    )
    [view] = await h.paused_approvals("apply web.yaml")
    assert view.preview["status"] == "failed"
    world.fail = False  # it works now: the approval was made on no preview, so the call is asked again with it

    await h.engine.decide(decision(view))
    await h.engine.wait_idle()

    assert world.applied == []
    [again] = h.surface.renders[-1].approvals
    assert again.preview["status"] == "ok" and again.preview["approved"]["status"] == "failed"


async def test_a_preview_that_overruns_its_time_limit_is_shown_as_timed_out(harnesses):
    gate = threading.Event()
    world = Cluster(slow=gate)
    h = await harnesses.open(
        replies=[asks_for("apply_strict", path="web.yaml"), says("done")],
        extra_tools=world.tools(),
        preview_timeout_seconds=0.05,
    )
    try:
        [view] = await h.paused_approvals("apply web.yaml")
    finally:
        gate.set()  # the worker thread left behind finishes
    assert view.preview["status"] == "timeout"
    assert preview_sections(view.preview, 500)[0].label == "preview timed out"
    with pytest.raises(PreviewRequired, match="timed out"):
        await h.engine.decide(decision(view))


async def test_an_edit_re_asks_with_the_preview_of_the_edited_arguments(harnesses):
    world = Cluster()
    h = await harnesses.open(
        replies=[asks_for("apply_manifest", path="web.yaml"), says("done")], extra_tools=world.tools()
    )
    [view] = await h.paused_approvals("apply web.yaml")

    await h.engine.decide(decision(view, "modify", edited_params={"path": "api.yaml"}))
    await h.engine.wait_idle()

    assert world.applied == []
    [again] = h.surface.renders[-1].approvals
    assert again.arguments == {"path": "api.yaml"}
    assert again.preview["text"] == "3 pods of api.yaml will restart"
    assert "edited" in again.preview["reason"]

    await h.engine.decide(decision(again))
    await h.engine.wait_idle()
    assert world.applied == [{"path": "api.yaml", "approved_preview": "3 pods of api.yaml will restart"}]


async def test_the_model_cannot_supply_approved_preview(harnesses):
    world = Cluster()
    h = await harnesses.open(
        replies=[asks_for("apply_manifest", path="web.yaml"), says("done")], extra_tools=world.tools()
    )
    schema = next(t for t in h.tool_list if t.name == "apply_manifest").parameters
    assert "approved_preview" not in schema.get("properties", {})
    [view] = await h.paused_approvals("apply web.yaml")
    await h.engine.decide(decision(view))
    await asyncio.wait_for(h.engine.wait_idle(), 5)
    assert world.applied[0]["approved_preview"] == "3 pods of web.yaml will restart"


async def approved_and_claimed_by_a_dead_process(h, *, started: bool):
    """The call approved and its resume claimed by a process that then died (right after the re-check: the
    ``after_preview_recheck`` failpoint, or before it: a claim that never started the run)."""
    [view] = await h.paused_approvals("apply web.yaml")
    storage = h.engine.storage
    assert await storage.approvals.decide(view.approval_id, status="approved", decided_by=REQUESTER, now=h.clock())
    assert await storage.leases.claim_paused(
        view.run_id, DEAD, h.clock() + timedelta(seconds=30), step=1, start=started
    )
    return view


@pytest.mark.parametrize("started", [False, True], ids=["claimed_by_a_resume", "claimed_and_started"])
@pytest.mark.parametrize("changed", [False, True], ids=["same_world", "world_changed"])
async def test_a_crash_between_the_re_check_and_the_run_never_runs_without_a_matching_preview(
    harnesses, started, changed
):
    world = Cluster()
    before = await harnesses.open(replies=[asks_for("apply_manifest", path="web.yaml")], extra_tools=world.tools())
    view = await approved_and_claimed_by_a_dead_process(before, started=started)
    if changed:
        world.pods = 9

    before.clock.advance(seconds=before.engine.config.lease_seconds + 1)
    after = await harnesses.reopen(before, generator=ScriptedChatGenerator([echoes_results, says("done")]))
    await after.engine.wait_idle()

    run = await after.run_of(view.run_id)
    if not changed:
        assert world.applied == [{"path": "web.yaml", "approved_preview": "3 pods of web.yaml will restart"}]
        assert run.status == "finished"
    else:  # the recovery finishes the step itself: the call is not run and the model is told why
        assert world.applied == []
        history = await after.history()
        assert dangling_calls(history) == []
        assert tool_results(history) == [("apply_manifest", NOT_RUN_AFTER_RESTART, True)]
        assert run.status == "finished"

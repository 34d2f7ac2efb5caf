"""A platform error while showing approvals loses nothing: the approvals stay stored and decidable."""

from __future__ import annotations

from bot.engine.model import DecisionRequest
from tests.fakes.engine_kit import REQUESTER, Harness, asks_for, says
from tests.fakes.recording_surface import RecordingSurface


class BrokenRenderSurface(RecordingSurface):
    """A surface whose platform refuses the approval message (e.g. Slack answering an error)."""

    async def render_approvals(self, thread, approvals):
        raise RuntimeError("platform said no")


async def test_approvals_survive_a_failed_rendering_and_the_thread_is_told(tmp_path):
    harness = await Harness.open(tmp_path, replies=[asks_for("delete_file", path="a.txt"), says("Deleted.")])
    broken = BrokenRenderSurface()
    harness.engine.register_surface("slack", broken)
    try:
        await harness.say("delete a.txt")
        assert any("could not show the buttons" in r.text for r in broken.replies)
        pending = await harness.engine.pending_for("slack", REQUESTER)
        assert [p.tool_name for p in pending] == ["delete_file"]

        listed = pending[0]  # the thread's message failed, but the approval was to be shown there
        await harness.engine.decide(
            DecisionRequest(listed.approval_id, REQUESTER, "confirm", place=listed.thread.place)
        )
        await harness.engine.wait_idle()
        assert harness.tools.runs_of("delete_file") == [{"path": "a.txt"}]
        assert broken.replies[-1].text == "Deleted."
    finally:
        await harness.close()


class ClickWhilePostingSurface(RecordingSurface):
    """A surface where someone clicks Approve while the approval message is still being posted."""

    def __init__(self, engine) -> None:
        super().__init__()
        self.engine = engine

    async def render_approvals(self, thread, approvals):
        clicked = approvals[0]
        await self.engine.decide(DecisionRequest(clicked.approval_id, REQUESTER, "confirm", place=thread.place))
        return await super().render_approvals(thread, approvals)


async def test_a_click_that_lands_while_the_message_is_posted_still_updates_the_message(tmp_path):
    harness = await Harness.open(tmp_path, replies=[asks_for("delete_file", path="a.txt"), says("Deleted.")])
    racing = ClickWhilePostingSurface(harness.engine)
    harness.engine.register_surface("slack", racing)
    try:
        await harness.say("delete a.txt")
        await harness.engine.wait_idle()
        assert racing.updates, "the rendered message was never updated with the decision"
        assert [v.status for v in racing.updates[-1].approvals] == ["approved"]
        assert harness.tools.runs_of("delete_file") == [{"path": "a.txt"}]
    finally:
        await harness.close()

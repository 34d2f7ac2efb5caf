"""A platform error while showing approvals loses nothing: the approvals stay stored and decidable."""

from __future__ import annotations

import pytest

from bot.engine.model import DecisionRequest
from bot.engine.outbox import MAX_RETRY_SECONDS, RETRY_AFTER_SECONDS
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


class FlakyRenderSurface(RecordingSurface):
    """A surface whose platform refuses the approval message the first time only."""

    def __init__(self) -> None:
        super().__init__()
        self.refusals = 1

    async def render_approvals(self, thread, approvals):
        if self.refusals:
            self.refusals -= 1
            raise RuntimeError("platform said no")
        return await super().render_approvals(thread, approvals)


@pytest.fixture
async def refused_once(harnesses, database_url):
    """A harness (on each backend) asked to delete a.txt, whose platform refuses its first approval card."""
    harness = await harnesses.open(
        replies=[asks_for("delete_file", path="a.txt"), says("Deleted.")], database_url=database_url
    )
    flaky = FlakyRenderSurface()
    harness.engine.register_surface("slack", flaky)
    await harness.say("delete a.txt")
    return harness, flaky


async def test_a_card_the_platform_refused_is_shown_by_the_sweep_and_its_buttons_work(refused_once):
    harness, flaky = refused_once
    assert flaky.renders == [] and any("could not show the buttons" in r.text for r in flaky.replies)
    owed = [m.key for m in await harness.engine.storage.outbox.undelivered()]
    assert [key.split(":", 1)[0] for key in owed] == ["card"], owed

    assert await harness.engine.lifecycle.deliveries.deliver_due() == 0, "not retried before its delay"
    harness.clock.advance(seconds=RETRY_AFTER_SECONDS + 1)
    assert await harness.engine.lifecycle.deliveries.deliver_due() == 1
    [card] = flaky.renders
    assert [v.tool_name for v in card.approvals] == ["delete_file"]
    assert await harness.engine.storage.outbox.undelivered() == []
    shown = await harness.engine.get_approval(card.approvals[0].approval_id)
    assert shown.message_ref, "where the card is was stored, so a decision updates it"

    await harness.engine.decide(DecisionRequest(shown.approval_id, REQUESTER, "confirm", place=shown.thread.place))
    await harness.engine.wait_idle()
    assert harness.tools.runs_of("delete_file") == [{"path": "a.txt"}]
    assert flaky.updates and [v.status for v in flaky.updates[-1].approvals] == ["approved"]
    harness.clock.advance(seconds=MAX_RETRY_SECONDS + 1)
    assert await harness.engine.lifecycle.deliveries.deliver_due() == 0
    assert len(flaky.renders) == 1, "shown once"


async def test_an_owed_card_whose_step_was_decided_meanwhile_is_settled_without_showing_it(refused_once):
    harness, flaky = refused_once
    [listed] = await harness.engine.pending_for("slack", REQUESTER)
    await harness.engine.decide(DecisionRequest(listed.approval_id, REQUESTER, "confirm", place=listed.thread.place))
    await harness.engine.wait_idle()
    harness.clock.advance(seconds=RETRY_AFTER_SECONDS + 1)
    assert await harness.engine.lifecycle.deliveries.deliver_due() == 1
    assert flaky.renders == [], "nothing waits any more: no card of a decided step"
    assert await harness.engine.storage.outbox.undelivered() == []


async def test_an_owed_card_whose_text_names_no_step_is_settled_without_showing_anything(harnesses, database_url):
    harness = await harnesses.open(database_url=database_url)
    thread = harness.inbound("hello").thread_ref
    await harness.engine.lifecycle.deliveries.owe(thread, "not a run and step", "card:damaged")
    harness.clock.advance(seconds=harness.engine.config.lease_seconds + 1)  # past this process's claim on it
    assert await harness.engine.lifecycle.deliveries.deliver_due() == 1
    assert harness.surface.renders == [] and harness.surface.replies == []
    assert await harness.engine.storage.outbox.undelivered() == []

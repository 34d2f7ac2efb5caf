"""An admin who is one only through a group listed in ``COUNTERSIGN_ADMINS`` may stop anyone's run, as an admin
listed by id may: in chat (the console's Ctrl-C, :meth:`Engine.request_stop`) and through the Stop control
(:meth:`Engine.stop_run`). Someone in no listed group still may not."""

from __future__ import annotations

import asyncio

import pytest

from bot.engine.errors import NotAllowedToStop
from bot.llm import OpenAIChatGenerator
from tests.fakes.engine_kit import ADMIN, OTHER, PLATFORM, REQUESTER, Harnesses, bounded
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.recording_surface import StreamingRecordingSurface
from tests.fakes.streaming_kit import BlockingBackup

ON_CALL = "U_ONCALL"
"""An admin only through the named group ``group:sre``."""


@pytest.fixture
async def llm():
    async with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
async def harnesses(tmp_path):
    opened = Harnesses(tmp_path)
    yield opened
    await opened.aclose()


async def working_run(harnesses, llm):
    """A run that is busy in a tool (``backup``), whose requester is not the on-call admin."""
    job = BlockingBackup()
    llm.enqueue_tool_calls([("backup", {"target": "orders"})], text="Backing up orders first.")
    llm.enqueue_text("Now I will also back up everything else.")
    generator = OpenAIChatGenerator(model="fake", api_key="test", api_base_url=llm.base_url, max_retries=0)
    h = await harnesses.open(
        generator=generator,
        stream_update_seconds=0.01,
        admins=frozenset({ADMIN, "group:sre"}),
        extra_tools=[job.tool],
    )
    h.surface = StreamingRecordingSurface()
    h.engine.register_surface(PLATFORM, h.surface)
    await h.engine.storage.approver_groups.set_group("sre", [ON_CALL], updated_by=ADMIN)
    working = asyncio.create_task(h.say("back up orders, then the rest"))
    await bounded(job.started.wait())
    run = await h.engine.storage.runs.active_for_thread(h.thread().key)
    return h, job, working, run


async def test_an_admin_through_a_group_stops_a_run_through_the_stop_control(harnesses, llm):
    h, job, working, run = await working_run(harnesses, llm)

    with pytest.raises(NotAllowedToStop):
        await h.engine.stop_run(run.run_id, OTHER)
    assert await h.engine.stop_run(run.run_id, ON_CALL) == "Stopping after the current step."
    job.release.set()
    await bounded(working)

    assert job.finished == ["orders"]
    stopped = await h.run_of(run.run_id)
    assert (stopped.status, stopped.requester) == ("stopped", REQUESTER)
    [entry] = await h.audit("stopped")
    assert entry.actor == ON_CALL


async def test_an_admin_through_a_group_stops_a_run_in_chat(harnesses, llm):
    h, job, working, run = await working_run(harnesses, llm)

    with pytest.raises(NotAllowedToStop):
        await h.engine.request_stop(h.thread(), OTHER)
    assert await h.engine.request_stop(h.thread(), ON_CALL) == "Stopping after the current step."
    job.release.set()
    await bounded(working)

    assert job.finished == ["orders"]
    assert (await h.run_of(run.run_id)).status == "stopped"
    [entry] = await h.audit("stopped")
    assert entry.actor == ON_CALL

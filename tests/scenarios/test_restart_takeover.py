"""A ``countersign serve`` process killed mid-run and restarted takes its own runs back at once.

With ``COUNTERSIGN_INSTANCE_ID`` unset, ``serve`` keeps its instance id across restarts (a file beside the
SQLite database, the host name with PostgreSQL: :mod:`bot.instance`), so the restarted process knows the runs
still owned under its id are its dead life's and recovers them before its first heartbeat, with the usual
fencing bump, instead of after the 30-second lease. Every setting here is the default (lease, heartbeat and
sweep): no other process and no sweep could recover the run within the 5 seconds the test allows.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.fakes.serve_processes import ServeCluster, tool_results

pytestmark = pytest.mark.asyncio(loop_scope="module")

DEFAULTS = {
    "COUNTERSIGN_INSTANCE_ID": "",  # unset: serve's stable default
    "COUNTERSIGN_LEASE_SECONDS": "30",
    "COUNTERSIGN_HEARTBEAT_SECONDS": "10",
    "COUNTERSIGN_SWEEP_SECONDS": "30",
}
TAKEN_BACK_WITHIN = 5.0
"""Seconds from the restarted process listening to the thread being answered (the lease alone is 30)."""


@pytest_asyncio.fixture(loop_scope="module", params=["sqlite", "postgres"])
async def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ServeCluster]:
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    async with ServeCluster.open(tmp_path, database_url=url) as running:
        yield running


async def test_an_approved_call_not_yet_started_runs_once_soon_after_its_process_restarts(
    cluster: ServeCluster,
) -> None:
    cluster.model.plan("delete restart.log", [("delete_file", {"path": "restart.log"})])
    first = await cluster.start("bot", failpoint="before_ledger", env=DEFAULTS)
    thread = await cluster.mention(first, "delete restart.log")
    card = await cluster.approval_card(thread)
    await cluster.click(first, card)
    await first.wait_failpoint(passed=lambda: cluster.replies_in(thread))

    restarted = await cluster.start("bot", env=DEFAULTS)
    listening = time.monotonic()
    await cluster.wait_for_reply(thread, "Finished: deleted restart.log", seconds=TAKEN_BACK_WITHIN)
    assert time.monotonic() - listening < TAKEN_BACK_WITHIN
    assert restarted.running
    assert cluster.control.count("delete_file", path="restart.log") == 1
    await cluster.assert_settled(thread)
    assert [e["status"] for e in cluster.ledger(thread)] == ["done"]


async def test_kill_9_while_a_tool_runs_then_a_restart_tells_the_thread_at_once_and_never_reruns_it(
    cluster: ServeCluster,
) -> None:
    cluster.model.plan("deploy restart-9", [("slow_deploy", {"name": "restart-9"})])
    first = await cluster.start("bot", env=DEFAULTS)
    thread = await cluster.mention(first, "deploy restart-9")
    card = await cluster.approval_card(thread)
    await cluster.click(first, card)
    await cluster.control.wait_blocked("restart-9")
    first.kill()
    assert await first.wait_exit() == -9

    await cluster.start("bot", env=DEFAULTS)
    listening = time.monotonic()
    await cluster.wait_for_reply(thread, "unknown", seconds=TAKEN_BACK_WITHIN)
    assert time.monotonic() - listening < TAKEN_BACK_WITHIN
    assert cluster.control.count("slow_deploy", name="restart-9") == 1, "an outcome unknown is never run twice"
    await cluster.assert_settled(thread)
    [result] = tool_results(cluster.history(thread))
    assert "unknown" in result.lower()

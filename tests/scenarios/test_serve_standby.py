"""The crash tests' standby victims act on nothing before their own test takes them.

``Standby`` (tests/fakes/serve_processes.py) starts a module's victims ahead of their tests. Each victim is
armed with some later test's failpoint, so a victim that recovered another test's run before its own test
took it could die at its failpoint inside that run, or stop holding its lease, and that other test would see
a ledger entry begun by a process it never used. Here a victim is started while another process's run is
recoverable, and nothing of that run may be touched until the victim is taken.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bot.failpoints import FAILPOINT_EXIT_CODE, STOP_POINTS
from tests.fakes.serve_processes import (
    PARKED_FAILPOINT,
    STEADY,
    ApprovalCard,
    ServeCluster,
    ServeProcess,
    Standby,
    Thread,
    tool_results,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_an_armed_stop_point_stops_the_process_until_it_is_continued_and_an_exit_point_still_exits() -> None:
    program = (
        "from bot import failpoints\n"
        "failpoints.arm('before_start,after_claim')\n"
        "failpoints.failpoint('before_start')\n"
        "print('continued', flush=True)\n"
        "failpoints.failpoint('after_claim')\n"
        "print('went past the exit point', flush=True)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", program], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # waitpid with WUNTRACED returns when the child stops (or ends): the stop itself, not a guess at its timing.
        pid, status = os.waitpid(child.pid, os.WUNTRACED)
        assert pid == child.pid and os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGSTOP, status
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == FAILPOINT_EXIT_CODE, err
    assert out == "continued\n"
    assert "failpoint before_start reached; stopped until continued" in err
    assert "failpoint after_claim reached; exiting" in err


async def test_a_standby_victim_takes_no_recoverable_run_before_its_test_takes_it(tmp_path: Path) -> None:
    assert PARKED_FAILPOINT in STOP_POINTS
    async with ServeCluster.open(tmp_path) as cluster:
        survivor = await cluster.start("survivor", env=STEADY)
        crashed = await cluster.start("crashed", failpoint="after_claim")
        thread, card = await _asked_to_delete(cluster, survivor, "standby.log")

        async with cluster.frozen(survivor):
            await cluster.click(crashed, card)
            await crashed.wait_failpoint(passed=lambda: cluster.replies_in(thread))
            # The approved run's owner is dead; once its lease expires any process that looks recovers it.
            [run] = cluster.runs(thread)
            assert run["owner"] == "crashed"
            await cluster.wait_until(
                lambda: cluster.runs(thread)[0]["lease_expires_at"] < time.time(), "the dead owner's lease expired"
            )
            # A victim armed at the first point the recovery reaches; started now, a process that looked would
            # take the run over in its start-up recovery and die at that point inside it.
            standby = Standby(cluster, ["after_ledger"])
            [victim] = await standby.parked()
            assert victim.stopped, victim.log_text()
            [run] = cluster.runs(thread)
            # Claimed and started by the decision, in one write.
            assert (run["owner"], run["status"]) == ("crashed", "running"), cluster.describe(thread)
            assert cluster.ledger(thread) == [], cluster.describe(thread)
            assert cluster.control.count("delete_file") == 0

        # The survivor alone recovers the run: the call runs once and the thread is answered.
        await cluster.wait_for_reply(thread, "Finished: deleted standby.log")
        assert cluster.control.count("delete_file", path="standby.log") == 1
        await cluster.assert_settled(thread)
        assert [e["status"] for e in cluster.ledger(thread)] == ["done"]
        assert tool_results(cluster.history(thread)) == ["deleted standby.log"]

        # Taken, the victim goes on from where it stopped: it starts and serves its own test.
        taken = await standby.take("after_ledger")
        assert taken is victim and not taken.stopped and taken.url.startswith("http://")
        own, own_card = await _asked_to_delete(cluster, survivor, "own.log")
        async with cluster.frozen(survivor):
            await cluster.click(taken, own_card)
            await taken.wait_failpoint(passed=lambda: cluster.replies_in(own))
        await cluster.wait_for_reply(own, "unknown")
        assert cluster.control.count("delete_file", path="own.log") == 0


async def _asked_to_delete(cluster: ServeCluster, survivor: ServeProcess, path: str) -> tuple[Thread, ApprovalCard]:
    """A new thread asking ``survivor`` to delete ``path``, and the approval card it got."""
    cluster.model.plan(f"delete {path}", [("delete_file", {"path": path})])
    thread = await cluster.mention(survivor, f"delete {path}")
    return thread, await cluster.approval_card(thread)

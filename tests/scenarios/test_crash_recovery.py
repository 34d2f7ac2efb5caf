"""A process dies at every failpoint; the other process finishes its work: once, and never in silence.

Real ``countersign serve`` processes share one SQLite file (``tests/fakes/serve_processes.py``). The
*victim* is armed with one failpoint (``COUNTERSIGN_FAILPOINT``) and exits there with status 86, exactly
as ``kill -9`` would; the *survivor*, started once for this module, must then carry the interrupted
request to an end the person sees in the thread. For every point we count what a person would notice:
executions (exactly one for an approved call, none for a rejected one, at most one with an "outcome
unknown" notice when the crash came after the ledger entry), silent drops (none: every interrupted
request ends in a message in the thread) and notices delivered (all of them).

The person's message goes to the survivor and the click to the victim when the failpoint lies on the
way from a decision to the answer; it goes to the victim when the failpoint lies between a message and
its pause. Every process sweeps for decided steps and waiting messages, so the survivor is frozen
(SIGSTOP) while the victim works and thawed once it died: the victim alone reaches the failpoint, and
the survivor can only recover what the durable state says.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.fakes.serve_processes import (
    ADMIN,
    STEADY,
    HarnessError,
    ServeCluster,
    ServeProcess,
    Standby,
    tool_results,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ServeCluster]:
    """One database, the fakes and the survivor for the whole module; each test uses its own thread."""
    root: Path = tmp_path_factory.mktemp("crash-recovery")
    async with ServeCluster.open(root) as running:
        yield running


@pytest_asyncio.fixture(loop_scope="module")
async def survivor(cluster: ServeCluster) -> ServeProcess:
    """The process that stays up (restarted if an earlier test's bug took it down).

    Its lease is long: the victims sweep too, and must not take over the survivor's run (while it asks the
    model for the approval card) when the survivor stalls on a loaded box; the victims' leases stay short.
    """
    alive = [p for p in cluster.processes if p.name.startswith("survivor") and p.running]
    if alive:
        return alive[0]
    return await cluster.start(f"survivor{len(cluster.processes)}", env=STEADY)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def standby(cluster: ServeCluster, request: pytest.FixtureRequest) -> AsyncIterator[Standby]:
    """One victim per selected test of this module, started ahead and frozen until its test takes it."""
    mine = [item for item in request.session.items if item.module is request.module]
    pool = Standby(cluster, [_failpoint_of(item) for item in mine])
    yield pool
    await pool.close()


def _failpoint_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("failpoint") if callspec is not None else None


@pytest_asyncio.fixture(loop_scope="module")
async def victim(standby: Standby, request: pytest.FixtureRequest) -> AsyncIterator[ServeProcess]:
    """This test's victim: armed with the test's ``failpoint`` parameter (none for a plain kill -9).

    Killed after the test if it is still up, so it can never reach its failpoint in a later test's recovery.
    """
    proc = await standby.take(_failpoint_of(request.node))
    yield proc
    proc.kill()
    await proc.wait_exit()


# ---------------------------------------------------------------------- approved, then the crash


@pytest.mark.parametrize("failpoint", ["after_decide", "after_claim", "before_ledger", "before_llm", "before_reply"])
async def test_an_approved_call_runs_exactly_once_and_is_answered_when_its_process_dies(
    cluster: ServeCluster, survivor: ServeProcess, victim: ServeProcess, failpoint: str
) -> None:
    path = f"{failpoint}.log"
    cluster.model.plan(f"delete {path}", [("delete_file", {"path": path})])
    thread = await cluster.mention(survivor, f"delete {path}")
    card = await cluster.approval_card(thread)

    async with cluster.frozen(survivor):
        await cluster.click(victim, card)
        await victim.wait_failpoint(passed=lambda: cluster.replies_in(thread))

    await cluster.wait_for_reply(thread, f"Finished: deleted {path}")
    assert cluster.control.count("delete_file", path=path) == 1
    await cluster.assert_settled(thread)
    assert [e["status"] for e in cluster.ledger(thread)] == ["done"]
    assert tool_results(cluster.history(thread)) == [f"deleted {path}"]


@pytest.mark.parametrize("failpoint", ["after_decide", "after_claim"])
async def test_a_rejected_call_never_runs_and_the_rejection_is_answered_when_its_process_dies(
    cluster: ServeCluster, survivor: ServeProcess, victim: ServeProcess, failpoint: str
) -> None:
    path = f"keep-{failpoint}.log"
    cluster.model.plan(f"delete {path}", [("delete_file", {"path": path})])
    thread = await cluster.mention(survivor, f"delete {path}")
    card = await cluster.approval_card(thread)

    async with cluster.frozen(survivor):
        await cluster.reject(victim, card, "not this one")
        await victim.wait_failpoint(passed=lambda: cluster.replies_in(thread))

    [answer] = [r for r in await cluster.wait_for_reply(thread, "rejected") if "rejected" in r.lower()]
    assert "not this one" in answer
    assert cluster.control.count("delete_file", path=path) == 0
    await cluster.assert_settled(thread)
    assert cluster.ledger(thread) == []


# ---------------------------------------------------------------------- the crash while the tool may have run


@pytest.mark.parametrize(("failpoint", "executed"), [("after_ledger", 0), ("after_tool", 1)])
async def test_a_call_whose_ledger_says_executing_is_never_rerun_and_the_person_is_told_its_outcome_is_unknown(
    cluster: ServeCluster, survivor: ServeProcess, victim: ServeProcess, failpoint: str, executed: int
) -> None:
    path = f"unknown-{failpoint}.log"
    cluster.model.plan(f"delete {path}", [("delete_file", {"path": path})])
    thread = await cluster.mention(survivor, f"delete {path}")
    card = await cluster.approval_card(thread)

    async with cluster.frozen(survivor):
        await cluster.click(victim, card)
        await victim.wait_failpoint(passed=lambda: cluster.replies_in(thread))

    await cluster.wait_for_reply(thread, "unknown")
    assert cluster.control.count("delete_file", path=path) == executed  # the crash point decides; never a re-run
    await cluster.assert_settled(thread)
    [result] = tool_results(cluster.history(thread))
    assert "unknown" in result.lower()
    assert [e["status"] for e in cluster.ledger(thread)] != ["executing"]

    # A second click on the old card is told what happened, not just "already approved"; nothing runs.
    await cluster.click(survivor, card, user=ADMIN)
    [told] = await cluster.wait_until(lambda: cluster.ephemerals_to(ADMIN, thread), "the late clicker told")
    assert "unknown" in told
    assert cluster.control.count("delete_file", path=path) == executed


async def test_kill_9_while_an_approved_slow_tool_runs_is_reported_as_unknown_and_never_rerun(
    cluster: ServeCluster, survivor: ServeProcess, victim: ServeProcess
) -> None:
    cluster.model.plan("deploy crash-9", [("slow_deploy", {"name": "crash-9"})])
    thread = await cluster.mention(survivor, "deploy crash-9")
    card = await cluster.approval_card(thread)

    async with cluster.frozen(survivor):
        await cluster.click(victim, card)
        await cluster.control.wait_blocked("crash-9")
        [running] = cluster.control.of("slow_deploy", name="crash-9")
        assert running.pid == victim.pid
        victim.kill()
        assert await victim.wait_exit() == -9

    await cluster.wait_for_reply(thread, "unknown")
    assert cluster.control.count("slow_deploy", name="crash-9") == 1
    await cluster.assert_settled(thread)
    [result] = tool_results(cluster.history(thread))
    assert "unknown" in result.lower()


# ------------------------------------------------------------- the crash between the preview re-check and the run


@pytest.mark.parametrize("changed", [False, True], ids=["same_world", "world_changed"])
@pytest.mark.parametrize("failpoint", ["after_preview_recheck"])
async def test_a_call_whose_process_died_after_its_preview_re_check_never_runs_without_a_matching_preview(
    cluster: ServeCluster, survivor: ServeProcess, victim: ServeProcess, failpoint: str, changed: bool
) -> None:
    """Issue 30: the victim computed the approved call's preview again and died before comparing and running it. The
    survivor's recovery computes it once more: the same plan runs once, given exactly the approved preview; a plan
    changed meanwhile never runs, and the model is told why."""
    name = f"plan-{'changed' if changed else 'same'}"
    cluster.control.world[name] = f"3 pods of {name} will restart"
    cluster.model.plan(f"apply {name}", [("apply_plan", {"name": name})])
    thread = await cluster.mention(survivor, f"apply {name}")
    card = await cluster.approval_card(thread)

    async with cluster.frozen(survivor):
        await cluster.click(victim, card)
        await victim.wait_failpoint(passed=lambda: cluster.replies_in(thread))
        if changed:
            cluster.control.world[name] = f"7 pods of {name} will restart"

    await cluster.wait_for_reply(thread, "Finished")
    await cluster.assert_settled(thread)
    if changed:
        assert cluster.control.count("apply_plan", name=name) == 0
        [result] = tool_results(cluster.history(thread))
        assert "preview no longer matches" in result
        assert cluster.ledger(thread) == []
    else:
        [ran] = cluster.control.of("apply_plan", name=name)
        assert ran.arguments["approved_preview"] == f"3 pods of {name} will restart"
        assert ran.pid != victim.pid
        assert tool_results(cluster.history(thread)) == [f"applied {name}"]
        assert [e["status"] for e in cluster.ledger(thread)] == ["done"]


# ---------------------------------------------------------------------- the crash between a message and its pause


@pytest.mark.parametrize("failpoint", ["before_llm", "while_pausing", "after_pause"])
async def test_a_message_whose_process_dies_before_pausing_is_retried_or_answered_never_dropped(
    cluster: ServeCluster, survivor: ServeProcess, victim: ServeProcess, failpoint: str
) -> None:
    path = f"pausing-{failpoint}.log"
    cluster.model.plan(f"delete {path}", [("delete_file", {"path": path})])

    async with cluster.frozen(survivor):
        # The message is stored before Slack's ack: the victim may reach its failpoint before answering.
        thread = await cluster.mention(victim, f"delete {path}", may_die_after_storing=True)
        # A card from the victim means it went past ``before_llm``; ``while_pausing`` may lie on either side.
        await victim.wait_failpoint(
            passed=lambda: cluster.posts_in(thread) if failpoint == "before_llm" else cluster.replies_in(thread)
        )

    # Retried from the stored history (it pauses again: a new approval card), or, where that is impossible,
    # the person is told. Either way the thread comes to rest with a message in it.
    def at_rest() -> bool:
        runs = cluster.runs(thread)
        if not runs or any(r["status"] in ("running", "resuming") for r in runs):
            return False
        paused = any(r["status"] == "paused" for r in runs)
        return not paused or any(call.args.get("blocks") for call in cluster.posts_in(thread))

    await cluster.wait_until(at_rest, "the interrupted thread at rest with a message in it")
    if any(r["status"] == "paused" for r in cluster.runs(thread)):
        cards = [call for call in cluster.posts_in(thread) if call.args.get("blocks")]
        card = await cluster.approval_card(thread, count=len(cards))
        await cluster.click(survivor, card)
        try:
            await cluster.wait_for_reply(thread, f"Finished: deleted {path}")
        except HarnessError as unanswered:
            raise HarnessError(f"{unanswered}\n{cluster.describe(thread)}") from None
        assert cluster.control.count("delete_file", path=path) == 1
    else:
        assert cluster.replies_in(thread), "the person was never answered"
        assert cluster.control.count("delete_file", path=path) == 0
    await cluster.assert_settled(thread)

"""Two ``countersign serve`` processes on one database: any of them may get any message or click.

Real processes, one SQLite file, the fake Slack and OpenAI servers (``tests/fakes/serve_processes.py``).
What a person would notice is what is asserted: how often a tool ran, what the bot posted in the
thread and to whom, and the stored history the model sees next (never two runs interleaved in it).
The pair of processes is shared by the tests that leave both standing; the others start their own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.fakes.serve_processes import (
    ADMIN,
    ALICE,
    LEASE_SECONDS,
    STEADY,
    SWEEP_SECONDS,
    ServeCluster,
    ServeProcess,
    Thread,
    dangling_calls,
    duplicate_results,
    openai_conversation_problems,
    roles,
    tool_results,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

LONG_LEASE_SECONDS = 30.0
"""A lease far longer than any deadline here: work continued before it could expire was handed over."""
SHORT_GRACE_SECONDS = 0.5


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ServeCluster]:
    """Processes ``a`` and ``b`` for the tests that leave both running; each test uses its own thread.

    Neither is expected to lose a run, so neither may take the other's over when it stalls on a loaded box.
    """
    async with ServeCluster.open(tmp_path_factory.mktemp("replicas")) as running:
        await running.start_many("a", "b", env=STEADY)
        yield running


@pytest_asyncio.fixture(loop_scope="module")
async def pair(shared: ServeCluster) -> tuple[ServeProcess, ServeProcess]:
    """The shared processes, checked to be still up."""
    a, b = shared.processes[:2]
    assert a.running and b.running, f"an earlier test took a process down\n{shared.logs()}"
    return a, b


@pytest_asyncio.fixture(loop_scope="module")
async def cluster(tmp_path: Path) -> AsyncIterator[ServeCluster]:
    """A cluster of this test's own (for tests that start, stop or kill processes)."""
    async with ServeCluster.open(tmp_path) as running:
        yield running


def nothing_unknown(cluster: ServeCluster, thread: Thread) -> None:
    """No "outcome unknown" anywhere: not told to the person, not stored for the model."""
    assert not any("unknown" in text.lower() for text in cluster.replies_in(thread)), cluster.replies_in(thread)
    assert not any("unknown" in result.lower() for result in tool_results(cluster.history(thread)))


# ---------------------------------------------------------------------- decisions across processes


async def test_clicks_for_one_approval_split_between_processes_run_it_once_and_tell_both_clickers(
    shared: ServeCluster, pair: tuple[ServeProcess, ServeProcess]
) -> None:
    a, b = pair
    shared.model.plan("delete split.log", [("delete_file", {"path": "split.log"})])
    thread = await shared.mention(a, "delete split.log")
    card = await shared.approval_card(thread)

    await asyncio.gather(shared.click(a, card, user=ALICE), shared.click(b, card, user=ADMIN))

    await shared.wait_for_reply(thread, "Finished: deleted split.log")
    assert shared.control.count("delete_file", path="split.log") == 1
    approved = await shared.wait_until(
        lambda: [text for text in shared.card_updates(card) if "Approved by" in text], "the card shows who approved"
    )
    winner = ALICE if f"Approved by <@{ALICE}>" in approved[-1] else ADMIN
    loser = ADMIN if winner == ALICE else ALICE
    [told] = await shared.wait_until(lambda: shared.ephemerals_to(loser, thread), "the later clicker is told")
    assert "already approved" in told
    assert shared.ephemerals_to(winner, thread) == []
    await shared.assert_settled(thread)


async def test_a_message_on_one_process_and_its_click_on_the_other_run_the_call_once(
    shared: ServeCluster, pair: tuple[ServeProcess, ServeProcess]
) -> None:
    a, b = pair
    shared.model.plan("delete across.log", [("delete_file", {"path": "across.log"})])
    thread = await shared.mention(a, "delete across.log")
    card = await shared.approval_card(thread)

    reply = await shared.click(b, card)

    assert reply is not None and reply.status == 200
    [answer] = [r for r in await shared.wait_for_reply(thread, "Finished") if r.startswith("Finished")]
    assert answer == "Finished: deleted across.log"
    assert shared.control.count("delete_file", path="across.log") == 1
    assert any(f"Approved by <@{ALICE}>" in text for text in shared.card_updates(card))
    await shared.assert_settled(thread)
    assert tool_results(shared.history(thread)) == ["deleted across.log"]


# ---------------------------------------------------------------------- one thread, messages on both processes


async def test_two_messages_to_one_thread_on_both_processes_at_once_run_one_after_the_other_never_interleaved(
    shared: ServeCluster, pair: tuple[ServeProcess, ServeProcess]
) -> None:
    a, b = pair
    thread = await shared.mention(a, "hello from the both test")
    await shared.wait_for_reply(thread, "You said: hello from the both test")
    for name in ("both-1", "both-2"):
        shared.model.plan(f"run job {name}", [("slow_job", {"name": name})])

    await asyncio.gather(
        shared.mention(a, "run job both-1", thread=thread), shared.mention(b, "run job both-2", thread=thread)
    )

    # Whichever message won the thread runs its slow job; the other waits its turn and starts nothing.
    first = (await shared.wait_until(lambda: _jobs(shared, "both-"), "one of the two jobs started"))[0]
    second = "both-2" if first == "both-1" else "both-1"
    await shared.observe_for(3 * SWEEP_SECONDS, lambda: _assert_jobs(shared, "both-", [first]))
    shared.control.release(first)
    await shared.control.wait_for("slow_job", name=second)
    shared.control.release(second)

    await shared.wait_for_reply(thread, "Finished: job", count=2)
    await shared.assert_settled(thread)
    history = shared.history(thread)
    assert roles(history) == ["user", "assistant"] + ["user", "assistant", "tool", "assistant"] * 2
    assert [m["text"] for m in history if m["role"] == "user"][1:] == [f"run job {first}", f"run job {second}"]
    assert tool_results(history) == [f"job {first} finished", f"job {second} finished"]
    assert _jobs(shared, "both-") == [first, second]


async def test_messages_queued_behind_a_running_one_are_answered_in_the_order_they_arrived(
    shared: ServeCluster, pair: tuple[ServeProcess, ServeProcess]
) -> None:
    a, b = pair
    shared.model.plan("run job order-1", [("slow_job", {"name": "order-1"})])
    thread = await shared.mention(a, "run job order-1")
    await shared.control.wait_blocked("order-1")

    # Slack acknowledges before the message is stored, so each is sent once the one before it waits in the inbox.
    await shared.mention(b, "second in line", thread=thread)
    await shared.wait_until(lambda: shared.queued(thread) == ["second in line"], "the second message queued")
    await shared.mention(a, "third in line", thread=thread)
    await shared.wait_until(lambda: len(shared.queued(thread)) == 2, "the third message queued")
    assert shared.queued(thread) == ["second in line", "third in line"]
    shared.control.release("order-1")

    await shared.wait_for_reply(thread, "You said: third in line")
    await shared.assert_settled(thread)
    assert shared.replies_in(thread) == [
        "Finished: job order-1 finished",
        "You said: second in line",
        "You said: third in line",
    ]
    history = shared.history(thread)
    assert [m["text"] for m in history if m["role"] == "user"] == ["run job order-1", "second in line", "third in line"]
    assert roles(history) == ["user", "assistant", "tool", "assistant", "user", "assistant", "user", "assistant"]


# ---------------------------------------------------------------------- a process arriving, a process leaving


async def test_a_process_starting_while_another_runs_a_slow_tool_leaves_that_run_alone(cluster: ServeCluster) -> None:
    a = await cluster.start("a")
    cluster.model.plan("run job nightly", [("slow_job", {"name": "nightly"})])
    thread = await cluster.mention(a, "run job nightly")
    await cluster.control.wait_blocked("nightly")

    await cluster.start("b")

    def untouched() -> None:
        assert cluster.control.count("slow_job", name="nightly") == 1
        assert cluster.replies_in(thread) == []
        assert [e["status"] for e in cluster.ledger(thread)] == ["executing"]

    # B's start-up and its sweeps over two lease periods: a live, heartbeating run is never taken over.
    await cluster.observe_for(2 * LEASE_SECONDS, untouched)
    cluster.control.release("nightly")

    await cluster.wait_for_reply(thread, "Finished: job nightly finished")
    await cluster.assert_settled(thread)
    assert cluster.replies_in(thread) == ["Finished: job nightly finished"]
    assert tool_results(cluster.history(thread)) == ["job nightly finished"]
    assert cluster.control.count("slow_job", name="nightly") == 1
    nothing_unknown(cluster, thread)


async def test_sigterm_lets_a_running_tool_finish_within_the_grace_period(cluster: ServeCluster) -> None:
    a, _b = await cluster.start_many("a", "b", env=STEADY)  # a finishes its own run: nothing is taken over
    cluster.model.plan("run job graceful", [("slow_job", {"name": "graceful"})])
    thread = await cluster.mention(a, "run job graceful")
    await cluster.control.wait_blocked("graceful")

    a.terminate()
    await cluster.wait_until(lambda: any("stopping" in line for line in a.log), "a is shutting down")
    cluster.control.release("graceful")

    await cluster.wait_for_reply(thread, "Finished: job graceful finished")
    assert await a.wait_exit() == 0
    await cluster.assert_settled(thread)
    assert cluster.control.count("slow_job", name="graceful") == 1
    assert tool_results(cluster.history(thread)) == ["job graceful finished"]
    nothing_unknown(cluster, thread)


async def test_sigterm_past_the_grace_period_hands_the_run_to_the_other_process_at_once(cluster: ServeCluster) -> None:
    settings = {
        "COUNTERSIGN_LEASE_SECONDS": str(LONG_LEASE_SECONDS),
        "COUNTERSIGN_SHUTDOWN_GRACE_SECONDS": str(SHORT_GRACE_SECONDS),
    }
    a, _b = await cluster.start_many("a", "b", env=settings)
    cluster.model.hold()  # the model is still thinking when a is told to stop
    thread = await cluster.mention(a, "summarise the incident")
    await cluster.model.wait_for_requests(1)

    a.terminate()
    assert await a.wait_exit(SHORT_GRACE_SECONDS + 5.0) == 0, "the grace period was not respected"
    stopped = time.monotonic()
    cluster.model.let_go()

    await cluster.wait_for_reply(thread, "You said: summarise the incident")
    assert time.monotonic() - stopped < LONG_LEASE_SECONDS / 3, "continued only after the lease expired"
    await cluster.assert_settled(thread)
    assert roles(cluster.history(thread)) == ["user", "assistant"]


async def test_kill_9_during_a_tool_then_a_fresh_start_tells_the_thread_the_outcome_is_unknown(
    cluster: ServeCluster,
) -> None:
    a = await cluster.start("a")
    cluster.model.plan("deploy v2", [("slow_deploy", {"name": "v2"})])
    thread = await cluster.mention(a, "deploy v2")
    card = await cluster.approval_card(thread)
    await cluster.click(a, card)
    await cluster.control.wait_blocked("v2")

    a.kill()
    assert await a.wait_exit() == -9
    await cluster.start("b")  # the only process now: its recovery must reach Slack

    await cluster.wait_for_reply(thread, "unknown")
    await cluster.assert_settled(thread)
    assert cluster.control.count("slow_deploy", name="v2") == 1
    [result] = tool_results(cluster.history(thread))
    assert "unknown" in result.lower()


async def test_a_message_slack_saw_acknowledged_is_answered_even_if_its_process_dies_right_after(
    cluster: ServeCluster,
) -> None:
    a, b = await cluster.start_many("a", "b")

    # Nothing can be stored while the test holds the write lock. Acknowledging now would promise Slack a message
    # b cannot keep if it dies: Slack never sends an acknowledged event again. Storing first leaves the event
    # unacknowledged, and Slack delivers it again (here: to a) once b is gone.
    with cluster.write_lock_held():
        sending = asyncio.create_task(cluster.mention([b, a], "are you still there"))
        await asyncio.wait({sending}, timeout=1.0)  # an acknowledgement, if b gives one without storing
        b.kill()
        assert await b.wait_exit() == -9
    thread = await sending

    await cluster.wait_for_reply(thread, "You said: are you still there")
    await cluster.assert_settled(thread)


async def test_an_owner_stalled_past_its_lease_adds_no_second_result_when_it_wakes(cluster: ServeCluster) -> None:
    a, b = await cluster.start_many("a", "b")
    cluster.model.plan("run job stall", [("slow_job", {"name": "stall"})])
    # b waits until a's tool runs: a stall of a's on a loaded box before then would hand b the whole run early.
    async with cluster.frozen(b):
        thread = await cluster.mention(a, "run job stall")
        await cluster.control.wait_blocked("stall")

    # a stalls (a long GC pause, a frozen VM) past its lease: b cannot tell that from a crash and takes over.
    async with cluster.frozen(a):
        await cluster.wait_for_reply(thread, "unknown")
        await cluster.wait_until(lambda: not cluster.unsettled_runs(thread), "b closed the run")
        cluster.control.release("stall")  # the tool finished during the stall: its answer waits in a's socket
    # a wakes up. Only a check made in the same write as its result (is the run still mine?) keeps it out of
    # the history: its overdue heartbeat runs in the same instant as the tool's return.
    a.terminate()  # whatever a still does with its run, it does within its grace period
    assert await a.wait_exit() == 0

    history = cluster.history(thread)
    assert duplicate_results(history) == [], cluster.describe(thread)
    assert dangling_calls(history) == []
    # The thread stays usable: the next message reaches the model as a conversation OpenAI accepts.
    await cluster.mention(b, "is the job done", thread=thread)
    await cluster.wait_for_reply(thread, "You said: is the job done")
    assert openai_conversation_problems(cluster.model.requests[-1]["messages"]) == []
    assert cluster.control.count("slow_job", name="stall") == 1


def _jobs(cluster: ServeCluster, prefix: str) -> list[str]:
    """Names of the slow jobs started so far whose name starts with ``prefix``, in order."""
    return [e.arguments["name"] for e in cluster.control.of("slow_job") if e.arguments["name"].startswith(prefix)]


def _assert_jobs(cluster: ServeCluster, prefix: str, expected: list[str]) -> None:
    assert _jobs(cluster, prefix) == expected

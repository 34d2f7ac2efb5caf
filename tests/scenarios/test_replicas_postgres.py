"""Three ``countersign serve`` replicas on one PostgreSQL schema: any of them may get any message or click.

The same harness as ``tests/scenarios/test_replicas.py`` (real processes, the fake Slack and OpenAI servers), with
the processes sharing a schema of the test server instead of a SQLite file, as replicas on several hosts
behind a load balancer share one database. The restart tests use a PostgreSQL server of their own
(``tests/fakes/private_postgres.py``) and restart it under the running replicas; the replicas are never
restarted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.fakes.private_postgres import PrivatePostgres
from tests.fakes.serve_processes import ADMIN, ALICE, STEADY, ServeCluster, ServeProcess, roles, tool_results

pytestmark = pytest.mark.asyncio(loop_scope="module")

BOB = "U0BOB"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory, postgres_schemas) -> AsyncIterator[ServeCluster]:
    """Replicas ``a``, ``b`` and ``c`` on one schema, for the tests that leave them running; one thread each.

    None is expected to lose a run, so none may take another's over when it stalls on a loaded box.
    """
    url = postgres_schemas.take()
    try:
        async with ServeCluster.open(tmp_path_factory.mktemp("pg-replicas"), database_url=url) as running:
            await running.start_many("a", "b", "c", env=STEADY)
            yield running
    finally:
        postgres_schemas.release(url)


@pytest_asyncio.fixture(loop_scope="module")
async def trio(shared: ServeCluster) -> tuple[ServeProcess, ...]:
    """The shared replicas, checked to be still up."""
    assert all(p.running for p in shared.processes), f"an earlier test took a replica down\n{shared.logs()}"
    return tuple(shared.processes)


NO_SWEEP = {"COUNTERSIGN_SWEEP_SECONDS": "3600", "COUNTERSIGN_LEASE_SECONDS": "30"}
"""No sweep within a test, leases longer than one: only a wake-up (``NOTIFY``) can hand work over."""


@pytest_asyncio.fixture(loop_scope="module")
async def cluster(tmp_path: Path, postgres_url: str) -> AsyncIterator[ServeCluster]:
    """Replicas of this test's own (for tests that stop one), on a schema of the test server."""
    async with ServeCluster.open(tmp_path, database_url=postgres_url) as running:
        yield running


@pytest_asyncio.fixture(loop_scope="module")
async def restartable(tmp_path: Path, server: PrivatePostgres) -> AsyncIterator[ServeCluster]:
    """Replicas of this test's own on a fresh database of the private server (which the test restarts)."""
    async with ServeCluster.open(tmp_path, database_url=server.fresh_database_url()) as running:
        yield running


async def test_clicks_for_one_approval_on_three_replicas_at_once_run_it_once(
    shared: ServeCluster, trio: tuple[ServeProcess, ...]
) -> None:
    a, b, c = trio
    shared.model.plan("delete split.log", [("delete_file", {"path": "split.log"})])
    thread = await shared.mention(a, "delete split.log")
    card = await shared.approval_card(thread)

    await asyncio.gather(
        shared.click(a, card, user=ALICE), shared.click(b, card, user=ADMIN), shared.click(c, card, user=ALICE)
    )

    await shared.wait_for_reply(thread, "Finished: deleted split.log")
    assert shared.control.count("delete_file", path="split.log") == 1
    await shared.wait_until(
        lambda: any("Approved by" in text for text in shared.card_updates(card)), "the card shows who approved"
    )
    told = await shared.wait_until(
        lambda: shared.ephemerals_to(ALICE, thread) + shared.ephemerals_to(ADMIN, thread), "the later clickers told"
    )
    assert all("already approved" in text for text in told), told
    await shared.assert_settled(thread)
    assert tool_results(shared.history(thread)) == ["deleted split.log"]


async def test_a_message_on_one_replica_and_its_click_on_another_run_the_call_once(
    shared: ServeCluster, trio: tuple[ServeProcess, ...]
) -> None:
    a, b, _c = trio
    shared.model.plan("delete across.log", [("delete_file", {"path": "across.log"})])
    thread = await shared.mention(a, "delete across.log")
    card = await shared.approval_card(thread)

    reply = await shared.click(b, card)

    assert reply is not None and reply.status == 200
    await shared.wait_for_reply(thread, "Finished: deleted across.log")
    assert shared.control.count("delete_file", path="across.log") == 1
    assert any(f"Approved by <@{ALICE}>" in text for text in shared.card_updates(card))
    await shared.assert_settled(thread)
    assert tool_results(shared.history(thread)) == ["deleted across.log"]


async def test_messages_to_one_thread_on_three_replicas_are_answered_in_the_order_they_arrived(
    shared: ServeCluster, trio: tuple[ServeProcess, ...]
) -> None:
    a, b, c = trio
    shared.model.plan("run job order-1", [("slow_job", {"name": "order-1"})])
    thread = await shared.mention(a, "run job order-1")
    await shared.control.wait_blocked("order-1")

    # Slack acknowledges once a message is stored, so each is sent once the one before it waits in the inbox.
    await shared.mention(b, "second in line", thread=thread)
    await shared.wait_until(lambda: shared.queued(thread) == ["second in line"], "the second message queued")
    await shared.mention(c, "third in line", thread=thread, user=BOB)
    await shared.wait_until(lambda: len(shared.queued(thread)) == 2, "the third message queued")
    await shared.mention(b, "fourth in line", thread=thread)
    await shared.wait_until(lambda: len(shared.queued(thread)) == 3, "the fourth message queued")
    shared.control.release("order-1")

    await shared.wait_for_reply(thread, "You said: fourth in line")
    await shared.assert_settled(thread)
    assert shared.replies_in(thread) == [
        "Finished: job order-1 finished",
        "You said: second in line",
        "You said: third in line",
        "You said: fourth in line",
    ]
    history = shared.history(thread)
    assert [m["text"] for m in history if m["role"] == "user"] == [
        "run job order-1",
        "second in line",
        "third in line",
        "fourth in line",
    ]


async def test_the_database_restarted_while_the_replicas_are_idle_is_used_again_at_once(
    restartable: ServeCluster, server: PrivatePostgres
) -> None:
    a, b = await restartable.start_many("a", "b")
    before = await restartable.mention(a, "before the restart")
    await restartable.wait_for_reply(before, "You said: before the restart")

    server.restart()

    restartable.model.plan("delete after.log", [("delete_file", {"path": "after.log"})])
    thread = await restartable.mention(b, "delete after.log")
    card = await restartable.approval_card(thread)
    reply = await restartable.click(a, card)
    assert reply is not None and reply.status == 200
    await restartable.wait_for_reply(thread, "Finished: deleted after.log")
    assert restartable.control.count("delete_file", path="after.log") == 1
    await restartable.assert_settled(thread)
    assert a.running and b.running


async def test_the_database_restarted_while_a_tool_runs_loses_nothing_and_half_writes_nothing(
    restartable: ServeCluster, server: PrivatePostgres
) -> None:
    # Leases far longer than the server's restart: the owner keeps its run across it (a takeover in the middle
    # would be correct too, but would not test that the owner's own writes survive).
    a, b = await restartable.start_many("a", "b", env=STEADY)
    restartable.model.plan("run job busy", [("slow_job", {"name": "busy"})])
    thread = await restartable.mention(a, "run job busy")
    await restartable.control.wait_blocked("busy")

    server.restart()
    # A message to the same thread right after the restart, on the other replica: it waits its turn.
    await restartable.mention(b, "and after that?", thread=thread)
    await restartable.wait_until(lambda: restartable.queued(thread) == ["and after that?"], "the message queued")
    restartable.control.release("busy")

    await restartable.wait_for_reply(thread, "You said: and after that?")
    await restartable.assert_settled(thread)
    assert restartable.control.count("slow_job", name="busy") == 1
    assert restartable.replies_in(thread) == ["Finished: job busy finished", "You said: and after that?"]
    assert tool_results(restartable.history(thread)) == ["job busy finished"]
    assert [e["status"] for e in restartable.ledger(thread)] == ["done"]
    assert a.running and b.running


# ---------------------------------------------------------------------- wake-ups: no sweep runs in these tests


async def test_a_replica_stopped_past_its_grace_period_wakes_another_that_continues_its_run_at_once(
    cluster: ServeCluster,
) -> None:
    a, _b = await cluster.start_many("a", "b", env={**NO_SWEEP, "COUNTERSIGN_SHUTDOWN_GRACE_SECONDS": "0.5"})
    cluster.model.hold()  # the model is still thinking when a is told to stop
    thread = await cluster.mention(a, "summarise the incident")
    await cluster.model.wait_for_requests(1)

    a.terminate()
    assert await a.wait_exit() == 0
    stopped = time.monotonic()
    cluster.model.let_go()

    await cluster.wait_for_reply(thread, "You said: summarise the incident")
    assert time.monotonic() - stopped < 10, "continued only after a sweep"
    await cluster.assert_settled(thread)
    assert roles(cluster.history(thread)) == ["user", "assistant"]


async def test_a_message_left_waiting_by_a_replica_that_stops_after_its_run_is_started_by_another_at_once(
    cluster: ServeCluster,
) -> None:
    a, b = await cluster.start_many("a", "b", env=NO_SWEEP)
    cluster.model.plan("run job last", [("slow_job", {"name": "last"})])
    thread = await cluster.mention(a, "run job last")
    await cluster.control.wait_blocked("last")
    await cluster.mention(b, "and then?", thread=thread)
    await cluster.wait_until(lambda: cluster.queued(thread) == ["and then?"], "the message queued behind a's run")

    a.terminate()
    await cluster.wait_until(lambda: any("stopping" in line for line in a.log), "a is shutting down")
    cluster.control.release("last")  # a finishes its run within the grace period and starts nothing new

    await cluster.wait_for_reply(thread, "You said: and then?")
    assert await a.wait_exit() == 0
    await cluster.assert_settled(thread)
    assert cluster.replies_in(thread) == ["Finished: job last finished", "You said: and then?"]
    assert b.running

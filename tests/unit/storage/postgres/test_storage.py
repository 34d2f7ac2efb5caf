"""The PostgreSQL backend itself: its migrations, the schema it works in, its connections, the factory."""

from __future__ import annotations

import asyncio
import json
import random

import psycopg
import pytest

from bot.messages import ChatMessage
from storage import ActiveRunExists, AsyncStorage, StorageError, UnknownSchemaVersion, open_async_storage
from storage.approval_rows import CLOSED_RUN_APPROVALS_REASON
from storage.postgres import LATEST_VERSION, MIGRATIONS, PostgresStorage, migrate, open_postgres_storage
from tests.fakes.postgres import schema_url
from tests.fakes.storage_data import tool_exchange

GOOD = ("CREATE TABLE first_half (id integer)",)
BROKEN = ("CREATE TABLE second_half (id integer)", "CREATE TABLE broken (")


@pytest.fixture
def empty_schema_url(postgres_schemas):
    """A fresh schema with no tables at all, as a new deployment finds it."""
    url = postgres_schemas.take(migrated=False)
    yield url
    postgres_schemas.release(url)


async def versions(url: str) -> list[int]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cursor = await conn.execute("SELECT version FROM schema_version ORDER BY version")
        return [row[0] for row in await cursor.fetchall()]


async def test_replicas_starting_together_on_a_new_schema_apply_each_migration_once(empty_schema_url):
    replicas = await asyncio.gather(*(open_postgres_storage(empty_schema_url) for _ in range(4)))
    try:
        assert [await r.schema_version() for r in replicas] == [LATEST_VERSION] * 4
        assert len(MIGRATIONS) == LATEST_VERSION
        assert await replicas[0].events.first_time("slack:Ev1")
        assert not await replicas[3].events.first_time("slack:Ev1")
    finally:
        await asyncio.gather(*(r.aclose() for r in replicas))
    assert await versions(empty_schema_url) == list(range(1, LATEST_VERSION + 1))


async def test_a_schema_written_by_a_newer_countersign_is_refused_and_left_alone(postgres_url):
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        await conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (%s, now())", [LATEST_VERSION + 1])
    with pytest.raises(UnknownSchemaVersion, match=f"schema version {LATEST_VERSION + 1}") as refused:
        await open_postgres_storage(postgres_url)
    assert (refused.value.found, refused.value.known) == (LATEST_VERSION + 1, LATEST_VERSION)
    assert await versions(postgres_url) == [*range(1, LATEST_VERSION + 1), LATEST_VERSION + 1]


async def test_a_failed_migration_leaves_the_schema_as_it_was(empty_schema_url):
    async with await psycopg.AsyncConnection.connect(empty_schema_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.SyntaxError):
            await migrate(conn, migrations=[GOOD, BROKEN])  # versions 1 and 2 run in one transaction
        cursor = await conn.execute(
            "SELECT to_regclass('first_half'), to_regclass('second_half'), to_regclass('schema_version')"
        )
        assert await cursor.fetchone() == (None, None, None)
        assert await migrate(conn, migrations=[GOOD]) == 1  # and a good upgrade still goes through afterwards


async def test_a_search_path_naming_no_schema_is_a_clear_error(postgres_schemas):
    url = schema_url(postgres_schemas.base_url, "cs_does_not_exist")
    with pytest.raises(StorageError, match="search_path names no existing schema"):
        await open_postgres_storage(url)


async def test_an_unreachable_server_is_a_storage_error_naming_postgresql():
    with pytest.raises(StorageError, match="cannot connect to PostgreSQL"):
        await open_postgres_storage("postgresql://countersign@127.0.0.1:1/nowhere", connect_timeout=0.2)


async def test_pooled_connections_have_a_statement_timeout_and_autocommit(postgres_url):
    async with await open_postgres_storage(postgres_url, statement_timeout_ms=200) as storage:
        async with storage.db.connection() as conn:
            cursor = await conn.execute("SHOW statement_timeout")
            assert await cursor.fetchone() == ("200ms",)
            assert conn.autocommit
        with pytest.raises(StorageError, match="statement timeout"):
            async with storage.db.connection() as conn:
                await conn.execute("SELECT pg_sleep(2)")
        assert await storage.events.first_time("slack:Ev-after-timeout")  # the pool is still usable


async def test_a_closed_storage_raises_storage_error(postgres_url):
    storage = await open_postgres_storage(postgres_url)
    await storage.aclose()
    with pytest.raises(StorageError):
        await storage.events.first_time("slack:Ev1")


async def test_the_factory_opens_postgresql_for_a_url_and_sqlite_otherwise(tmp_path, postgres_url):
    postgres = await open_async_storage(tmp_path / "cs.db", database_url=postgres_url, last_k=7)
    assert not (tmp_path / "cs.db").exists()
    sqlite = await open_async_storage(tmp_path / "cs.db", database_url=None, last_k=7)
    try:
        assert isinstance(postgres, PostgresStorage) and isinstance(sqlite, AsyncStorage)
        assert (tmp_path / "cs.db").exists()
        assert postgres.messages.last_k == sqlite.messages.last_k == 7
    finally:
        await postgres.aclose()
        await sqlite.aclose()


async def test_truncating_the_audit_log_is_refused_too(postgres_url):
    async with await open_postgres_storage(postgres_url) as storage:
        await storage.audit.append("U_BOB", "approval.approved", "appr-1", {})
        with pytest.raises(StorageError, match="append-only"):
            async with storage.db.connection() as conn:
                await conn.execute("TRUNCATE audit")
        assert [e.actor for e in await storage.audit.recent()] == ["U_BOB"]


def random_thread(rng: random.Random, number: int) -> list[list[ChatMessage]]:
    """The write batches of one thread: text turns, tool exchanges of 1-3 parallel calls, the odd orphan
    result at the start, system messages, and batches delivered twice."""
    batches: list[list[ChatMessage]] = []
    if rng.random() < 0.3:
        batches.append(tool_exchange(("uptime", {}))[1:])  # results whose call was never stored
    for turn in range(rng.randint(2, 7)):
        kind = rng.random()
        if kind < 0.4:
            batch = [ChatMessage.from_user(f"t{number} q{turn}"), ChatMessage.from_assistant(f"t{number} a{turn}")]
        elif kind < 0.9:
            calls = [(f"tool_{number}_{turn}_{i}", {"i": i}) for i in range(rng.randint(1, 3))]
            batch = tool_exchange(*calls)
        else:
            batch = [ChatMessage.from_system("You are careful."), ChatMessage.from_user(f"t{number} s{turn}")]
        batches.append(batch)
        if rng.random() < 0.2:
            batches.append(batch)  # a retried delivery
    return batches


async def test_postgresql_windows_equal_sqlite_windows_on_random_histories(tmp_path, postgres_url):
    rng = random.Random(11)
    threads = {f"slack:T1:C1:{n}.0": random_thread(rng, n) for n in range(8)}
    postgres = await open_async_storage(tmp_path / "x.db", database_url=postgres_url)
    sqlite = await open_async_storage(tmp_path / "cs.db")
    try:
        for thread, batches in threads.items():
            for batch in batches:
                assert await postgres.messages.write_messages(thread, batch) == await sqlite.messages.write_messages(
                    thread, batch
                )
            total = await sqlite.messages.count_messages(thread)
            assert await postgres.messages.count_messages(thread) == total
            for k in range(1, total + 2):
                expected = [m.to_dict() for m in await sqlite.messages.retrieve_messages(thread, last_k=k)]
                got = [m.to_dict() for m in await postgres.messages.retrieve_messages(thread, last_k=k)]
                assert got == expected, (thread, k)
    finally:
        await postgres.aclose()
        await sqlite.aclose()


async def test_a_connection_lost_while_idle_is_replaced_before_it_is_used(postgres_url):
    async with await open_postgres_storage(postgres_url, pool_min=1, pool_max=1) as storage:
        async with storage.db.connection() as conn:
            pid = conn.info.backend_pid
        # Ended from outside, as a server restart, a failover or a proxy's idle timeout would end it.
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            cursor = await admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
            assert await cursor.fetchone() == (True,)
        assert await storage.events.first_time("slack:Ev-after-the-loss")
        async with storage.db.connection() as conn:
            assert conn.info.backend_pid != pid


async def test_an_upgrade_from_the_first_schema_keeps_pending_buttons_and_one_active_run_per_thread(empty_schema_url):
    async with await psycopg.AsyncConnection.connect(empty_schema_url, autocommit=True) as conn:
        assert await migrate(conn, target=1) == 1
        # Written by a countersign of schema 1: two active runs in one thread (possible then), each with an
        # approval; the older run's is pending.
        for n, status in enumerate(["paused", "running", "finished"], start=1):
            await conn.execute(
                "INSERT INTO runs (run_id, chat_history_id, platform, workspace, channel, thread, requester, status, "
                "created_at, updated_at) VALUES (%s, 'slack:T1:C1:1.1', 'slack', 'T1', 'C1', '1.1', 'U_ANA', %s, "
                "now() + make_interval(secs => %s), now())",
                [f"run-{n}", status, n],
            )
        for run_id, status in [("run-1", "pending"), ("run-2", "approved")]:
            await conn.execute(
                "INSERT INTO approvals (approval_id, run_id, step, tool_call_id, tool_name, arguments_json, "
                "args_digest, requester, mode, approvers, quorum, four_eyes, platform, chat_history_id, status, "
                "created_at, expires_at) VALUES (%s, %s, 1, 'call_1', 'delete_file', '{}', 'd', 'U_ANA', 'always', "
                "'[]', 1, false, 'slack', 'slack:T1:C1:1.1', %s, now(), now() + interval '1 hour')",
                [f"appr-{run_id}", run_id, status],
            )

    async with await open_postgres_storage(empty_schema_url) as storage:
        assert await storage.schema_version() == LATEST_VERSION
        assert await storage.places.shown_in("appr-run-1", "slack:C1"), "a pending approval keeps its buttons"
        assert not await storage.places.shown_in("appr-run-2", "slack:C1"), "a decided one gets no place"
        runs = [await storage.runs.get(f"run-{n}") for n in (1, 2, 3)]
        assert [r.status for r in runs] == ["failed", "running", "finished"], "the newest active run is kept"
        assert runs[0].error == "closed at upgrade: a newer run was active in the thread"
        closed = await storage.approvals.get("appr-run-1")
        assert (closed.status, closed.decided_by, closed.feedback) == (
            "cancelled",
            "countersign",
            CLOSED_RUN_APPROVALS_REASON,
        ), "the closed run's approval can no longer be clicked"
        assert closed.decided_at is not None
        assert (await storage.approvals.get("appr-run-2")).status == "approved"
        assert await storage.approvals.pending() == []
        assert (runs[1].owner, runs[1].lease_expires_at, runs[1].recoveries) == (None, None, 0)
        with pytest.raises(ActiveRunExists):
            await storage.runs.create(
                "run-4",
                chat_history_id="slack:T1:C1:1.1",
                platform="slack",
                workspace="T1",
                channel="C1",
                thread="1.1",
                requester="U_ANA",
            )


async def test_a_message_row_holds_a_compact_body_and_rows_written_whole_still_read(postgres_url):
    storage = await open_postgres_storage(postgres_url)
    try:
        old, new = ChatMessage.from_user("written before"), ChatMessage.from_assistant("90%", meta={"model": "m1"})
        await storage.messages.write_messages("slack:T1:C1:1.0", [old])
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
            await conn.execute("UPDATE messages SET data = %s::json", [json.dumps(old.to_dict())])  # the old layout
            await storage.messages.write_messages("slack:T1:C1:1.0", [new])
            cursor = await conn.execute("SELECT data::text FROM messages ORDER BY seq")
            bodies = [row[0] for row in await cursor.fetchall()]
        assert bodies[1] == '{"text":"90%","meta":{"model":"m1"}}'  # no role, id or defaults: the row has them
        read = await storage.messages.retrieve_messages("slack:T1:C1:1.0")
        assert [m.to_dict() for m in read] == [old.to_dict(), new.to_dict()]
    finally:
        await storage.aclose()


async def test_a_waiting_read_in_a_batch_waits_for_an_enqueue_in_flight_and_sees_its_message(postgres_url):
    """The read of a thread's waiting messages in a run's pause or end batch takes the thread's inbox lock, as an
    enqueue does: an enqueue still uncommitted when the batch reads is seen once it commits (else its message
    would wait, unseen, behind a run that just ended)."""
    from storage import Batch, ThreadAddress, stores

    thread = "slack:T1:C1:170.9"
    address = ThreadAddress(thread, "slack", "T1", "C1", "170.9")
    async with await open_postgres_storage(postgres_url) as storage, await open_postgres_storage(postgres_url) as other:
        enqueued = asyncio.Event()
        commit = asyncio.Event()

        async def enqueue_and_hold() -> None:
            async with other.db.bound():  # the enqueue's transaction stays open until told to commit
                await other.inbox.enqueue(address, "U_BOB", ChatMessage.from_user("and then?").to_dict())
                enqueued.set()
                await commit.wait()

        writer = asyncio.create_task(enqueue_and_hold())
        await enqueued.wait()
        reads_and_writes = Batch()
        waiting = reads_and_writes.read(stores.inbox.waiting, thread)
        first = reads_and_writes.write(stores.events.first_time, "e-after")
        batch = asyncio.create_task(storage.batches.apply(reads_and_writes))
        # The batch waits on the thread's lock (seen in pg_locks), not on a timer.
        while not await storage.db.fetchone(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND objid = (hashtext(%s)::bigint & 4294967295)::oid",
            [thread],
        ):
            assert not batch.done()
            await asyncio.sleep(0)
        commit.set()
        await writer
        outcome = await batch

    assert [i.requester for i in outcome[waiting]] == ["U_BOB"] and outcome[first] is True


async def test_in_a_batch_s_pipeline_a_statement_s_changed_rows_are_counted_and_the_batch_commits_at_its_end(
    postgres_url,
):
    async with await open_postgres_storage(postgres_url) as storage, await open_postgres_storage(postgres_url) as other:
        await storage.db.execute("CREATE TABLE piped (n integer)")
        async with storage.db.bound():
            assert await storage.db.execute("INSERT INTO piped VALUES (1), (2), (3)") == 3
            assert await storage.db.execute("UPDATE piped SET n = n + 1 WHERE n > 1") == 2
            assert await other.db.fetchone("SELECT count(*) FROM piped") == (0,), "nothing committed before the end"
        assert await other.db.fetchone("SELECT count(*) FROM piped") == (3,)


async def test_a_store_transaction_inside_a_batch_is_the_batch_itself_with_no_savepoint(postgres_url):
    # A savepoint per store call cost two more trips to the server each; a batch is all or nothing anyway.
    async with await open_postgres_storage(postgres_url) as storage:
        with pytest.raises(StorageError, match="aborted"):
            async with storage.db.bound() as bound:
                async with storage.db.transaction() as conn:
                    assert conn is bound
                    await conn.execute("SELECT 1 / 0")  # queued in the batch's pipeline: no round trip, no error yet
                with pytest.raises(StorageError, match="division by zero"):
                    await storage.db.fetchone("SELECT 1")  # the next read flushes the pipeline and meets it
                # No savepoint to return to: the error failed the batch's transaction as a whole.
                await storage.db.fetchone("SELECT 1")
        assert await storage.events.first_time("slack:Ev-after-batch")  # the pool is still usable

"""PostgreSQL storage benchmark: the workload of ``bench/storage.py`` on the PostgreSQL backend.

    python bench/storage_postgres.py                          # 1,000,000 messages across 10,000 threads
    python bench/storage_postgres.py --messages 100000 --threads 1000
    python bench/storage_postgres.py --url postgresql://bot@db.internal/bench

It works in a fresh schema of its own (``cs_bench_<random>``), dropped at the end unless ``--keep``.
The URL defaults to ``COUNTERSIGN_TEST_DATABASE_URL`` or the local test server. It measures appends
per second (``write_messages`` in batches), ``retrieve_messages(last_k=20)`` latency, ``decide``
latency one at a time, and ``decide`` under contention (20 replicas' worth of clicks on each approval,
exactly one winner). The figures are printed as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import random
import secrets
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402

from bench.pg_schemas import with_schema  # noqa: E402
from storage import NewApproval  # noqa: E402
from storage.postgres import PostgresStorage, open_postgres_storage  # noqa: E402

# The same threads and messages as the SQLite benchmark (bench/storage.py shares its name with the package).
_spec = importlib.util.spec_from_file_location("bench_sqlite_storage", Path(__file__).with_name("storage.py"))
assert _spec is not None and _spec.loader is not None
_sqlite_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_sqlite_bench)
thread_id = _sqlite_bench.thread_id
exchange = _sqlite_bench.exchange
percentile = _sqlite_bench.percentile

DEFAULT_URL = os.environ.get("COUNTERSIGN_TEST_DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"
CONTENDERS = 20


async def build_history(storage: PostgresStorage, n_messages: int, n_threads: int, batch: int, writers: int) -> float:
    """Append the history, ``batch`` messages per call, ``writers`` threads at a time; return messages/s."""
    per_thread = n_messages // n_threads

    async def fill(thread: int) -> int:
        written, turn, done = 0, 0, 0
        while done < per_thread:
            size = min(batch, per_thread - done)
            messages = []
            while len(messages) < size:
                messages += exchange(thread, turn)
                turn += 1
            written += await storage.messages.write_messages(thread_id(thread), messages[:size])
            done += size
        return written

    started = time.perf_counter()
    written = 0
    report_at = time.monotonic() + 10
    for first in range(0, n_threads, writers):
        written += sum(await asyncio.gather(*(fill(t) for t in range(first, min(first + writers, n_threads)))))
        if time.monotonic() > report_at:
            print(f"  ... {written:,} messages written", file=sys.stderr)
            report_at = time.monotonic() + 10
    return written / (time.perf_counter() - started)


async def time_last_k(storage: PostgresStorage, n_threads: int, samples: int) -> list[float]:
    rng = random.Random(7)
    timings = []
    for _ in range(samples):
        t = thread_id(rng.randrange(n_threads))
        started = time.perf_counter()
        window = await storage.messages.retrieve_messages(t, last_k=20)
        timings.append(time.perf_counter() - started)
        assert 20 <= len(window) <= 22, len(window)
    return timings


async def pending_approvals(storage: PostgresStorage, run_id: str, n: int, thread: int) -> list[str]:
    """``n`` pending approvals of a paused run in ``thread`` (its own: a thread has one active run at most)."""
    now = datetime.now(UTC)
    address = thread_id(thread)
    await storage.runs.create(
        run_id,
        chat_history_id=address,
        platform="slack",
        workspace="T0001",
        channel=address.split(":")[2],
        thread=address.rsplit(":", 1)[1],
        requester="U01",
        status="paused",
    )
    ids: list[str] = []
    for start in range(0, n, 100):
        records = [
            NewApproval(
                run_id=run_id,
                step=i,
                tool_call_id=f"{run_id}_call_{i}",
                tool_name="delete_file",
                arguments={"path": f"/srv/app/{i}.txt"},
                requester="U01",
                platform="slack",
                chat_history_id=address,
                expires_at=now + timedelta(hours=1),
                approvers=["U02", "U03"],
            )
            for i in range(start, min(start + 100, n))
        ]
        ids += [r.approval_id for r in await storage.approvals.create_many(records)]
    return ids


async def time_decide(storage: PostgresStorage, n: int) -> list[float]:
    timings = []
    for approval_id in await pending_approvals(storage, "bench-run", n, thread=0):
        started = time.perf_counter()
        won = await storage.approvals.decide(approval_id, status="approved", decided_by="U02")
        timings.append(time.perf_counter() - started)
        assert won
    return timings


async def time_contended_decide(storage: PostgresStorage, n: int) -> list[float]:
    """Per approval: the time until all ``CONTENDERS`` concurrent clicks are answered (one winner)."""
    timings = []
    for approval_id in await pending_approvals(storage, "bench-run-contended", n, thread=1):
        started = time.perf_counter()
        won = await asyncio.gather(
            *(storage.approvals.decide(approval_id, status="approved", decided_by=f"U{i}") for i in range(CONTENDERS))
        )
        timings.append(time.perf_counter() - started)
        assert won.count(True) == 1
    return timings


async def run(args: argparse.Namespace) -> dict[str, object]:
    schema = f"cs_bench_{secrets.token_hex(4)}"
    async with await psycopg.AsyncConnection.connect(args.url, autocommit=True) as conn:
        await conn.execute(f"CREATE SCHEMA {schema}")
        server_version = (await (await conn.execute("SHOW server_version")).fetchone())[0]
    storage = await open_postgres_storage(with_schema(args.url, schema), pool_max=max(args.writers, CONTENDERS))
    try:
        print(
            f"building {args.messages:,} messages across {args.threads:,} threads in schema {schema}", file=sys.stderr
        )
        started = time.perf_counter()
        append_rate = await build_history(storage, args.messages, args.threads, args.batch, args.writers)
        build_seconds = time.perf_counter() - started
        last_k = await time_last_k(storage, args.threads, args.samples)
        decide = await time_decide(storage, args.decides)
        contended = await time_contended_decide(storage, max(1, args.decides // 10))
        async with storage.db.connection() as conn:
            cursor = await conn.execute("SELECT COUNT(*), pg_total_relation_size('messages') FROM messages")
            count, size = await cursor.fetchone()  # type: ignore[misc]
    finally:
        await storage.aclose()
        if not args.keep:
            async with await psycopg.AsyncConnection.connect(args.url, autocommit=True) as conn:
                await conn.execute(f"DROP SCHEMA {schema} CASCADE")
    return {
        "backend": "postgresql",
        "messages": count,
        "threads": args.threads,
        "batch": args.batch,
        "writers": args.writers,
        "append_msgs_per_s": round(append_rate),
        "build_seconds": round(build_seconds, 1),
        "last_k20_median_ms": round(statistics.median(last_k) * 1e3, 4),
        "last_k20_p99_ms": round(percentile(last_k, 0.99) * 1e3, 4),
        "decide_median_ms": round(statistics.median(decide) * 1e3, 4),
        "decide_p99_ms": round(percentile(decide, 0.99) * 1e3, 4),
        f"decide_{CONTENDERS}_contenders_median_ms": round(statistics.median(contended) * 1e3, 4),
        f"decide_{CONTENDERS}_contenders_p99_ms": round(percentile(contended, 0.99) * 1e3, 4),
        "messages_table_mb": round(size / 1e6, 1),
        "schema": schema if args.keep else None,
        "server_version": server_version,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=DEFAULT_URL, help="postgresql:// URL of the server (a schema is made in it)")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100, help="messages per write_messages call")
    parser.add_argument("--writers", type=int, default=8, help="threads written concurrently")
    parser.add_argument("--samples", type=int, default=10_000, help="last_k reads to time")
    parser.add_argument("--decides", type=int, default=2_000, help="approval decisions to time")
    parser.add_argument("--keep", action="store_true", help="keep the schema afterwards")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":
    main()

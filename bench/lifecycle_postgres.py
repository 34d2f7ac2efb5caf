"""Lifecycle benchmark on PostgreSQL: conversations per second with one and two engines, batch expiry.

    python bench/lifecycle_postgres.py                         # 400 conversations, 10,000 due approvals
    python bench/lifecycle_postgres.py --url postgresql://bot@db.internal/bench

It works in fresh schemas of its own (``cs_bench_<random>``), dropped at the end. The URL defaults to
``COUNTERSIGN_TEST_DATABASE_URL`` or the local test server.

1. **Conversations per second** (message → pause → approve → resume → answer) with an instant model,
   ``--concurrency`` threads at a time per replica: one replica process, then two replica processes on
   the same schema started together, each with half of the conversations.
2. **Expiry of 10,000 due approvals** (10,000 paused runs cloned from one real pause), claimed and
   audited by one engine, then by two engines at once: each approval must be expired exactly once.

The figures are printed as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402

from bench.pg_schemas import Schemas  # noqa: E402
from bot.config import Config  # noqa: E402
from bot.engine.engine import Engine  # noqa: E402
from bot.engine.model import DecisionRequest, Inbound, ThreadRef  # noqa: E402
from bot.llm import ScriptedChatGenerator  # noqa: E402

# The same model, tool and surface as the SQLite lifecycle benchmark.
_spec = importlib.util.spec_from_file_location("bench_sqlite_lifecycle", Path(__file__).with_name("lifecycle.py"))
assert _spec is not None and _spec.loader is not None
_sqlite_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_sqlite_bench)
model = _sqlite_bench.model
delete_file = _sqlite_bench.delete_file
BenchSurface = _sqlite_bench.BenchSurface

DEFAULT_URL = os.environ.get("COUNTERSIGN_TEST_DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"


async def open_engine(url: str, replies: int) -> tuple[Engine, Any]:
    engine = await Engine.create(
        Config(db_path=Path("unused.db"), database_url=url),
        generator=ScriptedChatGenerator([model] * replies),
        tools=[delete_file],
    )
    surface = BenchSurface()
    engine.register_surface("slack", surface)
    await engine.start(sweep=False)
    return engine, surface


async def conversations(url: str, n: int, concurrency: int, offset: int, ready: Any = None) -> dict[str, Any]:
    """``n`` conversations on one engine, ``concurrency`` at a time (threads numbered from ``offset``).

    ``ready``, if given, is awaited after the engine is open and before the clock starts (a replica
    waits for the others).
    """
    engine, surface = await open_engine(url, 2 * n + 10)
    if ready is not None:
        await ready()
    gate = asyncio.Semaphore(concurrency)
    durations: list[float] = []

    async def one(i: int) -> None:
        thread = ThreadRef("slack", "T1", "C1", f"1700000000.{i:06d}")
        async with gate:
            began = time.perf_counter()
            await engine.handle_message(Inbound("slack", "T1", "C1", thread.thread, "U1", f"delete f{i}.log", f"Ev{i}"))
            approval = await surface._future(surface.rendered, thread.key)
            await engine.decide(DecisionRequest(approval.approval_id, "U1", "confirm", place=approval.thread.place))
            answer = await asyncio.wait_for(surface._future(surface.answered, thread.key), 30)
            assert answer == f"Done: deleted f{i}.log", answer
            durations.append((time.perf_counter() - began) * 1000)

    began = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(offset, offset + n)))
    elapsed = time.perf_counter() - began
    await engine.wait_idle()
    await engine.stop()
    return {"elapsed_s": elapsed, "durations_ms": durations}


async def replicas(url: str, n: int, concurrency: int, count: int) -> dict[str, Any]:
    """``n`` conversations split over ``count`` replica processes on one schema, started together."""
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--worker",
            url,
            str(n // count),
            str(concurrency),
            str(i * (n // count)),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for i in range(count)
    ]
    for worker in workers:  # each says "ready" once its engine is open
        assert (await worker.stdout.readline()).strip() == b"ready"  # type: ignore[union-attr]
    for worker in workers:
        worker.stdin.write(b"go\n")  # type: ignore[union-attr]
        await worker.stdin.drain()  # type: ignore[union-attr]
    results = [json.loads((await worker.communicate())[0].decode().strip().splitlines()[-1]) for worker in workers]
    assert all(worker.returncode == 0 for worker in workers)
    durations = sorted(d for r in results for d in r["durations_ms"])
    wall = max(r["elapsed_s"] for r in results)
    return {
        "replicas": count,
        "conversations": len(durations),
        "concurrency_per_replica": concurrency,
        "per_s": round(len(durations) / wall, 1),
        "median_ms": round(statistics.median(durations), 2),
        "p99_ms": round(durations[max(0, int(len(durations) * 0.99) - 1)], 2),
    }


async def worker(url: str, n: int, concurrency: int, offset: int) -> None:
    """One replica of :func:`replicas`: open, say ready, wait for go, run, print the figures."""

    async def ready() -> None:
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

    print(json.dumps(await conversations(url, n, concurrency, offset, ready)), flush=True)


async def clone_paused_runs(url: str, n: int, due: datetime) -> None:
    """One real paused run, then ``n - 1`` copies of it in their own threads; every approval due at ``due``."""
    engine, surface = await open_engine(url, 2)
    thread = ThreadRef("slack", "T1", "C1", "1600000000.000000")
    await engine.handle_message(Inbound("slack", "T1", "C1", thread.thread, "U1", "delete template.log", "EvT"))
    template = (await surface._future(surface.rendered, thread.key)).run_id
    await engine.stop()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn, conn.transaction():
        for table, replaced in (
            (
                "runs",
                {"run_id": "'clone-' || k", "chat_history_id": "'slack:T1:C1:clone.' || k", "thread": "'clone.' || k"},
            ),
            (
                "approvals",
                {
                    "approval_id": "'a-clone-' || k",
                    "run_id": "'clone-' || k",
                    "chat_history_id": "'slack:T1:C1:clone.' || k",
                },
            ),
        ):
            cursor = await conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND table_name = %s AND is_generated = 'NEVER' AND is_identity = 'NO' ORDER BY ordinal_position",
                [table],
            )
            columns = [row[0] for row in await cursor.fetchall()]
            select = ", ".join(replaced.get(c, c) for c in columns)
            await conn.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) SELECT {select} FROM {table}, "
                "generate_series(1, %s) AS k WHERE run_id = %s",
                [n - 1, template],
            )
        await conn.execute("UPDATE approvals SET expires_at = %s", [due])


async def expiry(url: str, n: int, engines: int) -> dict[str, Any]:
    """Time until ``n`` due approvals are claimed and audited by ``engines`` engines sweeping at once."""
    await clone_paused_runs(url, n, datetime.now(UTC) - timedelta(seconds=1))
    opened = [await open_engine(url, 2) for _ in range(engines)]
    began = time.perf_counter()
    claimed = await asyncio.gather(*(engine.expire_due() for engine, _ in opened))
    expired_s = time.perf_counter() - began
    for engine, _ in opened:
        await engine.stop()
    counts = [len(records) for records in claimed]
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cursor = await conn.execute("SELECT COUNT(*), COUNT(DISTINCT subject) FROM audit WHERE action = 'expired'")
        audited = await cursor.fetchone()
        cursor = await conn.execute("SELECT COUNT(*) FROM approvals WHERE status = 'pending'")
        pending = (await cursor.fetchone())[0]  # type: ignore[index]
    return {
        "engines": engines,
        "approvals": n,
        "expired_per_engine": counts,
        "expired_s": round(expired_s, 3),
        "exactly_once": sum(counts) == audited[0] == audited[1] == n and pending == 0,  # type: ignore[index]
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    schemas = Schemas(args.url)
    figures: dict[str, Any] = {"bench": "lifecycle_postgres"}
    try:
        for count in (1, 2):
            figures[f"conversations_{count}_replicas"] = await replicas(
                await schemas.new(), args.conversations, args.concurrency, count
            )
        for engines in (1, 2):
            figures[f"expiry_{engines}_engines"] = await expiry(await schemas.new(), args.approvals, engines)
        async with await psycopg.AsyncConnection.connect(args.url) as conn:
            cursor = await conn.execute("SHOW server_version")
            server_version = (await cursor.fetchone())[0]  # type: ignore[index]
    finally:
        await schemas.drop_all()
    figures["machine"] = {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "server_version": server_version,
        "psycopg": psycopg.__version__,
    }
    return figures


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=DEFAULT_URL, help="postgresql:// URL of the server (schemas are made in it)")
    parser.add_argument("--conversations", type=int, default=400, help="conversations to run (default: 400)")
    parser.add_argument("--concurrency", type=int, default=20, help="conversations at a time (default: 20)")
    parser.add_argument("--approvals", type=int, default=10_000, help="due approvals to expire (default: 10000)")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        url, n, concurrency, offset = args.worker
        asyncio.run(worker(url, int(n), int(concurrency), int(offset)))
        return
    figures = asyncio.run(run(args))
    for name, value in figures.items():
        if isinstance(value, dict) and ("engines" in value or "replicas" in value):
            print(f"{name}: {value}", file=sys.stderr)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

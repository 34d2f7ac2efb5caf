"""Storage benchmark: last_k reads, batched appends and approval decisions on a large history.

    python bench/storage.py                       # 1,000,000 messages across 10,000 threads
    python bench/storage.py --messages 20000 --threads 200
    python bench/storage.py --layout grouped      # each thread's messages written together (best case)

By default the history is written as real traffic writes it: turn after turn (question, tool call,
result, answer: one ``write_messages`` each, as the agent appends them), every round visiting all the
threads in a random order, so one thread's rows are spread through the table; ``--batch`` messages
commit together, as the group-commit writer does under load. ``--layout grouped`` writes each thread's
messages in one call instead, the best case for reads, as this bench did before.

Targets: retrieve_messages(last_k=20) p99 < 1 ms, approvals.decide median < 0.5 ms, appends above
20,000 messages/s in batches. The figures are printed as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.messages import ChatMessage, ToolCall  # noqa: E402
from storage import NewApproval, Storage, open_storage  # noqa: E402

TARGETS = {"last_k20_p99_ms": 1.0, "decide_median_ms": 0.5, "append_msgs_per_s": 20_000}


def thread_id(i: int) -> str:
    return f"slack:T0001:C{i % 97:04d}:1700000000.{i:06d}"


def exchange(thread: int, turn: int) -> list[ChatMessage]:
    """Four messages of a realistic turn: a question, a tool call, its result, the answer."""
    call = ToolCall(
        tool_name="disk_usage", arguments={"host": f"web-{turn % 7}", "path": "/var/log"}, id=f"call_{thread}_{turn}"
    )
    return [
        ChatMessage.from_user(f"<@U0{thread % 50}> how full is the log disk on web-{turn % 7}?"),
        ChatMessage.from_assistant(tool_calls=[call]),
        ChatMessage.from_tool(f"/var/log on web-{turn % 7}: {turn % 100}% used (1.{turn % 9} TB free)", origin=call),
        ChatMessage.from_assistant(f"The log disk on web-{turn % 7} is {turn % 100}% full."),
    ]


def build_interleaved(storage: Storage, n_messages: int, n_threads: int, batch: int) -> float:
    """Append the history turn by turn, threads interleaved, ``batch`` messages a commit; return messages/s."""
    per_thread = n_messages // n_threads
    rng = random.Random(11)
    order = list(range(n_threads))
    written = 0
    elapsed = 0.0
    report_at = time.monotonic() + 10
    pending: list[tuple[str, list[ChatMessage]]] = []

    def commit() -> None:
        nonlocal written, elapsed
        started = time.perf_counter()
        with storage.connector.writing():  # one transaction, like a group commit of concurrent writers
            for thread, messages in pending:
                written += storage.messages.write_messages(thread, messages)
        elapsed += time.perf_counter() - started
        pending.clear()

    for turn in range((per_thread + 3) // 4):
        rng.shuffle(order)
        size = min(4, per_thread - 4 * turn)
        for t in order:
            pending.extend((thread_id(t), [m]) for m in exchange(t, turn)[:size])
            if len(pending) >= batch:
                commit()
        if time.monotonic() > report_at:
            print(f"  ... {written:,} messages written", file=sys.stderr)
            report_at = time.monotonic() + 10
    if pending:
        commit()
    return written / elapsed


def build_history(storage: Storage, n_messages: int, n_threads: int, batch: int) -> float:
    """Append the history in rounds over the threads, ``batch`` messages per call; return messages/s."""
    per_thread = n_messages // n_threads
    written = 0
    elapsed = 0.0
    turns = [0] * n_threads
    done = [0] * n_threads
    report_at = time.monotonic() + 10
    while written < per_thread * n_threads:
        for t in range(n_threads):
            size = min(batch, per_thread - done[t])
            if size <= 0:
                continue
            messages: list[ChatMessage] = []
            while len(messages) < size:
                messages += exchange(t, turns[t])
                turns[t] += 1
            messages = messages[:size]
            started = time.perf_counter()
            written += storage.messages.write_messages(thread_id(t), messages)
            elapsed += time.perf_counter() - started
            done[t] += size
        if time.monotonic() > report_at:
            print(f"  ... {written:,} messages written", file=sys.stderr)
            report_at = time.monotonic() + 10
    return written / elapsed


def time_last_k(storage: Storage, n_threads: int, samples: int) -> list[float]:
    rng = random.Random(7)
    timings = []
    for _ in range(samples):
        t = thread_id(rng.randrange(n_threads))
        started = time.perf_counter()
        window = storage.messages.retrieve_messages(t, last_k=20)
        timings.append(time.perf_counter() - started)
        assert 20 <= len(window) <= 22, len(window)
    return timings


def time_decide(storage: Storage, n: int) -> list[float]:
    now = datetime.now(UTC)
    storage.runs.create(
        "bench-run",
        chat_history_id=thread_id(0),
        platform="slack",
        workspace="T0001",
        channel="C0000",
        thread="1700000000.000000",
        requester="U01",
        status="paused",
    )
    ids: list[str] = []
    for start in range(0, n, 100):
        records = [
            NewApproval(
                run_id="bench-run",
                step=i,
                tool_call_id=f"bench_call_{i}",
                tool_name="delete_file",
                arguments={"path": f"/srv/app/{i}.txt"},
                requester="U01",
                platform="slack",
                chat_history_id=thread_id(0),
                expires_at=now + timedelta(hours=1),
                approvers=["U02", "U03"],
            )
            for i in range(start, min(start + 100, n))
        ]
        ids += [r.approval_id for r in storage.approvals.create_many(records)]
    timings = []
    for approval_id in ids:
        started = time.perf_counter()
        won = storage.approvals.decide(approval_id, status="approved", decided_by="U02")
        timings.append(time.perf_counter() - started)
        assert won
    return timings


def sizes(storage: Storage) -> dict[str, float] | None:
    """Megabytes per table and index of 0.1 MB or more (SQLite's dbstat, when this SQLite has it)."""
    try:
        rows = storage.db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    except sqlite3.Error:
        return None
    return {name: round(size / 1e6, 1) for name, size in sorted(rows, key=lambda r: -r[1]) if size >= 1e5}


def bytes_written() -> int | None:
    """Bytes this process has handed to write() so far (Linux's /proc/self/io), or ``None`` elsewhere.

    With CPU time, a count that does not depend on what else the machine is doing, unlike messages/s.
    """
    try:
        with open("/proc/self/io") as io:
            return next(int(line.split()[1]) for line in io if line.startswith("wchar:"))
    except (OSError, StopIteration, ValueError):
        return None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument(
        "--batch", type=int, default=100, help="messages per commit (interleaved) or per write_messages call (grouped)"
    )
    parser.add_argument("--layout", choices=["interleaved", "grouped"], default="interleaved")
    parser.add_argument("--samples", type=int, default=10_000, help="last_k reads to time")
    parser.add_argument("--decides", type=int, default=5_000, help="approval decisions to time")
    parser.add_argument("--synchronous", choices=["FULL", "NORMAL"], default="FULL")
    parser.add_argument("--db", help="database file to keep (default: a temporary one)")
    args = parser.parse_args()

    folder = None if args.db else tempfile.TemporaryDirectory(prefix="countersign-bench-")
    path = Path(args.db) if args.db else Path(folder.name) / "bench.db"
    storage = open_storage(path, synchronous=args.synchronous)
    try:
        print(f"building {args.messages:,} messages across {args.threads:,} threads in {path}", file=sys.stderr)
        started, cpu_started, written_before = time.perf_counter(), time.process_time(), bytes_written()
        build = build_interleaved if args.layout == "interleaved" else build_history
        append_rate = build(storage, args.messages, args.threads, args.batch)
        build_seconds = time.perf_counter() - started
        build_cpu, written_after = time.process_time() - cpu_started, bytes_written()
        last_k = time_last_k(storage, args.threads, args.samples)
        decide = time_decide(storage, args.decides)
        figures = {
            "messages": storage.db["messages"].count,
            "threads": args.threads,
            "batch": args.batch,
            "layout": args.layout,
            "synchronous": args.synchronous,
            "append_msgs_per_s": round(append_rate),
            "build_seconds": round(build_seconds, 1),
            # Per message, building the messages included: counts that load on the machine does not change.
            "build_cpu_us_per_msg": round(build_cpu / args.messages * 1e6, 1),
            "build_bytes_written_per_msg": (
                None if written_after is None else round((written_after - written_before) / args.messages)
            ),
            "last_k20_median_ms": round(statistics.median(last_k) * 1e3, 4),
            "last_k20_p99_ms": round(percentile(last_k, 0.99) * 1e3, 4),
            "decide_median_ms": round(statistics.median(decide) * 1e3, 4),
            "decide_p99_ms": round(percentile(decide, 0.99) * 1e3, 4),
            "db_size_mb": round(os.path.getsize(path) / 1e6, 1),
            "table_and_index_mb": sizes(storage),
            "platform": platform.platform(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
        }
        figures["targets_met"] = (
            figures["last_k20_p99_ms"] < TARGETS["last_k20_p99_ms"]
            and figures["decide_median_ms"] < TARGETS["decide_median_ms"]
            and figures["append_msgs_per_s"] > TARGETS["append_msgs_per_s"]
        )
    finally:
        storage.close()
        if folder is not None:
            folder.cleanup()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

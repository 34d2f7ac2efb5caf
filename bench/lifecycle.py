"""Lifecycle benchmark: what owned runs, the inbox and the outbox cost, and how fast approvals expire.

    python bench/lifecycle.py                          # 200 conversations, 10,000 due approvals
    python bench/lifecycle.py --baseline-ref 89060f3   # also run the conversations on an older commit

1. **One conversation** (message → pause → approve → resume → answer), one after another on a fresh
   engine with an instant model, so the figure is the engine's own work: storage round trips and
   bookkeeping. The median over ``--conversations``. With ``--baseline-ref`` the same loop also runs on
   that commit's code (exported with ``git archive`` to a temporary folder), alternating with this code
   in fresh processes for ``--rounds`` rounds; the overhead is the difference of the medians.
2. **Expiry of 10,000 due approvals**: 10,000 paused runs (cloned from one real pause), each with one
   approval past its deadline, swept by one engine, and by two engines on the same file at once. Three
   times: every approval expired (claimed and audited: durable, and no click can approve it any more);
   every rendering updated and every resume started; every resumed run answered (10,000 agent runs).
   Each approval must be expired exactly once (counted in the audit log).
3. **The stored snapshot's size** of one paused run after 0, 100 and 1,000 earlier messages in its thread
   (``--snapshot-history``), with the default ``history_last_k`` and with the whole thread as the run's
   history; ``--only-snapshots`` measures only this.

The figures are printed as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.config import Config  # noqa: E402
from bot.engine.engine import Engine  # noqa: E402
from bot.engine.model import ApprovalView, DecisionRequest, Inbound, ThreadRef  # noqa: E402
from bot.engine.surface import Surface
from bot.llm import ScriptedChatGenerator  # noqa: E402
from bot.messages import ChatMessage, ChatRole, ToolCall  # noqa: E402
from bot.tools import tool  # noqa: E402


def model(messages: list[ChatMessage]) -> ChatMessage:
    """An instant model: asks to delete the file named in the message, then reports the result."""
    last = messages[-1]
    if last.role == ChatRole.USER:
        return ChatMessage.from_assistant(tool_calls=[ToolCall("delete_file", {"path": last.text.split()[-1]})])
    return ChatMessage.from_assistant(f"Done: {last.tool_call_result.result}")


@tool
def delete_file(path: str) -> str:
    """Delete a file.

    :param path: The file to delete.
    """
    return f"deleted {path}"


class BenchSurface(Surface):
    """Hands each thread's rendered approvals and answer to the waiting conversation."""

    def __init__(self) -> None:
        self.rendered: dict[str, asyncio.Future[ApprovalView]] = {}
        self.answered: dict[str, asyncio.Future[str]] = {}
        self.updates = 0

    def _future(self, table: dict[str, asyncio.Future[Any]], key: str) -> asyncio.Future[Any]:
        if key not in table:
            table[key] = asyncio.get_running_loop().create_future()
        return table[key]

    async def post_reply(self, thread: ThreadRef, text: str) -> None:
        future = self._future(self.answered, thread.key)
        if not future.done():
            future.set_result(text)

    async def render_approvals(self, thread: ThreadRef, approvals: Sequence[ApprovalView]) -> dict[str, Any]:
        self._future(self.rendered, thread.key).set_result(approvals[0])
        return {"thread": thread.key}

    async def update_approvals(self, thread: ThreadRef, message_ref: dict[str, Any], approvals: Any) -> None:
        self.updates += 1

    async def tell_user(self, thread: ThreadRef, user: str, text: str) -> None:
        return None

    async def show_working(self, thread: ThreadRef, working: bool, message_id: str | None = None) -> None:
        return None


async def open_engine(db_path: Path, replies: int, **config: Any) -> tuple[Engine, BenchSurface]:
    engine = await Engine.create(
        Config(db_path=db_path, **config), generator=ScriptedChatGenerator([model] * replies), tools=[delete_file]
    )
    surface = BenchSurface()
    engine.register_surface("slack", surface)
    await engine.start(sweep=False)
    return engine, surface


async def conversations(db_path: Path, n: int) -> dict[str, Any]:
    """``n`` conversations one after another; the median and p90 of one, in milliseconds."""
    engine, surface = await open_engine(db_path, 2 * n + 10)
    durations = []
    for i in range(n + 5):
        thread = ThreadRef("slack", "T1", "C1", f"1700000000.{i:06d}")
        began = time.perf_counter()
        await engine.handle_message(Inbound("slack", "T1", "C1", thread.thread, "U1", f"delete f{i}.log", f"Ev{i}"))
        approval = await surface._future(surface.rendered, thread.key)
        await engine.decide(DecisionRequest(approval.approval_id, "U1", "confirm", place=approval.thread.place))
        answer = await asyncio.wait_for(surface._future(surface.answered, thread.key), 30)
        await engine.wait_idle()
        assert answer == f"Done: deleted f{i}.log", answer
        if i >= 5:  # the first few warm caches up
            durations.append((time.perf_counter() - began) * 1000)
    await engine.stop()
    durations.sort()
    return {
        "conversations": n,
        "median_ms": round(statistics.median(durations), 2),
        "p90_ms": round(durations[int(len(durations) * 0.9) - 1], 2),
    }


async def snapshot_bytes(folder: Path, histories: Sequence[int]) -> dict[str, Any]:
    """The stored snapshot of one paused run, in bytes, after ``h`` earlier messages in its thread.

    Once with the default ``history_last_k`` (the run sees the newest 30 messages) and once with the whole
    thread as the run's history (``history_last_k`` larger than the thread), for each ``h`` of ``histories``.
    """
    figures: dict[str, dict[str, int]] = {"default_last_k": {}, "whole_thread": {}}
    for label in figures:
        for h in histories:
            db_path = folder / f"snapshot-{label}-{h}.db"
            config = {"history_last_k": h + 10} if label == "whole_thread" else {}
            engine, surface = await open_engine(db_path, 2, **config)
            thread = ThreadRef("slack", "T1", "C1", "1700000000.000001")
            earlier = [
                ChatMessage.from_user(f"question {i}: how is the deployment of service {i % 7} going?")
                if i % 2 == 0
                else ChatMessage.from_assistant(f"answer {i}: service {i % 7} rolled out to 3 of 4 regions.")
                for i in range(h)
            ]
            if earlier:
                await engine.storage.messages.write_messages(thread.key, earlier)
            await engine.handle_message(Inbound("slack", "T1", "C1", thread.thread, "U1", "delete old.log", "EvS"))
            approval = await surface._future(surface.rendered, thread.key)
            await engine.stop()
            db = sqlite3.connect(db_path)
            size = db.execute("SELECT length(snapshot_json) FROM runs WHERE run_id = ?", [approval.run_id]).fetchone()
            db.close()
            figures[label][str(h)] = int(size[0])
    return figures


async def template_pause(db_path: Path) -> str:
    """One real paused run to clone; returns its run id."""
    engine, surface = await open_engine(db_path, 2)
    thread = ThreadRef("slack", "T1", "C1", "1600000000.000000")
    await engine.handle_message(Inbound("slack", "T1", "C1", thread.thread, "U1", "delete template.log", "EvT"))
    approval = await surface._future(surface.rendered, thread.key)
    await engine.stop()
    return approval.run_id


def clone_paused_runs(db_path: Path, template: str, n: int, due: datetime) -> None:
    """``n`` copies of the template's paused run, each in its own thread, each approval due at ``due``."""
    db = sqlite3.connect(db_path)
    with db:
        db.execute("CREATE TEMP TABLE k (i INTEGER PRIMARY KEY)")
        db.executemany("INSERT INTO k VALUES (?)", [(i,) for i in range(n)])
        columns = [row[1] for row in db.execute("PRAGMA table_info(runs)")]
        select = ", ".join(
            {
                "run_id": "'clone-' || k.i",
                "chat_history_id": "'slack:T1:C1:clone.' || k.i",
                "thread": "'clone.' || k.i",
            }.get(c, c)
            for c in columns
        )
        db.execute(f"INSERT INTO runs ({', '.join(columns)}) SELECT {select} FROM runs, k WHERE run_id = ?", [template])
        columns = [row[1] for row in db.execute("PRAGMA table_info(approvals)")]
        select = ", ".join(
            {
                "approval_id": "'a-clone-' || k.i",
                "run_id": "'clone-' || k.i",
                "chat_history_id": "'slack:T1:C1:clone.' || k.i",
                "expires_at": str(due.timestamp()),
            }.get(c, c)
            for c in columns
        )
        db.execute(
            f"INSERT INTO approvals ({', '.join(columns)}) SELECT {select} FROM approvals, k WHERE run_id = ?",
            [template],
        )
        db.execute("UPDATE approvals SET expires_at = ? WHERE run_id = ?", [due.timestamp(), template])
    db.close()


async def expiry(folder: Path, n: int, engines: int) -> dict[str, Any]:
    """Time until ``n`` due approvals are expired by ``engines`` engines sweeping one file at once."""
    db_path = folder / f"expiry-{engines}.db"
    template = await template_pause(db_path)
    due = datetime.now(UTC) - timedelta(seconds=1)
    clone_paused_runs(db_path, template, n - 1, due)
    opened = [await open_engine(db_path, 2 * n + 10) for _ in range(engines)]
    began = time.perf_counter()
    claimed = await asyncio.gather(*(engine.expire_due() for engine, _ in opened))
    expired_s = time.perf_counter() - began
    await asyncio.gather(*(engine.after_expiry(records) for (engine, _), records in zip(opened, claimed, strict=True)))
    swept_s = time.perf_counter() - began
    await asyncio.gather(*(engine.wait_idle() for engine, _ in opened))
    settled_s = time.perf_counter() - began
    counts = [len(records) for records in claimed]
    for engine, _ in opened:
        await engine.stop()
    db = sqlite3.connect(db_path)
    audited = db.execute("SELECT COUNT(*), COUNT(DISTINCT subject) FROM audit WHERE action = 'expired'").fetchone()
    pending = db.execute("SELECT COUNT(*) FROM approvals WHERE status = 'pending'").fetchone()[0]
    db.close()
    return {
        "engines": engines,
        "approvals": n,
        "expired_per_engine": counts,
        "expired_s": round(expired_s, 3),
        "rerendered_and_resumes_started_s": round(swept_s, 3),
        "resumed_and_answered_s": round(settled_s, 3),
        "exactly_once": sum(counts) == audited[0] == audited[1] == n and pending == 0,
    }


def compare(ref: str, n: int, rounds: int) -> dict[str, Any]:
    """The conversation figure of this code and of commit ``ref``, measured in alternating rounds.

    Each round runs this script's conversation loop in a fresh process on each code base, one after the
    other, so that load from elsewhere on the machine hits both alike; the figure is the median of the
    rounds' medians.
    """
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="countersign-baseline-") as folder:
        archive = subprocess.run(["git", "-C", str(root), "archive", ref], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        copy = Path(folder) / "bench" / "lifecycle_baseline.py"
        copy.write_text(Path(__file__).read_text())
        scripts = {"current": Path(__file__).resolve(), "baseline": copy}
        medians: dict[str, list[float]] = {"current": [], "baseline": []}
        for _ in range(rounds):
            for name, script in scripts.items():
                done = subprocess.run(
                    [sys.executable, str(script), "--conversations", str(n), "--only-conversations"],
                    capture_output=True,
                    text=True,
                    cwd=script.parents[1],
                    check=True,
                )
                medians[name].append(json.loads(done.stdout.strip().splitlines()[-1])["conversation"]["median_ms"])
    current, base = statistics.median(medians["current"]), statistics.median(medians["baseline"])
    return {
        "ref": ref,
        "rounds": rounds,
        "median_ms": round(base, 2),
        "current_median_ms": round(current, 2),
        "round_medians_ms": medians,
        "overhead_ms": round(current - base, 2),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="countersign-bench-") as folder:
        figures: dict[str, Any] = {"bench": "lifecycle"}
        if args.only_snapshots:
            figures["snapshot_bytes"] = await snapshot_bytes(Path(folder), args.snapshot_history)
            return figures
        figures["conversation"] = await conversations(Path(folder) / "conversations.db", args.conversations)
        if args.only_conversations:
            return figures
        figures["snapshot_bytes"] = await snapshot_bytes(Path(folder), args.snapshot_history)
        figures["expiry_one_engine"] = await expiry(Path(folder), args.approvals, 1)
        figures["expiry_two_engines"] = await expiry(Path(folder), args.approvals, 2)
    if args.baseline_ref:
        figures["baseline"] = compare(args.baseline_ref, args.conversations, args.rounds)
        figures["conversation_overhead_ms"] = figures["baseline"]["overhead_ms"]
    figures["machine"] = {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
    }
    return figures


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=200, help="conversations to time (default: 200)")
    parser.add_argument("--approvals", type=int, default=10_000, help="due approvals to expire (default: 10000)")
    parser.add_argument("--baseline-ref", help="a git commit to compare the conversation figure with")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the comparison (default: 3)")
    parser.add_argument("--only-conversations", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--snapshot-history",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[0, 100, 1000],
        help="earlier messages in the thread when the stored snapshot is measured (default: 0,100,1000)",
    )
    parser.add_argument("--only-snapshots", action="store_true", help="measure only the stored snapshot's size")
    args = parser.parse_args(argv)
    figures = asyncio.run(main_async(args))
    for label, sizes in figures.get("snapshot_bytes", {}).items():
        print(f"stored snapshot bytes ({label}) by earlier messages in the thread: {sizes}")
    if not (args.only_conversations or args.only_snapshots):
        conversation = figures["conversation"]
        print(f"one conversation: median {conversation['median_ms']} ms, p90 {conversation['p90_ms']} ms")
        if "conversation_overhead_ms" in figures:
            base = figures["baseline"]
            print(
                f"  alternating rounds: this code {base['current_median_ms']} ms, {args.baseline_ref} "
                f"{base['median_ms']} ms (overhead {figures['conversation_overhead_ms']} ms)"
            )
        for key in ("expiry_one_engine", "expiry_two_engines"):
            e = figures[key]
            print(
                f"expire {e['approvals']} due approvals with {e['engines']} engine(s): {e['expired_s']} s; "
                f"re-rendered {e['rerendered_and_resumes_started_s']} s; all resumed runs answered "
                f"{e['resumed_and_answered_s']} s; exactly once: {e['exactly_once']}"
            )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

"""Engine benchmark: many threads at once, each pausing for one approval and resumed by a decision.

    python bench/engine.py                      # 1,000 threads, a model that answers after 200 ms
    python bench/engine.py --threads 200 --llm-delay 0.05 --profile
    python bench/engine.py --database-url postgresql://postgres@127.0.0.1:5432/test   # on PostgreSQL

Every thread sends one message; the model asks for one tool call that needs approval (the run pauses
and the approval is rendered); the thread's requester approves it; the run resumes, the tool runs, and
the model's second answer is posted. One conversation is therefore two model calls (2 x 200 ms).

Figures: the total wall time for all threads (target: under 2x one conversation's model time, i.e. no
serialization across threads) and the median decision-to-resume latency excluding the model (from
``decide()`` returning to the approved tool starting to run). Per conversation: the process's CPU
time (event loop and storage threads; target <= 2 ms) and the storage round trips (every call the event
loop hands to a storage thread; target <= 10). ``--profile`` adds each store method's count, run time
and queue wait. The real engine runs on a temporary SQLite file, in a process set up as ``countersign
serve`` sets itself up once started (:func:`bot.heap.settle_for_serving`: the garbage collector). The
figures are printed as one JSON object on the last line.

With ``--database-url`` the engine runs on PostgreSQL instead, in a fresh schema of its own for each run
(``cs_bench_<random>``, dropped afterwards), with the engine's default pool. That storage is natively
async, so a round trip there is one top-level call the engine makes into a store method (or one
``batches.apply``/``batches.read``); the calls a batch makes into the stores, or a store into another,
are part of it and not counted again. ``--profile``'s queue wait is then the time spent waiting for a
pooled connection (the pool's check of it included).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextvars
import functools
import inspect
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.pg_commands import COUNTER, NOT_COMMANDS  # noqa: E402
from bench.pg_schemas import Schemas, backend_cpu_s, cpu_spent_s, schema_of  # noqa: E402
from bot.aio import run_sync  # noqa: E402
from bot.config import Config  # noqa: E402
from bot.engine.engine import Engine  # noqa: E402
from bot.engine.model import ApprovalView, DecisionRequest, Inbound, ThreadRef  # noqa: E402
from bot.engine.surface import Surface
from bot.heap import settle_for_serving  # noqa: E402
from bot.llm.base import finalize_local_reply  # noqa: E402
from bot.messages import ChatMessage, ChatRole, ToolCall  # noqa: E402
from bot.tools import Tool, Toolset, tool  # noqa: E402
from storage.protocols import STORE_NAMES  # noqa: E402
from storage.sqlite.aio import EXECUTOR_THREADS  # noqa: E402

TARGET_FACTOR = 2.0
TARGET_CPU_MS = 2.0
TARGET_ROUND_TRIPS = 10


class SlowChatGenerator:
    """A ChatGenerator that answers after ``delay`` seconds: a tool call to a person's message, text after."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.calls = 0

    async def run_async(
        self,
        messages: list[ChatMessage],
        tools: Sequence[Tool | Toolset] | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        streaming_callback: Any = None,
    ) -> dict[str, list[ChatMessage]]:
        """Sleep like a model, then ask for ``delete_file`` or sum up the tool result."""
        self.calls += 1
        await asyncio.sleep(self.delay)
        last = messages[-1]
        if last.role == ChatRole.USER:
            path = last.text.removeprefix("please delete ")
            reply = ChatMessage.from_assistant(tool_calls=[ToolCall("delete_file", {"path": path})])
        else:
            reply = ChatMessage.from_assistant(f"Done: {last.tool_call_result.result}")
        return {"replies": [finalize_local_reply(reply, model="bench")]}

    def run(self, messages: list[ChatMessage], **kwargs: Any) -> dict[str, list[ChatMessage]]:
        """Sync twin of :meth:`run_async`."""
        return run_sync(self.run_async(messages, **kwargs))


class BenchSurface(Surface):
    """A Surface that hands each thread's rendered approvals and final answer to the waiting conversation."""

    def __init__(self) -> None:
        self.rendered: dict[str, asyncio.Future[ApprovalView]] = collections.defaultdict(_future)
        self.answered: dict[str, asyncio.Future[str]] = collections.defaultdict(_future)

    async def post_reply(self, thread: ThreadRef, text: str) -> None:
        future = self.answered[thread.key]
        if not future.done():
            future.set_result(text)

    async def render_approvals(self, thread: ThreadRef, approvals: Sequence[ApprovalView]) -> dict[str, Any]:
        self.rendered[thread.key].set_result(approvals[0])
        return {"thread": thread.key}

    async def update_approvals(self, thread: ThreadRef, message_ref: dict[str, Any], approvals: Any) -> None:
        return None

    async def tell_user(self, thread: ThreadRef, user: str, text: str) -> None:
        return None

    async def show_working(self, thread: ThreadRef, working: bool, message_id: str | None = None) -> None:
        return None


def _future() -> asyncio.Future[Any]:
    return asyncio.get_running_loop().create_future()


def bench_tools(started: dict[str, float]) -> list[Tool]:
    """``delete_file``: notes when it starts (the end of the decision-to-resume interval)."""

    @tool
    async def delete_file(path: str) -> str:
        """Delete a file.

        :param path: The file to delete.
        """
        started[path] = time.perf_counter()
        return f"deleted {path}"

    return [delete_file]


class CallStats:
    """The round-trip count, and with ``timing`` each call's count, queue wait and run time by name."""

    def __init__(self, timing: bool) -> None:
        self.timing = timing
        self.stats: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
        self.round_trips = 0
        self.cpu_s = 0.0
        self.lock = threading.Lock()

    def top(self, n: int = 15) -> list[dict[str, Any]]:
        """The store methods that took longest in total, with their counts and average queue wait."""
        rows = sorted(self.stats.items(), key=lambda kv: -kv[1][2])[:n]
        return [
            {"call": name, "n": int(c), "run_ms_total": round(r * 1000), "wait_ms_avg": round(w / c * 1000, 2)}
            for name, (c, w, r) in rows
        ]


def call_name(store_name: str, method_name: str, qualname: str, args: tuple[Any, ...]) -> str:
    """A call's name in the profile: ``SQLitePolicyStore.view``, or a batch by its entries
    (``batch: ledger.finish + runs.get``, ``reads: runs.latest_for_thread + access.rules``)."""
    if store_name == "batches" and method_name in ("apply", "read") and args:
        # One round trip for several writes or reads (storage.batches): named by what it does.
        kind = "batch" if method_name == "apply" else "reads"
        return f"{kind}: " + " + ".join(f"{w.store}.{w.method}" for w in args[0].steps)
    return qualname


class StorageProfile(CallStats):
    """Counts and times every storage round trip: each call the event loop hands to a storage thread.

    The async facade sends writes to its group-commit writer, reads to its reader threads, and
    anything else (``AsyncStorage.run``, or every call when it has neither) to its executor; each of
    the three is wrapped. With ``timing`` each call's queue wait, run time and thread CPU are kept per
    store method; the count is always kept (it is the "round trips per conversation" figure).
    """

    def __init__(self, storage: Any, timing: bool) -> None:
        super().__init__(timing)
        for worker in (getattr(storage, "writer", None), getattr(storage, "readers", None)):
            if worker is not None:
                worker.run = self._wrap_run(worker.run)  # type: ignore[method-assign]
        executor = storage.executor
        original_submit = executor.submit

        def submit(fn: Any, *args: Any, **kwargs: Any) -> Any:
            return original_submit(self._timed(functools.partial(fn, *args, **kwargs)))

        executor.submit = submit  # type: ignore[method-assign]

    def _wrap_run(self, run: Any) -> Any:
        # A plain function handing back the worker's own coroutine: counting adds no coroutine of its own
        # to every round trip (that was measurement overhead inside the CPU figure).
        def counted(operation: Any) -> Any:
            return run(self._timed(operation))

        return counted

    def _timed(self, operation: Any) -> Any:
        self.round_trips += 1  # on the event loop thread (or a caller's): a plain counter is enough
        if not self.timing:
            return operation
        queued = time.perf_counter()
        target = operation
        while isinstance(target, functools.partial):
            target = target.func
        name = getattr(target, "__qualname__", repr(target))
        if name.endswith(("WriteBatches.apply", "WriteBatches.read")) and isinstance(operation, functools.partial):
            name = call_name("batches", name.rsplit(".", 1)[1], name, operation.args)

        def timed() -> Any:
            began, cpu = time.perf_counter(), time.thread_time()
            try:
                return operation()
            finally:
                ended = time.perf_counter()
                with self.lock:
                    self.cpu_s += time.thread_time() - cpu
                    entry = self.stats[name]
                    entry[0] += 1
                    entry[1] += began - queued
                    entry[2] += ended - began

        return timed


class PostgresProfile(CallStats):
    """Counts and times every top-level call the engine makes into PostgreSQL storage.

    The PostgreSQL stores are natively async: no storage thread to count at. Instead every public
    coroutine method of each store on the storage object (and ``wakeups.wake``, a ``NOTIFY``) is
    replaced, on the instance, by one that counts itself unless a counted call is already under way in
    the same task (a context variable): a batch's calls into the stores, or a store method's into another
    public one, are part of the round trip that made them. With ``timing``
    each top-level call's run time (awaited wall time) and the time it spent waiting for pooled
    connections (the pool's ``getconn``) are kept by name, as :class:`StorageProfile` keeps them.
    """

    def __init__(self, storage: Any, timing: bool) -> None:
        super().__init__(timing)
        # The current task's counted call (its connection-wait cell), if any: what makes a nested call uncounted.
        self.current: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
            "bench_storage_call", default=None
        )
        for store_name in STORE_NAMES:
            store = getattr(storage, store_name)
            for method_name, method in inspect.getmembers(type(store), inspect.iscoroutinefunction):
                if not method_name.startswith("_"):
                    setattr(store, method_name, self._counted(store_name, getattr(store, method_name), method))
        storage.wakeups.wake = self._counted("wakeups", storage.wakeups.wake, type(storage.wakeups).wake)
        if timing:
            pool = storage.db.pool
            pool.getconn = self._waited(pool.getconn)

    def _counted(self, store_name: str, bound: Any, method: Any) -> Any:
        method_name, qualname = method.__name__, method.__qualname__

        async def counted(*args: Any, **kwargs: Any) -> Any:
            if self.current.get() is not None:  # inside a counted call: part of its round trip
                return await bound(*args, **kwargs)
            self.round_trips += 1
            cell = [0.0]
            token = self.current.set(cell)
            labelled = (
                None if COUNTER.log is None else COUNTER.label.set(call_name(store_name, method_name, qualname, args))
            )
            began = time.perf_counter()
            try:
                return await bound(*args, **kwargs)
            finally:
                self.current.reset(token)
                if labelled is not None:
                    COUNTER.label.reset(labelled)
                if self.timing:
                    entry = self.stats[call_name(store_name, method_name, qualname, args)]
                    entry[0] += 1
                    entry[1] += cell[0]
                    entry[2] += time.perf_counter() - began

        return counted

    def _waited(self, getconn: Any) -> Any:
        async def waited(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return await getconn(*args, **kwargs)
            finally:
                cell = self.current.get()
                if cell is not None:
                    cell[0] += time.perf_counter() - began

        return waited


async def run_conversations(
    n_threads: int,
    delay: float,
    db_path: Path,
    profile: bool = False,
    synchronous: str | None = None,
    db_threads: int | None = None,
    database_url: str | None = None,
    trace: bool = False,
    max_active_runs: int | None = None,
) -> tuple[dict[str, Any], CallStats]:
    """Run ``n_threads`` conversations at once on a fresh engine; return the figures.

    ``database_url``: run on PostgreSQL at that URL (its schema, empty or migrated, is the run's own)
    instead of SQLite at ``db_path``. ``trace``: the figures list every command sent to it meanwhile
    (``statements``: top-level call, kind, SQL text). ``max_active_runs``: the engine's admission limit
    (``COUNTERSIGN_MAX_ACTIVE_RUNS``; default 40).
    """
    started: dict[str, float] = {}
    generator = SlowChatGenerator(delay)
    config = Config(db_path=db_path, admins=frozenset(), database_url=database_url, max_active_runs=max_active_runs)
    profiler: CallStats
    if database_url is not None:
        if synchronous is not None or db_threads is not None:
            raise ValueError("synchronous and db_threads are SQLite's knobs")
        engine = await Engine.create(config, generator=generator, tools=bench_tools(started))
        profiler = PostgresProfile(engine.storage, timing=profile)
    elif synchronous is None and db_threads is None:
        engine = await Engine.create(config, generator=generator, tools=bench_tools(started))
    else:  # the same as Engine.create, with the storage knobs turned
        from storage import AsyncStorage, open_storage

        sync_storage = open_storage(db_path, synchronous=synchronous or "FULL", last_k=config.history_last_k)
        executor = ThreadPoolExecutor(max_workers=db_threads or EXECUTOR_THREADS, thread_name_prefix="countersign-db")
        storage = AsyncStorage(sync_storage, executor=executor)
        engine = Engine(config=config, storage=storage, generator=generator, tools=bench_tools(started))
    if database_url is None:
        profiler = StorageProfile(engine.storage, timing=profile)
    surface = BenchSurface()
    engine.register_surface("slack", surface)
    await engine.start(sweep=False)
    settle_for_serving()  # as ``countersign serve`` does once started: the engine measured as it is served
    decided_at: dict[str, float] = {}
    decide_ms: list[float] = []
    failures: list[str] = []

    async def conversation(i: int) -> None:
        thread = f"1700000000.{i:06d}"
        key = f"slack:T1:C{i % 50}:{thread}"
        path = f"file-{i}.log"
        inbound = Inbound("slack", "T1", f"C{i % 50}", thread, f"U{i}", f"please delete {path}", f"Ev{i}")
        await engine.handle_message(inbound)
        approval = await asyncio.wait_for(surface.rendered[key], 120)
        asked = time.perf_counter()
        click = DecisionRequest(approval.approval_id, f"U{i}", "confirm", place=approval.thread.place)
        result = await engine.decide(click)
        decided_at[path] = time.perf_counter()
        decide_ms.append((decided_at[path] - asked) * 1000)
        if not result.resumed:
            failures.append(f"{key}: not resumed")
        answer = await asyncio.wait_for(surface.answered[key], 120)
        if answer != f"Done: deleted {path}":
            failures.append(f"{key}: {answer[:80]}")

    round_trips_before = profiler.round_trips
    commands_before = collections.Counter(COUNTER.counts)
    name = None if database_url is None else schema_of(database_url)  # None: not a bench schema's URL
    server = None if database_url is None or name is None else (database_url, name)
    server_before = None if server is None else await backend_cpu_s(*server)
    if trace:
        COUNTER.log = []
    began, loop_cpu, process_cpu = time.perf_counter(), time.thread_time(), time.process_time()
    await asyncio.gather(*(conversation(i) for i in range(n_threads)))
    wall = time.perf_counter() - began
    loop_cpu = time.thread_time() - loop_cpu
    process_cpu = time.process_time() - process_cpu
    round_trips = profiler.round_trips - round_trips_before
    commands = collections.Counter(COUNTER.counts)
    commands.subtract(commands_before)
    statements, COUNTER.log = COUNTER.log, None
    server_cpu = None if server is None else cpu_spent_s(server_before, await backend_cpu_s(*server))
    await engine.wait_idle()
    await engine.stop()
    if db_threads is not None or synchronous is not None:
        executor.shutdown(wait=True)  # AsyncStorage leaves a borrowed executor running
    resume_ms = sorted((started[p] - decided_at[p]) * 1000 for p in decided_at if p in started)
    figures = {
        "backend": "sqlite" if database_url is None else "postgresql",
        "threads": n_threads,
        "wall_s": round(wall, 3),
        "llm_calls": generator.calls,
        "decision_to_resume_ms_median": round(statistics.median(resume_ms), 2) if resume_ms else None,
        "decision_to_resume_ms_p95": round(resume_ms[int(len(resume_ms) * 0.95) - 1], 2) if resume_ms else None,
        "decide_ms_median": round(statistics.median(decide_ms), 2) if decide_ms else None,
        "event_loop_cpu_s": round(loop_cpu, 2),
        "cpu_ms_per_conversation": round(process_cpu / n_threads * 1000, 3),
        "event_loop_cpu_ms_per_conversation": round(loop_cpu / n_threads * 1000, 3),
        "round_trips_per_conversation": round(round_trips / n_threads, 2),
        # The PostgreSQL server's own CPU: its processes serving this run's connections (/proc, same machine only).
        "server_cpu_ms_per_conversation": None if server_cpu is None else round(server_cpu / n_threads * 1000, 3),
        "commands_per_conversation": (
            None
            if database_url is None
            else round(sum(n for k, n in commands.items() if k not in NOT_COMMANDS) / n_threads, 2)
        ),
        "commands_by_kind_per_conversation": (
            None if database_url is None else {k: round(n / n_threads, 2) for k, n in sorted(commands.items()) if n}
        ),
        # PostgreSQL's storage runs on the event loop: its CPU is the event loop's, not a thread's of its own.
        "storage_cpu_s": round(profiler.cpu_s, 2) if profile and database_url is None else None,
        "failures": len(failures) + (n_threads - len(resume_ms)),
        "failure_examples": failures[:3],
    }
    if statements is not None:
        figures["statements"] = [list(entry) for entry in statements]
    return figures, profiler


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    postgres = args.database_url is not None
    if postgres:
        COUNTER.install()  # every command this process sends to PostgreSQL, counted (bench/pg_commands.py)
    schemas = Schemas(args.database_url) if postgres else None
    with tempfile.TemporaryDirectory(prefix="countersign-bench-") as folder:
        try:
            knobs: dict[str, Any] = {"synchronous": args.synchronous, "db_threads": args.db_threads}
            if schemas is not None:
                knobs = {"database_url": await schemas.new()}
            single, _ = await run_conversations(
                1, args.llm_delay, Path(folder) / "single.db", trace=args.trace, **knobs
            )
            if schemas is not None:
                knobs = {"database_url": await schemas.new()}
            many, profiler = await run_conversations(
                args.threads, args.llm_delay, Path(folder) / "many.db", profile=args.profile, **knobs
            )
        finally:
            if schemas is not None:
                await schemas.drop_all()
    llm_time = 2 * args.llm_delay
    target = TARGET_FACTOR * llm_time
    figures = {
        "bench": "engine",
        "backend": "postgresql" if postgres else "sqlite",
        "threads": args.threads,
        "llm_delay_s": args.llm_delay,
        "single_conversation_llm_s": llm_time,
        "single_conversation_wall_s": single["wall_s"],
        "single_decision_to_resume_ms": single["decision_to_resume_ms_median"],
        "wall_s": many["wall_s"],
        "target_wall_s": target,
        "meets_target": many["wall_s"] < target,
        "wall_over_single_llm": round(many["wall_s"] / llm_time, 2),
        "decision_to_resume_ms_median": many["decision_to_resume_ms_median"],
        "decision_to_resume_ms_p95": many["decision_to_resume_ms_p95"],
        "decide_ms_median": many["decide_ms_median"],
        "cpu_ms_per_conversation": many["cpu_ms_per_conversation"],
        "event_loop_cpu_ms_per_conversation": many["event_loop_cpu_ms_per_conversation"],
        "round_trips_per_conversation": many["round_trips_per_conversation"],
        "server_cpu_ms_per_conversation": many["server_cpu_ms_per_conversation"],
        "commands_per_conversation": many["commands_per_conversation"],
        "commands_by_kind_per_conversation": many["commands_by_kind_per_conversation"],
        "target_cpu_ms_per_conversation": TARGET_CPU_MS,
        "target_round_trips_per_conversation": TARGET_ROUND_TRIPS,
        "llm_calls": many["llm_calls"],
        "sqlite_synchronous": None if postgres else args.synchronous or "FULL",
        "db_executor_threads": None if postgres else args.db_threads or EXECUTOR_THREADS,
        "db_pool_size": Config(db_path=Path("unused.db")).db_pool_size if postgres else None,
        "failures": many["failures"],
        "failure_examples": many["failure_examples"],
        "machine": {
            "platform": platform.platform(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "postgresql": schemas.server_version if schemas is not None else None,
        },
    }
    if args.trace:
        figures["single_conversation_statements"] = single.get("statements", [])
    if args.profile:
        figures["event_loop_cpu_s"] = many["event_loop_cpu_s"]
        figures["storage_cpu_s"] = many["storage_cpu_s"]
        figures["storage_profile"] = profiler.top()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--llm-delay", type=float, default=0.2, help="seconds before each model reply")
    parser.add_argument("--profile", action="store_true", help="time every storage call on the storage threads")
    parser.add_argument("--synchronous", choices=["FULL", "NORMAL"], help="SQLite synchronous mode (engine: FULL)")
    parser.add_argument("--db-threads", type=int, help=f"storage executor threads (engine: {EXECUTOR_THREADS})")
    parser.add_argument(
        "--database-url", help="run on PostgreSQL (postgresql://...): a fresh schema per run, dropped afterwards"
    )
    parser.add_argument(
        "--trace", action="store_true", help="list every command the single conversation sends to PostgreSQL"
    )
    args = parser.parse_args()
    if args.trace and args.database_url is None:
        parser.error("--trace lists PostgreSQL's commands: it needs --database-url")
    if args.database_url is not None and (args.synchronous or args.db_threads):
        parser.error("--synchronous and --db-threads are SQLite's; PostgreSQL runs with the engine's pool")
    figures = asyncio.run(main_async(args))
    print(
        f"engine bench ({figures['backend']}): {figures['threads']} threads, "
        f"model answers after {args.llm_delay * 1000:.0f} ms"
    )
    print(
        f"  one conversation: {figures['single_conversation_wall_s']:.3f} s wall "
        f"({figures['single_conversation_llm_s']:.1f} s of it the model), "
        f"decision to resume {figures['single_decision_to_resume_ms']} ms"
    )
    print(
        f"  all threads:      {figures['wall_s']:.3f} s wall, target < {figures['target_wall_s']:.1f} s "
        f"({'met' if figures['meets_target'] else 'NOT met'})"
    )
    print(
        f"  decision to resume (tool starts), excluding the model: median "
        f"{figures['decision_to_resume_ms_median']} ms, p95 {figures['decision_to_resume_ms_p95']} ms"
    )
    print(f"  decide() itself: median {figures['decide_ms_median']} ms; failures: {figures['failures']}")
    print(
        f"  per conversation: {figures['cpu_ms_per_conversation']} ms CPU (process; event loop "
        f"{figures['event_loop_cpu_ms_per_conversation']} ms), target <= {TARGET_CPU_MS} ms; "
        f"{figures['round_trips_per_conversation']} storage round trips, target <= {TARGET_ROUND_TRIPS}"
    )
    if figures.get("commands_per_conversation") is not None:
        print(
            f"  PostgreSQL commands per conversation: {figures['commands_per_conversation']} "
            f"{figures['commands_by_kind_per_conversation']}"
        )
    if figures.get("server_cpu_ms_per_conversation") is not None:
        print(f"  PostgreSQL server CPU per conversation: {figures['server_cpu_ms_per_conversation']} ms")
    if figures.get("storage_cpu_s") is not None:
        print(f"  CPU: event loop {figures['event_loop_cpu_s']} s, storage threads {figures['storage_cpu_s']} s")
    for number, (call, kind, text) in enumerate(figures.get("single_conversation_statements", []), 1):
        print(f"  {number:>3} {kind:<8} {call:<40.40} {text[:160]}")
    for row in figures.get("storage_profile", []):
        print(
            f"    {row['call']:<45} n={row['n']:<6} run={row['run_ms_total']:>6} ms  "
            f"queue wait avg={row['wait_ms_avg']} ms"
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

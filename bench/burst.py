"""Black-box burst through real ``countersign serve`` processes: N conversations posted at once, every card approved.

    python bench/burst.py                                   # SQLite, 1 replica, 500 conversations
    python bench/burst.py --database-url postgresql://postgres@127.0.0.1:5432/test --replicas 2 --pool 5

The harness is the scenario tests' (:class:`tests.fakes.serve_processes.ServeCluster`): the fake Slack Web API,
a fake OpenAI server whose model answers after ``--llm-delay`` seconds, and ``serve`` processes on one database
(a SQLite file, or a fresh PostgreSQL schema dropped afterwards). Events and clicks go round-robin to the
replicas, as a load balancer sends them. Figures: conversations completed (their "Finished" answer posted),
events and clicks not answered 200 (503s), tools run more than once, the acknowledgement latency of the events
(p50, p99; Slack's deadline is 3 s), click-to-answer median, wall time, conversations per second, Slack Web API
calls (and by method) and model calls per conversation, and CPU per completed conversation of the serve
processes and (PostgreSQL) of this run's server backends, from ``/proc``.
The figures are printed as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.pg_schemas import Schemas  # noqa: E402
from tests.fakes.serve_processes import (  # noqa: E402
    ALICE,
    CHANNEL,
    STEADY,
    ApprovalCard,
    ServeCluster,
    ServeProcess,
    Thread,
    _send,
)
from tests.fakes.slack_api import SlackCall  # noqa: E402
from tests.fakes.slack_stack import button_values  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
DEADLINE = 900.0


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def _is_card(call: SlackCall) -> bool:
    return bool(call.args.get("blocks")) and bool(button_values(call.args["blocks"], "cs_approve"))


def _is_answer(call: SlackCall) -> bool:
    return not call.args.get("blocks") and str(call.args.get("text", "")).startswith("Finished")


def _percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * fraction))], 1)


class Backends:
    """The PostgreSQL backends of this run (tagged by ``application_name``), their CPU read from ``/proc``."""

    def __init__(self, url: str | None, name: str) -> None:
        self.url, self.name = url, name
        self.seen: dict[int, float] = {}

    def sample(self) -> None:
        if self.url is None:
            return
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (self.name,)).fetchall()
        for (pid,) in rows:
            self.seen[pid] = max(self.seen.get(pid, 0.0), _cpu_seconds(pid))

    def cpu(self, before: dict[int, float]) -> float:
        return sum(cpu - before.get(pid, 0.0) for pid, cpu in self.seen.items())


async def run(args: argparse.Namespace) -> dict[str, Any]:
    name = f"cs_burst_{uuid.uuid4().hex[:8]}"
    schemas = Schemas(args.database_url) if args.database_url else None
    url = None
    if schemas is not None:
        base = await schemas.new()
        url = f"{base}{'&' if '?' in base else '?'}application_name={name}"
    env = {**STEADY, "COUNTERSIGN_DB_POOL_SIZE": str(args.pool)}
    if args.max_active_runs is not None:
        env["COUNTERSIGN_MAX_ACTIVE_RUNS"] = str(args.max_active_runs)
    try:
        with tempfile.TemporaryDirectory(prefix="countersign-burst-") as folder:
            async with ServeCluster.open(Path(folder), database_url=url) as cluster:
                cluster.model.delay = args.llm_delay
                procs = await cluster.start_many(*[f"r{i}" for i in range(args.replicas)], env=env)
                return await _burst(cluster, procs, args, Backends(url, name))
    finally:
        if schemas is not None:
            await schemas.drop_all()


async def _burst(
    cluster: ServeCluster, procs: list[ServeProcess], args: argparse.Namespace, backends: Backends
) -> dict[str, Any]:
    n = args.conversations
    requests = cluster._base_requests()
    texts = [f"delete burst-{i}.log" for i in range(n)]
    for i, text in enumerate(texts):
        cluster.model.plan(text, [("delete_file", {"path": f"burst-{i}.log"})])
    backends.sample()
    backend_cpu_before = dict(backends.seen)
    serve_cpu_before = sum(_cpu_seconds(p.pid) for p in procs)
    slack_calls_before, model_calls_before = len(cluster.slack.calls), len(cluster.model.requests)
    ack_ms: list[float] = []
    statuses: collections.Counter[Any] = collections.Counter()

    async def post(i: int) -> Thread:
        ts = requests.next_ts()
        event = requests.mention(ALICE, CHANNEL, f"<@{cluster.slack.bot_user_id}> {texts[i]}", ts=ts)
        began = time.perf_counter()
        reply = await _send(procs[i % len(procs)], lambda r: r.event(event, event_id=f"Ev{ts.replace('.', '')}"))
        ack_ms.append((time.perf_counter() - began) * 1000)
        statuses["event", None if reply is None else reply.status] += 1
        return Thread(ts)

    began = time.perf_counter()
    threads = await asyncio.gather(*(post(i) for i in range(n)))
    ours = {t.ts for t in threads}
    cards = await cluster.slack.wait_for("chat.postMessage", n, _is_card, seconds=DEADLINE)
    posted = [
        ApprovalCard(Thread(c.args["thread_ts"]), c.response["ts"], button_values(c.args["blocks"], "cs_approve"), c)
        for c in cards
        if c.args.get("thread_ts") in ours
    ]
    await cluster.wait_until(lambda: all(cluster._card_stored(c) for c in posted), "cards stored", DEADLINE)
    clicked_at: dict[str, float] = {}

    async def click(i: int, card: ApprovalCard) -> None:
        clicked_at[card.thread.ts] = time.perf_counter()
        reply = await cluster.click(procs[i % len(procs)], card)
        statuses["click", None if reply is None else reply.status] += 1

    backends.sample()
    await asyncio.gather(*(click(i, card) for i, card in enumerate(posted)))
    answered_at: dict[str, float] = {}

    def note(call: SlackCall) -> bool:
        if _is_answer(call) and call.args.get("thread_ts") in ours:
            answered_at.setdefault(call.args["thread_ts"], time.perf_counter())
            return True
        return False

    try:
        await cluster.slack.wait_for("chat.postMessage", n, note, seconds=DEADLINE)
    except AssertionError:
        pass  # counted below as missing
    wall = time.perf_counter() - began
    backends.sample()
    serve_cpu = sum(_cpu_seconds(p.pid) for p in procs) - serve_cpu_before
    slack_calls = collections.Counter(c.method for c in cluster.slack.calls[slack_calls_before:])
    model_calls = len(cluster.model.requests) - model_calls_before
    completed = len(answered_at)
    ran = collections.Counter(e.arguments["path"] for e in cluster.control.of("delete_file"))
    resume_ms = [(answered_at[ts] - clicked_at[ts]) * 1000 for ts in answered_at if ts in clicked_at]
    return {
        "bench": "burst",
        "backend": "postgresql" if args.database_url else "sqlite",
        "replicas": len(procs),
        "pool": args.pool if args.database_url else None,
        "max_active_runs": args.max_active_runs,
        "llm_delay_s": args.llm_delay,
        "conversations": n,
        "completed": completed,
        "missing": n - completed,
        "not_200": {f"{kind}:{status}": c for (kind, status), c in statuses.items() if status != 200},
        "ran_twice": sum(1 for c in ran.values() if c > 1),
        "ack_ms_p50": _percentile(ack_ms, 0.5),
        "ack_ms_p99": _percentile(ack_ms, 0.99),
        "click_to_answer_ms_median": round(statistics.median(resume_ms), 1) if resume_ms else None,
        "wall_s": round(wall, 2),
        "conversations_per_s": round(completed / wall, 1) if wall else None,
        "serve_cpu_ms_per_conversation": round(serve_cpu / max(completed, 1) * 1000, 1),
        "slack_calls_per_conversation": round(slack_calls.total() / n, 2),
        "slack_calls_by_method": dict(slack_calls.most_common()),
        "model_calls_per_conversation": round(model_calls / n, 2),
        "server_cpu_ms_per_conversation": (
            round(backends.cpu(backend_cpu_before) / max(completed, 1) * 1000, 1) if args.database_url else None
        ),
        "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=500)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--pool", type=int, default=5, help="COUNTERSIGN_DB_POOL_SIZE of each replica")
    parser.add_argument("--max-active-runs", type=int, help="COUNTERSIGN_MAX_ACTIVE_RUNS of each replica (default: 40)")
    parser.add_argument("--llm-delay", type=float, default=0.2)
    parser.add_argument("--database-url", help="PostgreSQL (a fresh schema, dropped afterwards); default SQLite")
    args = parser.parse_args()
    figures = asyncio.run(run(args))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

"""How fast does countersign acknowledge Slack button clicks under load?

200 concurrent, signed **Approve** clicks (each on its own pending approval, so every click is a real
decision that then resumes a run) against the real server — ``bot.server.build_web_app`` with the
Slack plugin (Bolt AsyncApp on aiohttp), the real Engine on SQLite, a fake Slack Web API and a scripted
model — all on 127.0.0.1. Beside it, the same 200 clicks against a bare slack_bolt AsyncApp whose
handler only acks. Reported: median and p99 of the time until the HTTP acknowledgement, as the
clicking client sees it. Slack allows 3 s.

    .venv/bin/python bench/slack_ack.py [--clicks 200] [--rounds 10] [--freeze-gc]

The two apps run back to back in each round (at least 10 rounds), so a busy machine hits both alike:
the headline ratios are the medians of the per-round ratios (countersign / bare Bolt, for the median
and the p99). How much the bare-Bolt baseline itself moves between rounds (its min, median and max of
per-round p99, and their spread) says how far any single round can be trusted.

The clicks come from a separate process, as Slack's would, after their connections are open. The
last line printed is one JSON object with the figures and the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request  # noqa: E402
from slack_bolt.async_app import AsyncApp  # noqa: E402
from slack_sdk.web.async_client import AsyncWebClient  # noqa: E402

from bot.llm import ScriptedChatGenerator  # noqa: E402
from bot.messages import ChatMessage, ToolCall  # noqa: E402
from bot.tools import Tool  # noqa: E402
from tests.fakes.slack_api import FakeSlackAPI  # noqa: E402
from tests.fakes.slack_requests import SlackReply, SlackRequests  # noqa: E402
from tests.fakes.slack_stack import BOT_TOKEN, SIGNING_SECRET, SlackStack, button_values  # noqa: E402

CHANNEL = "C0BENCH"
USER = "U0BENCH"


def model_turn(messages: list[ChatMessage]) -> ChatMessage:
    """Ask to delete a file for a new request; answer in words once the tool has run."""
    if messages[-1].role == "user":
        return ChatMessage.from_assistant(tool_calls=[ToolCall("delete_file", {"path": messages[-1].text})])
    return ChatMessage.from_assistant("Done.")


def delete_file_tool() -> Tool:
    """A sensitive tool that does nothing (the figure is about acknowledgements, not tools)."""
    return Tool(
        name="delete_file",
        description="Delete a file.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        function=lambda path: f"deleted {path}",
    )


async def pending_approvals(stack: SlackStack, slack: FakeSlackAPI, count: int) -> list[tuple[str, str, str]]:
    """Open ``count`` threads that each pause on one approval: (approval id, message ts, thread ts)."""
    mentions = [stack.requests.mention(USER, CHANNEL, f"<@{slack.bot_user_id}> f{i}.log") for i in range(count)]
    await asyncio.gather(*(stack.requests.event(m) for m in mentions))
    await stack.settle()
    by_thread = {
        c.args["thread_ts"]: (button_values(c.args["blocks"], "cs_approve")[0], c.response["ts"])
        for c in slack.calls_to("chat.postMessage")
        if c.args.get("blocks")
    }
    return [(*by_thread[m["ts"]], m["ts"]) for m in mentions]


async def open_connections(session: aiohttp.ClientSession, url: str, count: int) -> None:
    """Open ``count`` keep-alive connections first, so the figure times the app's ack, not the kernel's
    listen backlog (128 by default: a burst of 200 new connections sees SYN retries of a whole second)."""

    async def one() -> None:
        async with session.get(url) as response:
            await response.read()

    for _ in range(3):
        await asyncio.gather(*(one() for _ in range(count)))


def clicker_process(url: str, health_url: str, targets: list[tuple[str, str, str]], results: Any) -> None:
    """The clicking side, in its own process (like Slack, it does not share the server's CPU time):
    open the connections, then send every click at once and report each time to the ack."""

    async def run() -> list[float]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            await open_connections(session, health_url, len(targets))
            requests = SlackRequests(url, SIGNING_SECRET, session)
            return [r.seconds for r in await click_all(requests, targets)]

    results.put(asyncio.run(run()))


FREEZE_GC = False


async def timed_clicks(url: str, health_url: str, targets: list[tuple[str, str, str]]) -> list[float]:
    """Run :func:`clicker_process` while this process keeps serving; return its timings.

    With ``--freeze-gc`` the objects alive before the burst are moved out of the collector's reach
    (``gc.freeze()``, what a server can do once started): the engine's larger heap otherwise makes
    every full collection during the burst slower than in the bare app.
    """
    if FREEZE_GC:
        gc.collect()
        gc.freeze()
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=clicker_process, args=(url, health_url, targets, results))
    process.start()
    try:
        return await asyncio.to_thread(results.get, True, 300)
    finally:
        await asyncio.to_thread(process.join, 30)
        if FREEZE_GC:
            gc.unfreeze()


async def click_all(requests: SlackRequests, targets: list[tuple[str, str, str]]) -> list[SlackReply]:
    """Every click at once; each reply carries its own time to the acknowledgement."""
    clicks = [
        requests.click("cs_approve", aid, user=USER, channel=CHANNEL, message_ts=ts, thread_ts=thread)
        for aid, ts, thread in targets
    ]
    replies = await asyncio.gather(*clicks)
    bad = [r.status for r in replies if r.status != 200]
    if bad:
        raise RuntimeError(f"{len(bad)} clicks were not acknowledged: {bad[:5]}")
    return replies


async def countersign_round(clicks: int, slack: FakeSlackAPI, folder: Path, round_no: int) -> list[float]:
    """The real app: warm up (Bolt's first auth.test), open ``clicks`` approvals, click them all at once."""
    generator = ScriptedChatGenerator([model_turn] * (4 * clicks + 8))
    stack = await SlackStack.start(
        db_path=folder / f"bench-{round_no}.db", slack=slack, generator=generator, tools=[delete_file_tool()]
    )
    try:
        targets = await pending_approvals(stack, slack, clicks + 1)
        await click_all(stack.requests, targets[:1])
        await stack.settle()
        url = str(stack.server.make_url("/slack/events"))
        seconds = await timed_clicks(url, str(stack.server.make_url("/healthz")), targets[1:])
        await stack.settle()
        return seconds
    finally:
        await stack.stop()


async def bare_round(clicks: int, slack: FakeSlackAPI) -> list[float]:
    """A bare slack_bolt AsyncApp on the same aiohttp adapter whose handler only acks."""
    bolt = AsyncApp(
        name="bare",
        client=AsyncWebClient(token=BOT_TOKEN, base_url=slack.base_url),
        signing_secret=SIGNING_SECRET,
    )

    @bolt.action("cs_approve")
    async def only_ack(ack: Any) -> None:
        await ack()

    async def handle(request: web.Request) -> web.Response:
        return await to_aiohttp_response(await bolt.async_dispatch(await to_bolt_request(request)))

    async def healthz(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_post("/slack/events", handle)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    connector = aiohttp.TCPConnector(limit=0)
    try:
        async with aiohttp.ClientSession(connector=connector) as session:
            requests = SlackRequests(f"http://127.0.0.1:{port}/slack/events", SIGNING_SECRET, session)
            targets = [(f"{i:032x}", requests.next_ts(), requests.next_ts()) for i in range(clicks + 1)]
            await click_all(requests, targets[:1])
            base = f"http://127.0.0.1:{port}"
            return await timed_clicks(f"{base}/slack/events", f"{base}/healthz", targets[1:])
    finally:
        await runner.cleanup()


def summary(seconds: list[float]) -> dict[str, float]:
    """Median and p99 in milliseconds."""
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, max(0, round(0.99 * len(ordered)) - 1))]
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 1),
        "p99_ms": round(p99 * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


def machine() -> dict[str, Any]:
    """Where the figure was taken."""
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
    }


async def main(clicks: int, rounds: int) -> dict[str, Any]:
    """Alternate rounds of both apps; the figures pool every round's clicks."""
    ours: list[float] = []
    bare: list[float] = []
    ratios: list[float] = []
    median_ratios: list[float] = []
    bare_p99s: list[float] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="countersign-bench-") as folder:
        for round_no in range(rounds):
            async with FakeSlackAPI() as slack:
                bare_times = await bare_round(clicks, slack)
            async with FakeSlackAPI() as slack:
                our_times = await countersign_round(clicks, slack, Path(folder), round_no)
            bare.extend(bare_times)
            ours.extend(our_times)
            ratios.append(round(summary(our_times)["p99_ms"] / max(summary(bare_times)["p99_ms"], 0.001), 2))
            median_ratios.append(
                round(summary(our_times)["median_ms"] / max(summary(bare_times)["median_ms"], 0.001), 2)
            )
            bare_p99s.append(summary(bare_times)["p99_ms"])
            print(
                f"round {round_no + 1}: countersign {summary(our_times)}  bare bolt {summary(bare_times)}",
                flush=True,
            )
    result = {
        "bench": "slack_ack",
        "clicks_per_round": clicks,
        "rounds": rounds,
        "countersign": summary(ours),
        "bare_bolt": summary(bare),
        "p99_ratio": statistics.median(ratios),  # the median of the per-round ratios
        "median_ratio": statistics.median(median_ratios),
        "p99_ratio_pooled": round(summary(ours)["p99_ms"] / max(summary(bare)["p99_ms"], 0.001), 2),
        "p99_ratio_per_round": ratios,  # each round's apps ran back to back: robust to a busy machine
        "median_ratio_per_round": median_ratios,
        "bare_bolt_p99_ms_between_rounds": {
            "min": min(bare_p99s),
            "median": statistics.median(bare_p99s),
            "max": max(bare_p99s),
            "max_over_min": round(max(bare_p99s) / max(min(bare_p99s), 0.001), 2),
            "stdev_over_mean": round(statistics.pstdev(bare_p99s) / max(statistics.fmean(bare_p99s), 0.001), 2),
        },
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "slack_limit_ms": 3000,
        "gc_frozen": FREEZE_GC,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": machine(),
    }
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clicks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=10, help="alternating rounds, at least 10")
    parser.add_argument("--freeze-gc", action="store_true", help="gc.freeze() the heap before each burst")
    options = parser.parse_args()
    if options.rounds < 10:
        parser.error("--rounds must be at least 10: fewer rounds cannot tell the apps from the machine's noise")
    FREEZE_GC = options.freeze_gc
    print(json.dumps(asyncio.run(main(options.clicks, options.rounds))))

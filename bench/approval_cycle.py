"""One human-approval cycle as bench-peers times it: pause, serialize, load, resume, with callable replies.

    python bench/approval_cycle.py                      # CPU time per cycle at 0 and 100 prior messages
    python bench/approval_cycle.py --instructions       # plus instructions per cycle (valgrind callgrind)

The scenario is ../shared/bench-peers' (a callable ScriptedChatGenerator reply asks for one tool call
that needs approval; ``to_json`` / ``from_json`` between pause and resume; the async tool runs; the
second callable reply answers "done"), without the peers. It is the regression benchmark of the hot
path's copies and JSON: on a shared, noisy machine, prefer ``--instructions``, which counts the
instructions of ``--cycles`` cycles minus those of a run with none (imports and set-up cancel out).

The figures are printed as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.agent import Agent, AgentSnapshot  # noqa: E402
from bot.hitl import BreakpointConfirmationStrategy, HITLBreakpointException, ToolExecutionDecision  # noqa: E402
from bot.llm import ScriptedChatGenerator  # noqa: E402
from bot.messages import ChatMessage, ToolCall  # noqa: E402
from bot.tools import tool  # noqa: E402

WARMUP = 5


@tool
async def restart_service(service: str, env: str) -> str:
    """Restart a service in an environment."""
    return "restarted"


def build(history: int, cycles: int) -> Any:
    """An async function running one checked cycle with ``history`` prior messages."""
    made = [0]

    def ask(messages: list[ChatMessage]) -> ChatMessage:
        made[0] += 1
        return ChatMessage.from_assistant(
            tool_calls=[ToolCall("restart_service", {"service": "api", "env": "prod"}, id=f"call_{made[0]}")]
        )

    def answer(messages: list[ChatMessage]) -> ChatMessage:
        assert messages[-1].tool_call_result is not None
        return ChatMessage.from_assistant("done")

    generator = ScriptedChatGenerator([ask, answer] * (cycles + WARMUP))
    strategies = {"restart_service": BreakpointConfirmationStrategy()}
    agent = Agent(generator, tools=[restart_service], confirmation_strategies=strategies)
    make = (ChatMessage.from_user, ChatMessage.from_assistant)
    prior = [make[i % 2]("x" * 200) for i in range(history)]

    async def cycle() -> None:
        try:
            await agent.run_async([*prior, ChatMessage.from_user("restart api in prod")])
            raise AssertionError("the run did not pause")
        except HITLBreakpointException as pause:
            blob = pause.snapshot.to_json()
            decisions = [ToolExecutionDecision(pause.tool_name, True, tool_call_id=pause.tool_call_id)]
        snapshot = AgentSnapshot.from_json(blob)
        done = await agent.run_async([], snapshot=snapshot, tool_execution_decisions=decisions)
        assert done["last_message"].text == "done"
        generator.calls.clear()

    return cycle


async def timed(history: int, cycles: int) -> dict[str, float]:
    """Median wall and CPU microseconds per cycle over batches of 10."""
    cycle = build(history, cycles)
    for _ in range(WARMUP):
        await cycle()
    wall, cpu = [], []
    for _ in range(max(1, cycles // 10)):
        w0, c0 = time.perf_counter(), time.process_time()
        for _ in range(10):
            await cycle()
        wall.append((time.perf_counter() - w0) / 10 * 1e6)
        cpu.append((time.process_time() - c0) / 10 * 1e6)
    return {"wall_us_median": round(statistics.median(wall), 1), "cpu_us_median": round(statistics.median(cpu), 1)}


async def only_cycles(history: int, cycles: int) -> None:
    """Run the cycles untimed (the process that callgrind counts)."""
    cycle = build(history, cycles)
    for _ in range(WARMUP + cycles):
        await cycle()


def instructions(history: int, cycles: int) -> float | None:
    """Instructions per cycle: callgrind's count of ``cycles`` cycles minus that of none."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    counts = []
    with tempfile.TemporaryDirectory() as folder:
        for n in (0, cycles):
            done = subprocess.run(
                [
                    valgrind,
                    "--tool=callgrind",
                    f"--callgrind-out-file={folder}/out",
                    sys.executable,
                    __file__,
                    "--count-only",
                    str(history),
                    str(n),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            counts.append(int(re.search(r"refs:\s+([\d,]+)", done.stderr).group(1).replace(",", "")))
    return (counts[1] - counts[0]) / cycles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=500, help="timed cycles per history length")
    parser.add_argument("--history", default="0,100", help="prior messages, comma-separated")
    parser.add_argument("--instructions", action="store_true", help="also count instructions with callgrind")
    parser.add_argument("--count-only", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count_only:
        asyncio.run(only_cycles(*args.count_only))
        return

    results: dict[str, dict[str, Any]] = {}
    for history in (int(h) for h in args.history.split(",")):
        figures: dict[str, Any] = asyncio.run(timed(history, args.cycles))
        if args.instructions:
            count = instructions(history, 40)
            figures["instructions_per_cycle"] = None if count is None else round(count)
        results[str(history)] = figures
        print(f"history {history}: {figures}")
    print(
        json.dumps(
            {
                "bench": "approval_cycle",
                "cycles": args.cycles,
                "results": results,
                "machine": {
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                    "cpu_count": os.cpu_count(),
                    "loadavg_1m": os.getloadavg()[0],
                },
            },
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main()

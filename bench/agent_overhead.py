"""Agent overhead: the time of one pause + resume cycle, excluding the model and any storage.

    python bench/agent_overhead.py                  # 2,000 timed cycles per scenario
    python bench/agent_overhead.py --cycles 500     # quicker

One cycle: ``run_async([user message])`` → the model asks for one tool call that needs approval → the
breakpoint raises ``HITLBreakpointException`` with the snapshot → ``run_async([], snapshot=...,
tool_execution_decisions=[approve])`` → the trivial tool runs → the model answers with text. Both runs
happen inside one running event loop, as on the serving path. No chat-message store is configured.

Scenarios: an empty history and 100 prior messages; with and without a ``snapshot.to_json()`` /
``AgentSnapshot.from_json()`` round trip between pause and resume (what crossing a process boundary
adds). Each is timed with ``ScriptedChatGenerator`` (it records a deep copy of every conversation
it is sent, which is test instrumentation, not agent work) and with a bare replay model that returns
the same prepared replies without recording anything, to show the agent's own share.

Target: below 0.5 ms per cycle. The figures are printed as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.agent import Agent, AgentSnapshot  # noqa: E402
from bot.hitl import BreakpointConfirmationStrategy, HITLBreakpointException, ToolExecutionDecision  # noqa: E402
from bot.llm import ScriptedChatGenerator  # noqa: E402
from bot.messages import ChatMessage, ToolCall  # noqa: E402
from bot.tools import tool  # noqa: E402

TARGET_MS = 0.5
CALL_ID = "call_bench_1"


@tool
def restart_service(service: str) -> str:
    """Restart a service (trivial: returns at once).

    :param service: The unit name.
    """
    return f"{service} restarted"


class ReplayModel:
    """A chat generator that hands back prepared replies and records nothing (isolates the agent)."""

    def __init__(self, replies: list[ChatMessage]) -> None:
        self.replies = replies
        self.position = 0

    async def run_async(self, messages: list[ChatMessage], **kwargs: Any) -> dict[str, list[ChatMessage]]:
        reply = self.replies[self.position]
        self.position += 1
        return {"replies": [reply]}


def history(n: int) -> list[ChatMessage]:
    """``n`` prior messages of a realistic thread: question, tool call, tool result, answer."""
    messages: list[ChatMessage] = []
    turn = 0
    while len(messages) < n:
        call = ToolCall("restart_service", {"service": f"web-{turn % 7}"}, id=f"call_old_{turn}")
        messages += [
            ChatMessage.from_user(f"<@U0{turn % 50}> please restart web-{turn % 7}, it is slow again"),
            ChatMessage.from_assistant(tool_calls=[call], meta={"finish_reason": "tool_calls"}),
            ChatMessage.from_tool(f"web-{turn % 7} restarted", origin=call),
            ChatMessage.from_assistant(f"Done: web-{turn % 7} was restarted and answers again.", meta={"usage": {}}),
        ]
        turn += 1
    return messages[:n]


def replies() -> list[ChatMessage]:
    usage = {"prompt_tokens": 120, "completion_tokens": 18, "total_tokens": 138}
    return [
        ChatMessage.from_assistant(
            tool_calls=[ToolCall("restart_service", {"service": "nginx"}, id=CALL_ID)],
            meta={"finish_reason": "tool_calls", "usage": usage},
        ),
        ChatMessage.from_assistant("nginx was restarted.", meta={"finish_reason": "stop", "usage": usage}),
    ]


DECISIONS = [ToolExecutionDecision("restart_service", True, tool_call_id=CALL_ID)]


async def one_cycle(agent: Agent, messages: list[ChatMessage], roundtrip: bool) -> int:
    """Pause and resume once; return the elapsed nanoseconds."""
    start = time.perf_counter_ns()
    try:
        await agent.run_async(messages)
    except HITLBreakpointException as pause:
        snapshot = pause.snapshot
    else:
        raise RuntimeError("the run did not pause")
    if roundtrip:
        snapshot = AgentSnapshot.from_json(snapshot.to_json())
    result = await agent.run_async([], snapshot=snapshot, tool_execution_decisions=DECISIONS)
    elapsed = time.perf_counter_ns() - start
    if result["exit_reason"] != "text":
        raise RuntimeError(f"unexpected exit {result['exit_reason']!r}")
    return elapsed


async def scenario(
    make_model: Callable[[], Any], prior: int, roundtrip: bool, cycles: int, warmup: int
) -> dict[str, float]:
    """Time ``cycles`` cycles after ``warmup`` untimed ones; the model is built outside the timing."""
    agent = Agent(
        make_model(),
        tools=[restart_service],
        confirmation_strategies={"restart_service": BreakpointConfirmationStrategy()},
    )
    messages = [*history(prior), ChatMessage.from_user("restart nginx please")]
    samples: list[int] = []
    gc.collect()
    for i in range(warmup + cycles):
        agent.chat_generator = make_model()
        elapsed = await one_cycle(agent, messages, roundtrip)
        if i >= warmup:
            samples.append(elapsed)
    samples.sort()
    return {
        "median_ms": round(statistics.median(samples) / 1e6, 4),
        "p90_ms": round(samples[int(len(samples) * 0.9)] / 1e6, 4),
        "min_ms": round(samples[0] / 1e6, 4),
    }


async def main_async(cycles: int, warmup: int) -> dict[str, Any]:
    models: dict[str, Callable[[], Any]] = {
        "scripted": lambda: ScriptedChatGenerator(replies()),
        "replay": lambda: ReplayModel(replies()),
    }
    results: dict[str, dict[str, float]] = {}
    for model_name, make_model in models.items():
        for prior in (0, 100):
            for roundtrip in (False, True):
                key = f"{model_name}/history{prior}" + ("+json" if roundtrip else "")
                results[key] = await scenario(make_model, prior, roundtrip, cycles, warmup)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=2000, help="timed cycles per scenario")
    parser.add_argument("--warmup", type=int, default=200, help="untimed cycles first")
    args = parser.parse_args()

    results = asyncio.run(main_async(args.cycles, args.warmup))

    print(f"pause + resume cycle, {args.cycles} cycles after {args.warmup} warm-up; target < {TARGET_MS} ms")
    print(f"{'scenario':<28}{'median ms':>10}{'p90 ms':>10}")
    for key, figures in results.items():
        mark = "ok" if figures["median_ms"] < TARGET_MS else "over"
        print(f"{key:<28}{figures['median_ms']:>10.3f}{figures['p90_ms']:>10.3f}  {mark}")
    print("scripted = ScriptedChatGenerator (deep-copies every conversation it is sent, for tests);")
    print("replay = the same replies without recording: the agent's own overhead. +json = snapshot JSON round trip.")
    summary = {
        "bench": "agent_overhead",
        "cycles": args.cycles,
        "warmup": args.warmup,
        "target_median_ms": TARGET_MS,
        "results": results,
        "met": {key: figures["median_ms"] < TARGET_MS for key, figures in results.items()},
        "machine": {
            "platform": platform.platform(),
            "machine": platform.machine(),
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "cpu_count": os.cpu_count(),
        },
    }
    print(json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    main()

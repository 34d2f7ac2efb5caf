"""Preview latency through the engine: click (``Engine.decide``) to the tool's first line, with a 10 ms preview and
without, on a real engine over a SQLite file (the test harness's engine, a recording surface, no chat platform).

    python bench/preview_engine_latency.py                # 40 timed cycles per scenario
    python bench/preview_engine_latency.py --cycles 10    # quicker

Each cycle is a message that pauses on one call, then its approval: the figure is the time from the decision to
the tool's start, which includes the decision's write, the claim, the resume, the preview computed again (with a
preview) and the ledger's begin. The difference of the medians is what the re-check adds. The figures are printed
as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository first: bench/storage.py is a script

from bot.engine.model import DecisionRequest  # noqa: E402
from bot.llm import ScriptedChatGenerator  # noqa: E402
from bot.tools import Tool, tool  # noqa: E402
from tests.fakes.engine_kit import REQUESTER, Harness, asks_for, says  # noqa: E402

PREVIEW_SECONDS = 0.010


def make(preview: bool, starts: list[float]) -> Tool:
    def plan(manifest: str) -> str:
        time.sleep(PREVIEW_SECONDS)
        return f"{manifest}: 3 pods will restart"

    def apply_manifest(manifest: str) -> str:
        """Apply a manifest.

        :param manifest: The file.
        """
        starts.append(time.perf_counter())
        return "applied"

    return tool(apply_manifest, preview=plan if preview else None)


async def scenario(preview: bool, cycles: int) -> list[float]:
    starts: list[float] = []
    replies = []
    for _ in range(cycles + 3):
        replies += [asks_for("apply_manifest", manifest="web.yaml"), says("done")]
    with tempfile.TemporaryDirectory() as folder:
        h = await Harness.open(
            Path(folder), generator=ScriptedChatGenerator(replies), extra_tools=[make(preview, starts)]
        )
        try:
            figures = []
            for n in range(cycles + 3):
                [view] = await h.paused_approvals("apply web.yaml", thread=f"17000000{n:02d}.000100")
                clicked = time.perf_counter()
                await h.engine.decide(DecisionRequest(view.approval_id, REQUESTER, "confirm", place=view.thread.place))
                await h.engine.wait_idle()
                figures.append(starts[-1] - clicked)
            return figures[3:]  # the first cycles warm up
        finally:
            await h.close()


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1] * 1000, 2),
    }


async def main(cycles: int) -> None:
    without = summary(await scenario(False, cycles))
    with_preview = summary(await scenario(True, cycles))
    added = round(with_preview["median_ms"] - without["median_ms"], 2)
    print(f"without a preview: {without}")
    print(f"with a 10 ms preview: {with_preview}")
    print(json.dumps({"without": without, "with_10ms_preview": with_preview, "added_median_ms": added}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=40)
    asyncio.run(main(parser.parse_args().cycles))

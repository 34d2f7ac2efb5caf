"""Preview latency: the time from an approval's click to the tool's start, with a 10 ms preview and without.

    python bench/preview_latency.py                 # 200 timed cycles per scenario
    python bench/preview_latency.py --cycles 50     # quicker

Measures the step issue 30 adds before a call runs: compute the preview again
(:func:`bot.hitl.previews.compute_preview`, a sync preview in a worker thread), compare its digest to the
approved one (:func:`bot.hitl.previews.recheck`) and build the run arguments
(:func:`bot.hitl.previews.run_arguments`), up to the tool's first line. The rest of the click-to-start path
(storage, the ledger) is the same with or without a preview and is not part of this figure. Only the
added latency is of interest: it should be about the preview's own 10 ms, nothing more.
The figures are printed as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from bot.hitl.previews import compute_preview, recheck, run_arguments
from bot.tools import Tool, tool

PREVIEW_SECONDS = 0.010


def plan(manifest: str) -> str:
    time.sleep(PREVIEW_SECONDS)
    return f"{manifest}: 3 pods will restart"


def make(preview: bool) -> tuple[Tool, list[float]]:
    starts: list[float] = []

    def apply_manifest(manifest: str, approved_preview: str = "") -> str:
        starts.append(time.perf_counter())
        return "applied"

    return tool(apply_manifest, preview=plan if preview else None), starts


async def cycle(t: Tool, starts: list[float], approved_digest: str | None) -> float:
    args = {"manifest": "web.yaml"}
    clicked = time.perf_counter()
    fresh = await compute_preview(t, args, 10.0)
    check = recheck(t, approved_digest, fresh)
    assert check.run
    t.function(**run_arguments(t, args, fresh))
    return starts[-1] - clicked


async def scenario(preview: bool, cycles: int) -> list[float]:
    t, starts = make(preview)
    approved = await compute_preview(t, {"manifest": "web.yaml"}, 10.0)
    digest = approved.digest if approved is not None else None
    for _ in range(5):
        await cycle(t, starts, digest)
    return [await cycle(t, starts, digest) for _ in range(cycles)]


def main() -> None:
    parser = argparse.ArgumentParser(description="Click-to-tool-start latency with a 10 ms preview and without.")
    parser.add_argument("--cycles", type=int, default=200)
    options = parser.parse_args()
    figures: dict[str, float] = {}
    for name, preview in (("none", False), ("preview_10ms", True)):
        times = asyncio.run(scenario(preview, options.cycles))
        figures[f"{name}_median_ms"] = round(statistics.median(times) * 1000, 3)
        figures[f"{name}_p95_ms"] = round(sorted(times)[int(len(times) * 0.95) - 1] * 1000, 3)
        print(f"{name:>13}: median {figures[f'{name}_median_ms']} ms, p95 {figures[f'{name}_p95_ms']} ms")
    figures["added_median_ms"] = round(figures["preview_10ms_median_ms"] - figures["none_median_ms"], 3)
    figures["added_over_preview_ms"] = round(figures["added_median_ms"] - PREVIEW_SECONDS * 1000, 3)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

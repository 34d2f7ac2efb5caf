"""Provenance benchmark: the cost of the taint check per tool call, against the untrusted text a run has seen.

    python bench/taint.py                          # 10 KB, 100 KB, 1 MB, 4 MB of untrusted text
    python bench/taint.py --sizes 1000000 --calls 2000

The untrusted text is made of tool results (pages of words from a realistic vocabulary, 20 KB each), indexed
by ``bot.engine.provenance.RunProvenance`` as a run would (one ``ingest`` per result). Each call checked has
five string arguments of 10 to 120 characters (about 300 characters in all, none in the text: the common, clean
case), and separately a call whose argument was copied from the middle of the text (tainted: the check also
finds the source and the excerpt). Reported: per-call check time (median and p99, µs), the time to build the
index as the run goes and in one go (a process resuming the run), and its size (8 bytes a window; the run's
normalised untrusted text is kept besides, to name a match's source). Target: at most 1 ms per call with 1 MB
of untrusted text. One JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.engine.provenance import RunProvenance  # noqa: E402
from bot.messages import ChatMessage, ToolCall  # noqa: E402
from bot.tools import tool  # noqa: E402

WORDS = [
    "service",
    "deploy",
    "restart",
    "payments",
    "api",
    "gateway",
    "cluster",
    "node",
    "pod",
    "replica",
    "error",
    "warning",
    "timeout",
    "latency",
    "database",
    "primary",
    "replica",
    "backup",
    "region",
    "zone",
    "eu",
    "us",
    "west",
    "east",
    "ticket",
    "customer",
    "invoice",
    "refund",
    "order",
    "shipping",
    "queue",
    "worker",
    "cron",
    "job",
    "failed",
    "succeeded",
    "retry",
    "page",
    "alert",
    "incident",
    "postmortem",
    "owner",
    "team",
    "on-call",
    "rotation",
]
PAGE_CHARS = 20_000


@tool(untrusted_output=True)
def fetch_url(url: str) -> str:
    """Fetch a page.

    :param url: The address.
    """
    return url


def pages(total: int, rng: random.Random) -> list[str]:
    out, size = [], 0
    while size < total:
        words, length = [], 0
        while length < PAGE_CHARS:
            word = rng.choice(WORDS) + (str(rng.randint(0, 9999)) if rng.random() < 0.2 else "")
            words.append(word)
            length += len(word) + 1
        page = " ".join(words)[: min(PAGE_CHARS, total - size)]
        out.append(page)
        size += len(page)
    return out


def build(texts: list[str]) -> tuple[RunProvenance, float]:
    provenance = RunProvenance({fetch_url.name: fetch_url}, "U_REQ")
    messages: list[ChatMessage] = [ChatMessage.from_user("look into the incident", meta={"user": "U_REQ"})]
    started = time.perf_counter()
    for i, text in enumerate(texts):
        call = ToolCall("fetch_url", {"url": f"https://example.com/{i}"}, id=f"c{i}")
        messages += [ChatMessage.from_assistant(tool_calls=[call]), ChatMessage.from_tool(text, call)]
        provenance.ingest(messages)  # as at each call's before_tool: only the new messages are indexed
    return provenance, time.perf_counter() - started


def rebuild_seconds(texts: list[str]) -> float:
    """What a process resuming the run pays: the whole history indexed in one ``ingest``."""
    messages: list[ChatMessage] = [ChatMessage.from_user("look into the incident", meta={"user": "U_REQ"})]
    for i, text in enumerate(texts):
        call = ToolCall("fetch_url", {"url": f"https://example.com/{i}"}, id=f"c{i}")
        messages += [ChatMessage.from_assistant(tool_calls=[call]), ChatMessage.from_tool(text, call)]
    provenance = RunProvenance({fetch_url.name: fetch_url}, "U_REQ")
    started = time.perf_counter()
    provenance.ingest(messages)
    return time.perf_counter() - started


def clean_arguments(rng: random.Random) -> dict[str, Any]:
    def value(n: int) -> str:
        return "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789-_") for _ in range(n))

    return {"host": value(20), "command": value(120), "reason": value(90), "ticket": value(10), "env": value(60)}


def timed(provenance: RunProvenance, arguments: list[dict[str, Any]]) -> tuple[list[float], int]:
    times, tainted = [], 0
    for args in arguments:
        started = time.perf_counter()
        found = provenance.check(args)
        times.append((time.perf_counter() - started) * 1e6)
        tainted += bool(found)
    return times, tainted


def p99(values: list[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.99) - 1)]


def measure(size: int, calls: int, rng: random.Random) -> dict[str, Any]:
    texts = pages(size, rng)
    provenance, build_seconds = build(texts)
    clean, clean_tainted = timed(provenance, [clean_arguments(rng) for _ in range(calls)])
    copied = []
    for _ in range(max(1, calls // 10)):
        text = rng.choice(texts)
        at = rng.randint(0, max(0, len(text) - 60))
        copied.append({**clean_arguments(rng), "command": f"run {text[at : at + 40]}"})
    dirty, dirty_tainted = timed(provenance, copied)
    return {
        "untrusted_chars": provenance.untrusted_chars,
        "windows_indexed": len(provenance.untrusted),
        "build_ms": round(build_seconds * 1000, 1),
        "rebuild_on_resume_ms": round(rebuild_seconds(texts) * 1000, 1),
        "index_mb": round(len(provenance.untrusted) * 8 / 1e6, 2),
        "clean_call_median_us": round(statistics.median(clean), 1),
        "clean_call_p99_us": round(p99(clean), 1),
        "tainted_call_median_us": round(statistics.median(dirty), 1),
        "tainted_call_p99_us": round(p99(dirty), 1),
        "false_taints": clean_tainted,
        "taints_found": f"{dirty_tainted}/{len(copied)}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000, 4_000_000])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=31)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    results = {}
    for size in args.sizes:
        results[str(size)] = row = measure(size, args.calls, rng)
        print(f"{size:>9} chars: {json.dumps(row)}")
    print(json.dumps({"bench": "taint", "python": sys.version.split()[0], "results": results}))


if __name__ == "__main__":
    main()

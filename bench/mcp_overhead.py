"""MCP overhead: a read-only tool called through countersign's MCP tool vs the same call on the ``mcp``
client directly, and start-up with three stdio servers.

    python bench/mcp_overhead.py [N]

Needs ``npm ci`` in tests/npm/mcp (the real server-filesystem and server-everything). The overhead
measured is the tool wrapper and manager (``Tool.invoke_async`` -> ``MCPManager.call``), median of N
calls each, on one session; the engine's own per-call costs are measured by bench/agent_overhead.py.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.mcp import MCPManager, parse_mcp_config  # noqa: E402

BIN = ROOT / "tests" / "npm" / "mcp" / "node_modules" / ".bin"


async def main(n: int) -> None:
    folder = Path(tempfile.mkdtemp())
    (folder / "a.txt").write_text("hello")
    spec = {
        "fs": {"command": str(BIN / "mcp-server-filesystem"), "args": [str(folder)]},
        "everything": {"command": str(BIN / "mcp-server-everything"), "args": ["stdio"]},
        "t": {
            "command": sys.executable,
            "args": ["-m", "tests.fakes.mcp_server", str(folder / "log")],
            "cwd": str(ROOT),
        },
    }
    manager = MCPManager(parse_mcp_config({"mcpServers": spec}, {}))
    t0 = time.perf_counter()
    await manager.start(60)
    startup = time.perf_counter() - t0
    states = [(s.name, s.status, s.tool_count, s.last_error) for s in manager.statuses()]
    print(f"start-up, three stdio servers: {startup * 1000:.0f} ms; {states}")
    tool = next(t for t in manager.tools() if t.name == "t__peek")
    session = manager._servers["t"].session  # noqa: SLF001 - the direct client call to compare against
    direct: list[float] = []
    wrapped: list[float] = []
    for _ in range(n):
        t1 = time.perf_counter()
        await session.call_tool("peek", {})
        direct.append(time.perf_counter() - t1)
        t1 = time.perf_counter()
        await tool.invoke_async()
        wrapped.append(time.perf_counter() - t1)
    d, w = statistics.median(direct), statistics.median(wrapped)
    print(f"direct mcp call_tool: median {d * 1e3:.3f} ms; through countersign's tool: {w * 1e3:.3f} ms")
    print(f"overhead {(w - d) * 1e3:.3f} ms (n={n})")
    await manager.aclose()
    figures = {
        "calls": n,
        "startup_three_servers_ms": round(startup * 1000, 1),
        "direct_median_ms": round(d * 1e3, 4),
        "countersign_median_ms": round(w * 1e3, 4),
        "overhead_ms": round((w - d) * 1e3, 4),
    }
    print(json.dumps(figures))  # the bench convention: one JSON object on the last line


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))

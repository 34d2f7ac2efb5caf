"""``serve`` in Socket Mode with Slack unreachable: it listens, says why it is not ready, and retries quietly.

A real ``countersign serve`` process whose Slack Web API URL is a port of 127.0.0.1 where nothing listens
(every connection refused, as with Slack down or blocked). Before, the HTTP server never started and the SDK
logged a traceback every 10 s.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.fakes.serve_processes import ServeCluster

pytestmark = pytest.mark.asyncio


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_socket_mode_with_slack_unreachable_serves_http_and_retries_one_line_per_attempt(
    tmp_path: Path,
) -> None:
    unreachable = f"http://127.0.0.1:{_closed_port()}/api/"
    async with ServeCluster.open(tmp_path) as cluster:
        proc = await cluster.start(
            "socket", env={"SLACK_APP_TOKEN": "xapp-unreachable", "COUNTERSIGN_SLACK_API_URL": unreachable}
        )
        async with cluster.session.get(f"{proc.url}/healthz") as health:
            assert health.status == 200
        async with cluster.session.get(f"{proc.url}/readyz") as readiness:
            assert readiness.status == 503
            problems = (await readiness.json())["problems"]
        assert any("Socket Mode connection is not open" in p for p in problems), problems
        await cluster.wait_until(lambda: _attempts(proc.log) >= 3, "three attempts logged")
        lines = list(proc.log)
        assert proc.running
    assert not any("Traceback" in line for line in lines), "\n".join(lines)
    attempts = [line for line in lines if "socket mode could not connect (attempt" in line]
    assert [f"attempt {n}," in line for n, line in enumerate(attempts[:3], start=1)] == [True] * 3


def _attempts(lines: list[str]) -> int:
    return sum("socket mode could not connect (attempt" in line for line in lines)

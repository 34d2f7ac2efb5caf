"""``countersign serve`` recovers after its surfaces are registered, so the notice reaches the thread."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bot.messages import ChatMessage
from storage import ThreadAddress, open_storage
from tests.fakes.slack_api import FakeSlackAPI
from tests.unit.bot.test_cli import clean_env

CHANNEL = "C0OPS"
THREAD_TS = "1700000000.000100"


def crashed_run_in_a_slack_thread(db_path: Path, team_id: str) -> None:
    """A run whose process died during the model call, its lease long expired."""
    key = f"slack:{team_id}:{CHANNEL}:{THREAD_TS}"
    with open_storage(db_path) as storage:
        storage.inbox.enqueue(
            ThreadAddress(key, "slack", team_id, CHANNEL, THREAD_TS),
            "U0ALICE",
            ChatMessage.from_user("hello").to_dict(),
        )
        expired = datetime.now(UTC) - timedelta(minutes=5)
        assert storage.inbox.start_next(key, "run-crashed", "dead-host-1-abc", expired) is not None


async def test_serve_tells_the_thread_about_a_run_it_recovered_at_start(tmp_path: Path) -> None:
    async with FakeSlackAPI() as slack:
        crashed_run_in_a_slack_thread(tmp_path / "cs.db", slack.team_id)
        env = clean_env(
            tmp_path,
            SLACK_BOT_TOKEN="xoxb-test-token",
            SLACK_SIGNING_SECRET="secret",
            COUNTERSIGN_SLACK_API_URL=slack.base_url,
            COUNTERSIGN_SHUTDOWN_GRACE_SECONDS="1",
        )
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            cwd=tmp_path,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            # The deadline counts the process's start-up (imports: ~1.5 s alone, a minute on a loaded 2-core box).
            posts = await slack.wait_for(
                "chat.postMessage", count=2, where=lambda c: c.args.get("thread_ts") == THREAD_TS, seconds=120
            )
            assert "restarted" in posts[0].args["text"]
            began = time.monotonic()
            process.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(process.communicate(), 30)
            assert time.monotonic() - began < 10
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        assert process.returncode == 0, stderr.decode()
        assert "Traceback" not in stderr.decode()
        with open_storage(tmp_path / "cs.db") as storage:
            assert storage.runs.get("run-crashed").status == "finished"
            assert storage.outbox.undelivered() == []

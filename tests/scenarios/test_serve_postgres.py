"""Two ``countersign serve`` replicas on one PostgreSQL schema: one dies mid-tool, the other takes the run over.

Real processes, real HTTP: Slack's Web API and the model are the fakes, the database is the test
server. Replica A is armed with the ``after_ledger`` failpoint, so it stops exactly like ``kill -9``
right after the call's ledger entry says ``executing``; replica B's sweep finds the run once A's lease
has expired, never re-runs the call (its outcome is unknown) and tells the thread so.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psycopg

from adapters.slack.plugin import EVENTS_PATH
from bot.agent.tool_runner import OUTCOME_UNKNOWN
from bot.failpoints import FAILPOINT_EXIT_CODE
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.slack_requests import SlackRequests
from tests.fakes.slack_stack import button_values
from tests.unit.bot.test_cli import clean_env

SECRET = "replica-signing-secret"
CHANNEL = "C0OPS"
ALICE = "U0ALICE"


class Replica:
    """One ``countersign serve`` process; its log is read as it comes, so its pipe never fills."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.log: list[str] = []
        self.url: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, folder: Path, env: dict[str, str]) -> Replica:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            cwd=folder,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(process)

    async def _read(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            line = raw.decode(errors="replace")
            self.log.append(line)
            if not self.url.done() and (match := re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)):
                self.url.set_result(match.group(1))

    async def stop(self) -> int:
        """SIGTERM (if still running), then its exit status."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(self.process.wait(), 30)
        finally:
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()
        await self.reader
        return code


def replica_env(postgres_url: str, slack: FakeSlackAPI, llm: FakeOpenAIServer) -> dict[str, str]:
    """What both replicas share: the database, the fakes, and short leases and sweeps."""
    return {
        "COUNTERSIGN_DATABASE_URL": postgres_url,
        "SLACK_BOT_TOKEN": "xoxb-test-token",
        "SLACK_SIGNING_SECRET": SECRET,
        "COUNTERSIGN_SLACK_API_URL": slack.base_url,
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "test",
        "COUNTERSIGN_MODEL": "fake-model",
        "COUNTERSIGN_LEASE_SECONDS": "1",
        "COUNTERSIGN_HEARTBEAT_SECONDS": "0.3",
        "COUNTERSIGN_SWEEP_SECONDS": "0.1",
        "COUNTERSIGN_SHUTDOWN_GRACE_SECONDS": "0",
    }


@dataclass
class Crashed:
    """Replica A died at its failpoint on a mention sent to it; replica B is stopped (SIGSTOP) until :meth:`thaw`."""

    a: Replica
    b: Replica
    url_b: str
    mention: dict[str, Any]
    session: aiohttp.ClientSession
    team_id: str
    code_b: int | None = None

    def thaw(self) -> None:
        """Let B run: its sweep finds what A left."""
        self.b.process.send_signal(signal.SIGCONT)

    def to_b(self) -> SlackRequests:
        """Signed Slack requests to B."""
        return SlackRequests(self.url_b + EVENTS_PATH, SECRET, self.session, team_id=self.team_id)


@asynccontextmanager
async def crashed_at(
    failpoint: str, text: str, tmp_path: Path, postgres_url: str, slack: FakeSlackAPI, llm: FakeOpenAIServer
) -> AsyncIterator[Crashed]:
    """Two replicas on one schema; A, armed with ``failpoint``, gets the mention ``text`` and dies there.

    B waits (SIGSTOP) until A stopped at its failpoint: a stall of A's on a loaded box would otherwise let B's
    sweep take the run over before A reached the point, and A would never reach it. Both are stopped at the end;
    B's exit status is in ``code_b`` afterwards.
    """
    common = replica_env(postgres_url, slack, llm)
    a = await Replica.start(
        tmp_path, clean_env(tmp_path, **common, COUNTERSIGN_INSTANCE_ID="replica-a", COUNTERSIGN_FAILPOINT=failpoint)
    )
    b = await Replica.start(tmp_path, clean_env(tmp_path, **common, COUNTERSIGN_INSTANCE_ID="replica-b"))
    crashed = None
    try:
        url_a = await asyncio.wait_for(a.url, 30)
        url_b = await asyncio.wait_for(b.url, 30)
        b.process.send_signal(signal.SIGSTOP)
        async with aiohttp.ClientSession() as session:
            to_a = SlackRequests(url_a + EVENTS_PATH, SECRET, session, team_id=slack.team_id)
            mention = to_a.mention(ALICE, CHANNEL, text)
            try:
                await to_a.event(mention)
            except aiohttp.ClientError:
                pass  # A may stop before its answer is sent: the event is in its inbox either way
            assert await asyncio.wait_for(a.process.wait(), 30) == FAILPOINT_EXIT_CODE, "".join(a.log)
            crashed = Crashed(a, b, url_b, mention, session, slack.team_id)
            yield crashed
    finally:
        if b.process.returncode is None:
            b.process.send_signal(signal.SIGCONT)  # a stopped process would not act on SIGTERM
        await a.stop()
        code_b = await b.stop()
        if crashed is not None:
            crashed.code_b = code_b


async def test_a_replica_killed_while_its_tool_runs_is_taken_over_by_another_that_never_reruns_the_tool(
    tmp_path, postgres_url
):
    async with FakeSlackAPI() as slack, FakeOpenAIServer() as llm:
        llm.enqueue_tool_calls([("read_file", {"path": "notes.txt"})])
        llm.enqueue_text("I could not tell whether that worked.")
        async with crashed_at(
            "after_ledger", "<@U0BOT> what is in notes.txt?", tmp_path, postgres_url, slack, llm
        ) as crashed:
            crashed.thaw()
            in_thread = lambda call: call.args.get("thread_ts") == crashed.mention["ts"]  # noqa: E731
            posts = await slack.wait_for("chat.postMessage", count=2, where=in_thread, seconds=20)

    texts = [p.args["text"] for p in posts]
    assert "restarted" in texts[0] and "read_file is unknown" in texts[0], texts
    assert texts[1] == "I could not tell whether that worked.", texts
    assert crashed.code_b == 0, "".join(crashed.b.log)
    assert "Traceback" not in "".join(crashed.b.log)
    # The model saw the call's outcome as unknown; the call itself has one ledger entry, never re-run.
    assert len(llm.requests) == 2
    assert OUTCOME_UNKNOWN in str(llm.requests[1]["messages"][-1])
    with psycopg.connect(postgres_url) as conn:
        ledger = conn.execute("SELECT tool_name, status, result #>> '{}' FROM ledger").fetchall()
        runs = conn.execute("SELECT status, owner, recoveries FROM runs").fetchall()
    assert ledger == [("read_file", "failed", OUTCOME_UNKNOWN)]
    assert runs == [("finished", None, 1)]


async def test_a_replica_killed_before_posting_its_approval_card_leaves_it_owed_and_another_posts_it(
    tmp_path, postgres_url
):
    async with FakeSlackAPI() as slack, FakeOpenAIServer() as llm:
        llm.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
        llm.enqueue_text("Deleted old.log for you.")
        async with crashed_at("after_pause", "<@U0BOT> delete old.log", tmp_path, postgres_url, slack, llm) as crashed:
            in_thread = lambda call: call.args.get("thread_ts") == crashed.mention["ts"]  # noqa: E731
            card_of = lambda call: in_thread(call) and bool(call.args.get("blocks"))  # noqa: E731
            assert slack.calls_to("chat.postMessage", card_of) == [], "A died before posting its card"
            crashed.thaw()

            [card] = await slack.wait_for("chat.postMessage", where=card_of, seconds=20)
            [approval_id] = button_values(card.args["blocks"], "cs_approve")
            reply = await crashed.to_b().click(
                "cs_approve",
                approval_id,
                user=ALICE,
                channel=CHANNEL,
                message_ts=card.response["ts"],
                thread_ts=crashed.mention["ts"],
            )
            assert reply.status == 200
            answered = lambda call: in_thread(call) and call.args.get("text") == "Deleted old.log for you."  # noqa: E731
            await slack.wait_for("chat.postMessage", where=answered, seconds=20)
            await settled(postgres_url)

    assert crashed.code_b == 0, "".join(crashed.b.log)
    assert "Traceback" not in "".join(crashed.b.log)
    assert len(slack.calls_to("chat.postMessage", card_of)) == 1, "the card posted once, by B"
    with psycopg.connect(postgres_url) as conn:
        ledger = conn.execute("SELECT tool_name, status FROM ledger").fetchall()
        runs = conn.execute("SELECT status FROM runs").fetchall()
    assert ledger == [("delete_file", "done")], "approved once, run once"
    assert runs == [("finished",)]


async def settled(postgres_url: str, seconds: float = 20.0) -> None:
    """Wait until every run has ended and every owed message (the card, the answer) is marked delivered."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
            owed = await (await conn.execute("SELECT key FROM outbox WHERE delivered_at IS NULL")).fetchall()
            active = await (
                await conn.execute(
                    "SELECT run_id FROM runs WHERE status NOT IN ('finished', 'failed', 'expired', 'stopped')"
                )
            ).fetchall()
        if not owed and not active:
            return
        assert asyncio.get_running_loop().time() < deadline, f"not settled: owed {owed}, active {active}"
        await asyncio.sleep(0.05)  # polling the database for a condition, with a deadline

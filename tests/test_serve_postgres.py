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
from pathlib import Path

import aiohttp
import psycopg

from adapters.slack.plugin import EVENTS_PATH
from bot.agent.tool_runner import OUTCOME_UNKNOWN
from bot.failpoints import FAILPOINT_EXIT_CODE
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.slack_requests import SlackRequests
from tests.fakes.slack_stack import button_values
from tests.test_cli import clean_env

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
            sys.executable, "-m", "bot.cli", "serve", "--host", "127.0.0.1", "--port", "0",
            cwd=folder, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
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
        "COUNTERSIGN_DATABASE_URL": postgres_url, "SLACK_BOT_TOKEN": "xoxb-test-token",
        "SLACK_SIGNING_SECRET": SECRET, "COUNTERSIGN_SLACK_API_URL": slack.base_url,
        "OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": "test", "COUNTERSIGN_MODEL": "fake-model",
        "COUNTERSIGN_LEASE_SECONDS": "1", "COUNTERSIGN_HEARTBEAT_SECONDS": "0.3",
        "COUNTERSIGN_SWEEP_SECONDS": "0.1", "COUNTERSIGN_SHUTDOWN_GRACE_SECONDS": "0",
    }


async def test_a_replica_killed_while_its_tool_runs_is_taken_over_by_another_that_never_reruns_the_tool(
    tmp_path, postgres_url
):
    async with FakeSlackAPI() as slack, FakeOpenAIServer() as llm:
        llm.enqueue_tool_calls([("read_file", {"path": "notes.txt"})])
        llm.enqueue_text("I could not tell whether that worked.")
        common = replica_env(postgres_url, slack, llm)
        a = await Replica.start(tmp_path, clean_env(
            tmp_path, **common, COUNTERSIGN_INSTANCE_ID="replica-a", COUNTERSIGN_FAILPOINT="after_ledger"
        ))
        b = await Replica.start(tmp_path, clean_env(tmp_path, **common, COUNTERSIGN_INSTANCE_ID="replica-b"))
        try:
            url_a = await asyncio.wait_for(a.url, 30)
            await asyncio.wait_for(b.url, 30)
            # B waits (SIGSTOP) until A stopped at its failpoint: a stall of A's on a loaded box would otherwise
            # let B's sweep take the run over before A reached the point, and A would never reach it.
            b.process.send_signal(signal.SIGSTOP)
            async with aiohttp.ClientSession() as session:
                requests = SlackRequests(url_a + EVENTS_PATH, SECRET, session, team_id=slack.team_id)
                mention = requests.mention(ALICE, CHANNEL, "<@U0BOT> what is in notes.txt?")
                try:
                    await requests.event(mention)
                except aiohttp.ClientError:
                    pass  # A may stop before its answer is sent: the event is in its inbox either way
            assert await asyncio.wait_for(a.process.wait(), 30) == FAILPOINT_EXIT_CODE, "".join(a.log)
            b.process.send_signal(signal.SIGCONT)

            in_thread = lambda call: call.args.get("thread_ts") == mention["ts"]  # noqa: E731
            posts = await slack.wait_for("chat.postMessage", count=2, where=in_thread, seconds=20)
        finally:
            if b.process.returncode is None:
                b.process.send_signal(signal.SIGCONT)  # a stopped process would not act on SIGTERM
            await a.stop()
            code_b = await b.stop()

    texts = [p.args["text"] for p in posts]
    assert "restarted" in texts[0] and "read_file is unknown" in texts[0], texts
    assert texts[1] == "I could not tell whether that worked.", texts
    assert code_b == 0, "".join(b.log)
    assert "Traceback" not in "".join(b.log)
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
        common = replica_env(postgres_url, slack, llm)
        a = await Replica.start(tmp_path, clean_env(
            tmp_path, **common, COUNTERSIGN_INSTANCE_ID="replica-a", COUNTERSIGN_FAILPOINT="after_pause"
        ))
        b = await Replica.start(tmp_path, clean_env(tmp_path, **common, COUNTERSIGN_INSTANCE_ID="replica-b"))
        try:
            url_a = await asyncio.wait_for(a.url, 30)
            url_b = await asyncio.wait_for(b.url, 30)
            b.process.send_signal(signal.SIGSTOP)  # B sweeps only once A has died with the pause stored
            async with aiohttp.ClientSession() as session:
                mention = SlackRequests(url_a + EVENTS_PATH, SECRET, session, team_id=slack.team_id).mention(
                    ALICE, CHANNEL, "<@U0BOT> delete old.log"
                )
                try:
                    await SlackRequests(url_a + EVENTS_PATH, SECRET, session, team_id=slack.team_id).event(mention)
                except aiohttp.ClientError:
                    pass  # A may stop before its answer is sent: the event is in its inbox either way
                assert await asyncio.wait_for(a.process.wait(), 30) == FAILPOINT_EXIT_CODE, "".join(a.log)
                in_thread = lambda call: call.args.get("thread_ts") == mention["ts"]  # noqa: E731
                card_of = lambda call: in_thread(call) and bool(call.args.get("blocks"))  # noqa: E731
                assert slack.calls_to("chat.postMessage", card_of) == [], "A died before posting its card"
                b.process.send_signal(signal.SIGCONT)

                [card] = await slack.wait_for("chat.postMessage", where=card_of, seconds=20)
                [approval_id] = button_values(card.args["blocks"], "cs_approve")
                reply = await SlackRequests(url_b + EVENTS_PATH, SECRET, session, team_id=slack.team_id).click(
                    "cs_approve", approval_id, user=ALICE, channel=CHANNEL, message_ts=card.response["ts"],
                    thread_ts=mention["ts"],
                )
                assert reply.status == 200
                answered = lambda call: in_thread(call) and call.args.get("text") == "Deleted old.log for you."  # noqa: E731
                await slack.wait_for("chat.postMessage", where=answered, seconds=20)
                await settled(postgres_url)
        finally:
            if b.process.returncode is None:
                b.process.send_signal(signal.SIGCONT)
            await a.stop()
            code_b = await b.stop()

    assert code_b == 0, "".join(b.log)
    assert "Traceback" not in "".join(b.log)
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
            active = await (await conn.execute(
                "SELECT run_id FROM runs WHERE status NOT IN ('finished', 'failed', 'expired', 'stopped')"
            )).fetchall()
        if not owed and not active:
            return
        assert asyncio.get_running_loop().time() < deadline, f"not settled: owed {owed}, active {active}"
        await asyncio.sleep(0.05)  # polling the database for a condition, with a deadline

"""``GET /metrics`` and ``GET /readyz`` of a real Slack deployment (Bolt, the engine, a SQLite file, fake APIs).

Metrics are read the way Prometheus reads them: the text format parsed by ``prometheus_client``'s parser.
"""

from __future__ import annotations

import asyncio
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.llm import OpenAIChatGenerator, ScriptedChatGenerator
from tests.adapters.slack.test_approvals import CHANNEL, Ops, ask
from tests.fakes.clock import Clock
from tests.fakes.engine_kit import says
from tests.fakes.openai_server import DEFAULT_USAGE, FakeOpenAIServer
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.slack_stack import SlackStack, button_values
from tests.fakes.teams_stack import TeamsStack

ALICE = "U0ALICE"


async def start(tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer, clock: Clock) -> SlackStack:
    generator = OpenAIChatGenerator(api_key="test", api_base_url=openai.base_url, max_retries=0)
    return await SlackStack.start(
        db_path=tmp_path / "cs.db",
        slack=slack,
        generator=generator,
        tools=Ops().tools(),
        clock=clock,
        default_ttl_seconds=3600,
    )


@pytest.fixture
async def stack(tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer, clock: Clock):
    running = await start(tmp_path, slack, openai, clock)
    yield running
    await running.stop()


async def scrape(stack: SlackStack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics`` as ``{(name, sorted labels): value}``."""
    async with stack.session.get(stack.server.make_url("/metrics")) as response:
        assert response.status == 200
        assert response.content_type == "text/plain"
        text = await response.text()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_one_approval_flow_moves_the_metrics(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, clock: Clock
):
    before = await scrape(stack)
    assert value(before, "countersign_approvals_pending", tool="delete_file") == 0
    assert value(before, "countersign_runs_total", status="finished") == 0

    openai.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
    openai.enqueue_text("Deleted old.log.")
    mention_ts, approval = await ask(stack, slack, "delete old.log")
    paused = await scrape(stack)
    assert value(paused, "countersign_approvals_pending", tool="delete_file") == 1
    assert value(paused, "countersign_llm_latency_seconds_count") == 1
    assert value(paused, "countersign_tool_executions_total", tool="delete_file") == 0
    # The run paused: it holds no place among the process's working runs, and nothing waits for one.
    assert ("countersign_runs_admitted", ()) in paused
    assert value(paused, "countersign_runs_admitted") == value(paused, "countersign_runs_waiting_turn") == 0

    clock.now += timedelta(minutes=2)  # the approver takes two minutes
    [approval_id] = button_values(approval.args["blocks"], "cs_approve")
    for _click in range(2):  # the second click is refused, and counted as such
        await stack.requests.click(
            "cs_approve",
            approval_id,
            user=ALICE,
            channel=CHANNEL,
            message_ts=approval.response["ts"],
            thread_ts=mention_ts,
        )
        await stack.settle()

    after = await scrape(stack)
    assert value(after, "countersign_approvals_pending", tool="delete_file") == 0
    assert value(after, "countersign_decisions_total", action="confirm", outcome="recorded") == 1
    assert value(after, "countersign_decisions_total", action="confirm", outcome="AlreadyDecided") == 1
    assert value(after, "countersign_decision_wait_seconds_count") == 1
    assert value(after, "countersign_decision_wait_seconds_sum") == pytest.approx(120)
    assert value(after, "countersign_decision_wait_seconds_bucket", le="60.0") == 0
    assert value(after, "countersign_decision_wait_seconds_bucket", le="300.0") == 1
    assert value(after, "countersign_runs_total", status="finished") == 1
    assert value(after, "countersign_tool_executions_total", tool="delete_file") == 1
    assert value(after, "countersign_tool_failures_total", tool="delete_file") == 0
    assert value(after, "countersign_tool_duration_seconds_count", tool="delete_file") == 1
    assert value(after, "countersign_llm_latency_seconds_count") == 2
    assert value(after, "countersign_llm_tokens_total", kind="prompt") == 2 * DEFAULT_USAGE["prompt_tokens"]
    assert value(after, "countersign_llm_tokens_total", kind="completion") == (2 * DEFAULT_USAGE["completion_tokens"])
    assert value(after, "countersign_inbox_depth") == 0
    # No label carries a user, a thread or an argument.
    labels = {v for (_name, pairs) in after for _k, v in pairs}
    assert not labels & {ALICE, CHANNEL, mention_ts, "old.log", approval_id}


async def test_slack_rate_limits_and_errors_are_counted(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer
):
    slack.answer_status("chat.postMessage", 429, headers={"Retry-After": "0"})
    slack.failures["assistant.threads.setStatus"] = "missing_scope"
    openai.enqueue_text("hello")
    await stack.requests.event(stack.requests.mention(ALICE, CHANNEL, f"<@{slack.bot_user_id}> hi"))
    await slack.wait_for("chat.postMessage", count=2)  # the 429, then the retry
    await stack.settle()
    samples = await scrape(stack)
    assert value(samples, "countersign_platform_rate_limits_total", platform="slack") == 1
    assert value(samples, "countersign_platform_api_errors_total", platform="slack", kind="rate_limited") == 1
    assert value(samples, "countersign_platform_api_errors_total", platform="slack", kind="api_error") >= 1


async def test_readyz_is_ready_with_a_writable_database_and_slack_authenticated(stack: SlackStack):
    async with stack.session.get(stack.server.make_url("/readyz")) as response:
        assert (response.status, await response.json()) == (200, {"status": "ready"})


async def test_readyz_is_503_while_the_database_is_read_only_and_healthz_stays_200(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, tmp_path: Path
):
    db = tmp_path / "cs.db"
    # Immutable even for root (the suite runs as root in CI): a fresh connection cannot write to it.
    await asyncio.to_thread(subprocess.run, ["chattr", "+i", str(db)], check=True)
    try:
        async with stack.session.get(stack.server.make_url("/readyz")) as response:
            assert response.status == 503
            body = await response.json()
        assert body["status"] == "not ready"
        [problem] = body["problems"]
        assert problem.startswith("database: not writable")
        async with stack.session.get(stack.server.make_url("/healthz")) as response:
            assert response.status == 200
    finally:
        await asyncio.to_thread(subprocess.run, ["chattr", "-i", str(db)], check=True)
    async with stack.session.get(stack.server.make_url("/readyz")) as response:
        assert response.status == 200


async def test_readyz_is_503_while_slack_auth_fails_and_ready_once_it_passes(
    tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer
):
    slack.failures["auth.test"] = "fatal_error"  # Slack unwell (not a refused token, which stops serve)
    stack = await start(tmp_path, slack, openai, Clock())
    try:
        async with stack.session.get(stack.server.make_url("/readyz")) as response:
            assert response.status == 503
            assert (await response.json())["problems"] == ["slack: auth.test failed (fatal_error)"]
        del slack.failures["auth.test"]
        async with stack.session.get(stack.server.make_url("/readyz")) as response:
            assert response.status == 200
    finally:
        await stack.stop()


async def test_teams_connector_errors_are_counted(tmp_path: Path, fakes):
    teams = await TeamsStack.open(tmp_path, *fakes, replies=[says("Hello."), says("Hello again.")])
    try:
        teams.connector.fail_with = 429
        await teams.say("hi")
        await teams.engine.wait_idle()
        teams.connector.fail_with = 503
        await teams.say("hi again")
        await teams.engine.wait_idle()
        async with teams.session.get(f"{teams.url}/metrics") as response:
            samples = {
                (s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(await response.text())
                for s in family.samples
            }
        assert value(samples, "countersign_platform_rate_limits_total", platform="teams") >= 1
        assert value(samples, "countersign_platform_api_errors_total", platform="teams", kind="server_error") >= 1
        async with teams.session.get(f"{teams.url}/readyz") as response:
            assert (response.status, await response.json()) == (200, {"status": "ready"})
    finally:
        await teams.aclose()


async def test_readyz_in_socket_mode_is_ready_while_the_socket_is_open(tmp_path: Path, slack: FakeSlackAPI):
    stack = await SlackStack.start(
        db_path=tmp_path / "cs.db",
        slack=slack,
        generator=ScriptedChatGenerator([]),
        tools=Ops().tools(),
        slack_signing_secret=None,
        slack_app_token="xapp-test-token",
    )
    try:
        async with stack.session.get(stack.server.make_url("/readyz")) as response:
            assert (response.status, await response.json()) == (200, {"status": "ready"})
        # Slack drops the connection and refuses new ones: the process is alive but cannot receive events.
        slack.failures["apps.connections.open"] = "internal_error"
        await slack.drop_sockets()
        problems = None
        for _attempt in range(200):  # the client notices the closed socket on its next read
            async with stack.session.get(stack.server.make_url("/readyz")) as response:
                if response.status == 503:
                    problems = (await response.json())["problems"]
                    break
            await asyncio.sleep(0.025)
        assert problems == ["slack: the Socket Mode connection is not open"]
    finally:
        await stack.stop()

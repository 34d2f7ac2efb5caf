"""MCP elicitation and cancellation through the engine, against tests/fakes/mcp_server.py over stdio.

A server's ``elicitation/create`` during a tool call becomes a question in the run's thread (the recording
surface stands for Slack, Teams and the console here; their own suites render and translate it): the requester
(or an admin) accepts with values checked against the schema, declines, or lets it expire; anyone else is
refused. Stopping a run while a call is in flight sends ``notifications/cancelled`` (the server sees it) and the
ledger records the outcome as unknown.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.engine.errors import InvalidEdit, NotAllowedToAnswer, QuestionNotOpen
from bot.engine.model import AnswerRequest, DecisionRequest
from bot.mcp import parse_mcp_config
from tests.fakes.engine_kit import ADMIN, OTHER, REQUESTER, Harness, asks_for, bounded, echoes_results, tool_results
from tests.fakes.npm_packages import installed_bin
from tests.fakes.recording_surface import Asked, QuestionUpdate

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    spec = {"t": {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server", str(tmp_path / "log.jsonl")]}}
    spec["t"]["cwd"] = str(ROOT)
    harness = await Harness.open(tmp_path, replies=[], mcp_servers=tuple(parse_mcp_config({"mcpServers": spec}, {})))
    try:
        yield harness
    finally:
        await harness.close()


def server_log(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def logged(tmp_path: Path, event: dict[str, Any], within: float = 10.0) -> None:
    """Wait until the server logged ``event`` (polling the server's own log, bounded)."""

    async def poll() -> None:
        # Another process's file: there is no event here to wait on.
        while not any(event.items() <= entry.items() for entry in server_log(tmp_path)):  # noqa: ASYNC110
            await asyncio.sleep(0.02)

    await bounded(poll(), within)


async def asked(h: Harness, text: str, tool: str, **arguments: Any) -> tuple[asyncio.Task[None], Asked]:
    """Start a run whose call asks a question; the running message and the question as the surface got it."""
    h.generator.replies.extend([asks_for(tool, **arguments), echoes_results])
    running = asyncio.create_task(h.say(text))
    question = await h.surface.wait_for(lambda c: isinstance(c, Asked), within=20)
    return running, question


def result_of(messages: list, tool: str) -> tuple[str, bool]:
    [(_, text, error)] = [r for r in tool_results(messages) if r[0] == tool]
    return text, error


FORM = {"environment": "production", "replicas": "3", "canary": "true", "reason": "release 42"}


async def test_the_requester_accepts_and_the_server_gets_the_typed_values(h: Harness, tmp_path: Path):
    running, question = await asked(h, "deploy api", "t__deploy", service="api")
    view = question.question
    assert (view.requester, view.source, view.tool_name, view.url) == (REQUESTER, "t", "t__deploy", None)
    assert view.message == "How should api be deployed?"
    fields = {f.name: f for f in view.fields}
    assert fields["environment"].choices == (("staging", "staging"), ("production", "production"))
    assert (fields["replicas"].kind, fields["canary"].kind, fields["reason"].kind) == ("integer", "boolean", "string")
    assert fields["replicas"].required and not fields["canary"].required

    secret = {**FORM, "api_token": "hunter2-very-secret"}
    reply = await h.engine.answer_question(AnswerRequest(view.question_id, REQUESTER, "accept", secret))
    await bounded(running, 20)

    assert "passed on" in reply
    assert result_of(await h.history(), "t__deploy") == ("deployed api to production x3 canary=True", False)
    [accepted] = [e for e in server_log(tmp_path) if e.get("event") == "accept"]
    assert (accepted["replicas"], accepted["canary"]) == (3, True)
    [update] = [c for c in h.surface.calls if isinstance(c, QuestionUpdate)]
    assert (update.question.status, update.question.answered_by, update.ref) == ("accepted", REQUESTER, question.ref)
    [asked_entry] = await h.audit("question asked")
    [answer_entry] = await h.audit("question accepted")
    assert asked_entry.details["fields"] == ["environment", "replicas", "canary", "reason", "api_token"]
    assert answer_entry.actor == REQUESTER and answer_entry.details["content"]["replicas"] == 3
    assert "hunter2" not in json.dumps(answer_entry.details)  # audited minus secrets
    assert [e["api_token"] for e in server_log(tmp_path) if e.get("event") == "accept"] == ["hunter2-very-secret"]


async def test_a_bad_value_gets_a_field_error_and_the_question_stays_open(h: Harness, tmp_path: Path):
    running, question = await asked(h, "deploy api", "t__deploy", service="api")
    qid = question.question.question_id
    with pytest.raises(InvalidEdit) as bad:
        await h.engine.answer_question(AnswerRequest(qid, REQUESTER, "accept", {**FORM, "replicas": "eleven"}))
    assert set(bad.value.errors) == {"replicas"}
    with pytest.raises(InvalidEdit) as too_many:
        await h.engine.answer_question(AnswerRequest(qid, REQUESTER, "accept", {**FORM, "replicas": "11"}))
    assert set(too_many.value.errors) == {"replicas"}
    with pytest.raises(InvalidEdit) as not_a_choice:
        await h.engine.answer_question(AnswerRequest(qid, REQUESTER, "accept", {**FORM, "environment": "moon"}))
    assert set(not_a_choice.value.errors) == {"environment"}
    assert not any(e.get("event") == "accept" for e in server_log(tmp_path))  # nothing reached the server

    await h.engine.answer_question(AnswerRequest(qid, REQUESTER, "accept", {**FORM, "canary": None}))
    await bounded(running, 20)
    assert result_of(await h.history(), "t__deploy")[0] == "deployed api to production x3 canary=False"


async def test_decline_tells_the_server_decline(h: Harness, tmp_path: Path):
    running, question = await asked(h, "deploy api", "t__deploy", service="api")
    await h.engine.answer_question(AnswerRequest(question.question.question_id, REQUESTER, "decline"))
    await bounded(running, 20)
    assert result_of(await h.history(), "t__deploy") == ("not deployed (decline)", False)
    assert [e["event"] for e in server_log(tmp_path) if e["tool"] == "deploy"] == ["started", "decline"]
    assert (await h.audit("question declined"))[0].actor == REQUESTER


async def test_nobody_answering_within_the_ttl_declines(h: Harness, tmp_path: Path):
    running, question = await asked(h, "deploy api", "t__deploy", service="api")
    assert await h.engine.expire_questions() == 0  # not due yet
    h.clock.advance(seconds=h.engine.config.default_ttl_seconds + 1)
    assert await h.engine.expire_questions() == 1
    await bounded(running, 20)
    assert result_of(await h.history(), "t__deploy") == ("not deployed (decline)", False)
    [update] = [c for c in h.surface.calls if isinstance(c, QuestionUpdate)]
    assert update.question.status == "expired"
    with pytest.raises(QuestionNotOpen):
        await h.engine.answer_question(AnswerRequest(question.question.question_id, REQUESTER, "accept", FORM))


async def test_only_the_requester_or_an_admin_may_answer(h: Harness, tmp_path: Path):
    running, question = await asked(h, "deploy api", "t__deploy", service="api")
    qid = question.question.question_id
    with pytest.raises(NotAllowedToAnswer):
        await h.engine.answer_question(AnswerRequest(qid, OTHER, "accept", FORM))
    with pytest.raises(NotAllowedToAnswer):
        await h.engine.answer_question(AnswerRequest(qid, OTHER, "decline"))
    assert (await h.audit("answer refused"))[0].actor == OTHER
    assert [e["event"] for e in server_log(tmp_path) if e["tool"] == "deploy"] == ["started"]

    await h.engine.answer_question(AnswerRequest(qid, ADMIN, "accept", FORM))
    await bounded(running, 20)
    assert result_of(await h.history(), "t__deploy")[0].startswith("deployed api")


async def test_url_mode_is_a_link_never_a_form_field(h: Harness):
    running, question = await asked(h, "log in", "t__login")
    view = question.question
    assert view.url == "https://auth.example.com/device?code=ABC" and view.fields == ()
    await h.engine.answer_question(AnswerRequest(view.question_id, REQUESTER, "accept", {"url": "x"}))
    await bounded(running, 20)
    assert result_of(await h.history(), "t__login") == ("login accept", False)


async def test_a_question_outlasts_the_calls_timeout(tmp_path: Path):
    spec = {"t": {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server", str(tmp_path / "log.jsonl")]}}
    spec["t"].update(cwd=str(ROOT), timeout=1)
    cfg = tuple(parse_mcp_config({"mcpServers": spec}, {}))
    harness = await Harness.open(tmp_path, replies=[], mcp_servers=cfg)
    try:
        running, question = await asked(harness, "deploy api", "t__deploy", service="api")
        await logged(tmp_path, {"tool": "deploy", "event": "started"})
        # Longer than the 1 s timeout: the person's time does not count against the call.
        await asyncio.sleep(1.5)  # noqa: ASYNC110 - the elapsed time is what this test is about
        await harness.engine.answer_question(AnswerRequest(question.question.question_id, REQUESTER, "accept", FORM))
        await bounded(running, 20)
        assert result_of(await harness.history(), "t__deploy")[0].startswith("deployed api")
    finally:
        await harness.close()


async def test_stop_cancels_the_call_in_flight_and_its_outcome_is_unknown(h: Harness, tmp_path: Path):
    h.generator.replies.extend([asks_for("t__slow", seconds=60), echoes_results])
    running = asyncio.create_task(h.say("be slow"))
    await logged(tmp_path, {"tool": "slow", "event": "started"})

    sentence = await h.engine.request_stop(h.thread(), REQUESTER)
    await bounded(running, 20)

    assert "t__slow" in sentence and "cancelled" in sentence and "outcome is unknown" in sentence
    await logged(tmp_path, {"tool": "slow", "event": "cancelled"})  # the server got notifications/cancelled
    text, error = result_of(await h.history(), "t__slow")
    assert error and "outcome unknown" in text and f"cancelled because {REQUESTER} stopped the run" in text
    assert any("(Stopped.)" in r.text for r in h.surface.replies)
    [entry] = await h.audit("stopped")
    assert (await h.run_of(entry.subject)).status == "stopped"
    ledger = await h.engine.storage.ledger.get(f"{entry.subject}:{_call_id(await h.history(), 't__slow')}")
    assert ledger is not None and ledger.status == "failed" and "outcome unknown" in (ledger.result or "")


def _call_id(messages: list, tool: str) -> str:
    [call] = [c for m in messages for c in m.tool_calls if c.tool_name == tool]
    assert call.id is not None
    return call.id


async def test_server_everything_offers_its_elicitation_tool_and_gets_the_answer(tmp_path: Path):
    """The real @modelcontextprotocol/server-everything registers its elicitation tool only for a client that
    declares the capability; approved, its question reaches the requester, whose answer it echoes back."""
    everything = installed_bin(ROOT / "tests" / "npm" / "mcp") / "mcp-server-everything"
    cfg = tuple(parse_mcp_config({"mcpServers": {"all": {"command": str(everything), "args": ["stdio"]}}}, {}))
    harness = await Harness.open(tmp_path, replies=[], mcp_servers=cfg)
    try:
        assert harness.engine.mcp is not None
        assert "all__trigger-elicitation-request" in {t.name for t in harness.engine.mcp.tools()}
        harness.generator.replies.extend([asks_for("all__trigger-elicitation-request"), echoes_results])
        [approval] = await harness.paused_approvals("ask me things")
        await harness.engine.decide(
            DecisionRequest(approval.approval_id, REQUESTER, "confirm", place=approval.thread.place)
        )
        question = await harness.surface.wait_for(lambda c: isinstance(c, Asked), within=20)
        fields = {f.name: f for f in question.question.fields}
        assert fields["name"].required and fields["check"].kind == "boolean"
        assert ("hero-2", "Green Lantern") in fields["titledSingleSelectEnum"].choices
        assert ("pet-2", "Dogs") in fields["legacyTitledEnum"].choices
        assert fields["untitledMultipleSelectEnum"].kind == "array"
        with pytest.raises(InvalidEdit) as bad:
            await harness.engine.answer_question(
                AnswerRequest(question.question.question_id, REQUESTER, "accept", {"name": "Ana", "integer": "500"})
            )
        assert set(bad.value.errors) == {"integer"}
        values = {"name": "Ana Lima", "check": "true", "integer": "7", "untitledMultipleSelectEnum": ["Piano"]}
        await harness.engine.answer_question(AnswerRequest(question.question.question_id, REQUESTER, "accept", values))
        await bounded(harness.engine.wait_idle(), 20)
        text, error = result_of(await harness.history(), "all__trigger-elicitation-request")
        assert not error and "- Name: Ana Lima" in text and "- Favorite Integer: 7" in text
        assert "- Agreed to terms: true" in text
    finally:
        await harness.close()


async def test_stopping_while_a_question_waits_withdraws_it_and_cancels_the_call(h: Harness, tmp_path: Path):
    running, question = await asked(h, "deploy api", "t__deploy", service="api")

    sentence = await h.engine.request_stop(h.thread(), REQUESTER)
    await bounded(running, 20)

    assert "t__deploy" in sentence and "outcome is unknown" in sentence
    update = await h.surface.wait_for(lambda c: isinstance(c, QuestionUpdate), within=10)
    assert update.question.status == "withdrawn" and update.ref == question.ref
    with pytest.raises(QuestionNotOpen):
        await h.engine.answer_question(AnswerRequest(question.question.question_id, REQUESTER, "accept", FORM))
    text, error = result_of(await h.history(), "t__deploy")
    assert error and "outcome unknown" in text
    assert not any(e.get("event") == "accept" for e in server_log(tmp_path))

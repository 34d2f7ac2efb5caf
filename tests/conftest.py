"""Shared pytest fixtures for the countersign test suite."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.fakes.bot_connector import FakeBotConnector, FakeBotFrameworkIssuer, trust_issuer
from tests.fakes.clock import Clock
from tests.fakes.embedded_postgres import session_database_url
from tests.fakes.engine_kit import Harnesses
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.postgres import PostgresUnreachable, SchemaFactory
from tests.fakes.private_postgres import PrivateServerUnavailable
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.slack_stack import assert_every_payload_valid


@pytest.fixture(scope="session")
def postgres_schemas():
    """The test PostgreSQL server; every test that asks for it FAILS (never skips) when it cannot be reached.

    Without ``COUNTERSIGN_TEST_DATABASE_URL`` and with nothing on 127.0.0.1:5432, a throwaway server is
    started for the session and removed after it (tests/fakes/embedded_postgres.py).
    """
    try:
        url, embedded = session_database_url()
    except PrivateServerUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    factory = SchemaFactory(url)
    try:
        factory.check()
    except PostgresUnreachable as exc:
        factory.close()
        pytest.fail(str(exc), pytrace=False)
    try:
        yield factory
    finally:
        factory.close()
        if embedded is not None:
            embedded.close()


@pytest.fixture
def postgres_url(postgres_schemas) -> Iterator[str]:
    """A ``postgresql://`` URL whose ``search_path`` is a fresh, migrated schema of this test's own."""
    url = postgres_schemas.take()
    yield url
    postgres_schemas.release(url)


@pytest.fixture
async def openai() -> AsyncIterator[FakeOpenAIServer]:
    """A fake OpenAI-compatible endpoint (modules may define their own ``openai`` fixture instead)."""
    async with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlackAPI]:
    """A fake Slack Web API; every payload the bot sent is checked against Slack's limits at the end."""
    async with FakeSlackAPI() as api:
        yield api
        assert_every_payload_valid(api.calls)


@pytest.fixture
def clock() -> Clock:
    """The clock of a Slack stack, which the test moves (``clock.now += ...``)."""
    return Clock()


@pytest.fixture
async def fakes(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[FakeBotConnector, FakeBotFrameworkIssuer]]:
    """A fake Bot Connector and a token issuer the Agents SDK trusts, for the Teams suites."""
    async with FakeBotConnector() as connector, FakeBotFrameworkIssuer() as issuer:
        trust_issuer(monkeypatch, issuer)
        yield connector, issuer


@pytest.fixture
async def harnesses(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Harnesses]:
    """Engine harnesses on one folder, closed at the end.

    In a test that also asks for ``database_url`` or ``postgres_url`` they are closed first: the engines stop
    (and release their runs) before the test's PostgreSQL schema is dropped.
    """
    for database in ("database_url", "postgres_url"):
        if database in request.fixturenames:
            request.getfixturevalue(database)
    opened = Harnesses(tmp_path)
    yield opened
    await opened.aclose()


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest) -> str | None:
    """``None`` for SQLite, else a fresh PostgreSQL schema of the test's own: a test asking for it runs on both
    backends (open its engines with ``database_url=database_url``)."""
    return None if request.param == "sqlite" else request.getfixturevalue("postgres_url")

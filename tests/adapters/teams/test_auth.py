"""``POST /api/messages`` sits behind the SDK's real JWT validation; ``/healthz`` does not.

Tokens are signed with a key generated for the test and served as a JWKS by a fake Bot Framework
issuer on 127.0.0.1; the SDK's ``JwtTokenValidator`` fetches it, checks the signature, expiry and
audience exactly as in production.
"""

from __future__ import annotations

import logging

import pytest

from adapters.teams.plugin import ANONYMOUS_WARNING, TeamsPlugin, build_connections
from bot.config import Config
from tests.fakes.bot_connector import shared_key
from tests.fakes.engine_kit import says
from tests.fakes.teams_stack import APP_ID, TeamsStack, teams_settings


@pytest.fixture
async def stack(tmp_path, fakes):
    opened = await TeamsStack.open(tmp_path, *fakes, replies=[says("Hello.")])
    yield opened
    await opened.aclose()


async def assert_refused(stack: TeamsStack, status: int) -> None:
    await stack.settle()
    assert status == 401
    assert stack.connector.requests == []
    assert stack.generator.calls == []


async def test_a_valid_bot_framework_token_is_accepted(stack):
    status, _ = await stack.post(stack.message("hello"))
    await stack.settle()

    assert status == 202
    assert stack.connector.texts() == ["Hello."]
    assert stack.issuer.jwks_requests >= 1, "the signing key was fetched from the issuer's JWKS"


async def test_an_activity_whose_service_url_is_not_the_tokens_gets_401(stack):
    # A validly signed token for the real connector, on an activity that points replies somewhere else.
    activity = {**stack.message("hello"), "serviceUrl": "http://127.0.0.1:9/elsewhere"}
    status, body = await stack.post(activity)
    assert body == {"error": "the activity's serviceUrl does not match its token"}
    await assert_refused(stack, status)


async def test_a_service_url_differing_only_in_case_is_accepted(stack):
    activity = {**stack.message("hello"), "serviceUrl": stack.connector.base_url.upper()}
    status, _ = await stack.post(activity)
    await stack.settle()
    assert status == 202
    assert stack.connector.texts() == ["Hello."]


async def test_a_request_without_a_token_gets_401(stack):
    status, body = await stack.post(stack.message("hello"), token=None)
    assert body == {"error": "Authorization header not found"}
    await assert_refused(stack, status)


async def test_a_token_signed_with_another_key_gets_401(stack):
    forged = stack.token(signing_key=shared_key("attacker"))
    status, _ = await stack.post(stack.message("hello"), token=forged)
    await assert_refused(stack, status)


async def test_a_token_for_another_bot_gets_401(stack):
    other = stack.issuer.token(audience="another-bots-app-id", service_url=stack.connector.base_url)
    status, _ = await stack.post(stack.message("hello"), token=other)
    await assert_refused(stack, status)


async def test_an_expired_token_gets_401(stack):
    expired = stack.token(lifetime=-3600)
    status, _ = await stack.post(stack.message("hello"), token=expired)
    await assert_refused(stack, status)


async def test_garbage_and_non_bearer_authorization_get_401(stack):
    status, _ = await stack.post(stack.message("hello"), token="not-a-jwt")
    await assert_refused(stack, status)
    async with stack.session.post(
        f"{stack.url}/api/messages", json=stack.message("hello"), headers={"Authorization": "Basic dXNlcjpwYXNz"}
    ) as response:
        await assert_refused(stack, response.status)


async def test_a_card_click_without_a_valid_token_decides_nothing(stack):
    value = {"action": {"type": "Action.Execute", "verb": "approve", "data": {"approval_id": "x", "verb": "approve"}}}
    status, _ = await stack.post(stack.invoke(value), token=None)
    await assert_refused(stack, status)


async def test_healthz_needs_no_token(stack):
    async with stack.session.get(f"{stack.url}/healthz") as response:
        assert response.status == 200
        assert await response.json() == {"status": "ok"}


async def test_anonymous_mode_still_refuses_a_bad_token(tmp_path, fakes):
    anonymous = await TeamsStack.open(tmp_path, *fakes, replies=[says("Hello.")], anonymous=True)
    try:
        status, _ = await anonymous.post(anonymous.message("hello"), token="not-a-jwt")
        await assert_refused(anonymous, status)
    finally:
        await anonymous.aclose()


def test_teams_is_served_only_with_credentials_or_explicit_anonymous_mode():
    plugin = TeamsPlugin()
    assert not plugin.is_configured(Config())
    assert plugin.is_configured(Config(teams_settings=teams_settings()))
    assert plugin.is_configured(Config(teams_anonymous=True))


def test_credentials_configure_the_jwt_audience_and_keep_anonymous_access_off():
    auth, connections = build_connections(Config(teams_settings=teams_settings()))
    assert auth.CLIENT_ID == APP_ID and auth.ANONYMOUS_ALLOWED is False
    assert type(connections.get_default_connection()).__name__ == "MsalAuth"


def test_anonymous_mode_is_refused_unless_switched_on():
    with pytest.raises(ValueError, match="anonymous"):
        build_connections(Config())


async def test_anonymous_mode_is_announced_loudly_at_start(tmp_path, fakes, caplog):
    with caplog.at_level(logging.WARNING, logger="adapters.teams.plugin"):
        anonymous = await TeamsStack.open(tmp_path, *fakes, anonymous=True)
    await anonymous.aclose()
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [ANONYMOUS_WARNING]


# --- malformed tokens, unknown signing keys, anonymous mode kept visible ------------------------------------


@pytest.mark.parametrize(
    "token",
    [
        "eyJhbGciOiJub25lIn0.eyJhdWQiOiJ4In0.",  # alg none, no kid: a KeyError inside the SDK answered 500
        "eyJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJ4In0.c2ln",  # RS256 but no kid
        "e30.e30.",  # an empty header
    ],
)
async def test_a_token_without_a_signing_key_id_gets_401_and_one_log_line(stack, caplog, token):
    with caplog.at_level(logging.WARNING):
        status, body = await stack.post(stack.message("hello"), token=token)

    assert body == {"error": "Invalid token or authentication failed."}
    await assert_refused(stack, status)
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and lines[0].exc_info is None
    assert "rejected" in lines[0].getMessage()


async def test_made_up_signing_key_ids_refetch_the_keys_at_most_once_per_interval(stack):
    import jwt as pyjwt

    accepted, _ = await stack.post(stack.message("hello"))
    assert accepted == 202
    fetched = stack.issuer.jwks_requests

    def forged(kid: str) -> str:
        claims = {"aud": APP_ID, "iss": "https://api.botframework.com", "serviceurl": stack.connector.base_url}
        return pyjwt.encode(claims, shared_key("attacker"), algorithm="RS256", headers={"kid": kid})

    first, _ = await stack.post(stack.message("hello"), token=forged("made-up-1"))
    after_first = stack.issuer.jwks_requests
    statuses = [(await stack.post(stack.message("hello"), token=forged(f"made-up-{n}")))[0] for n in range(2, 12)]

    assert first == 401 and statuses == [401] * 10
    assert after_first - fetched <= 1, "one unknown kid may refetch the keys"
    assert stack.issuer.jwks_requests == after_first, "later unknown kids in the interval refetch nothing"
    again, _ = await stack.post(stack.message("hello"))
    assert again == 202, "a kid that validated before is not limited"


def test_anonymous_mode_with_credentials_is_refused():
    config = Config(teams_anonymous=True, teams_settings=teams_settings())

    assert any(
        "COUNTERSIGN_TEAMS_ANONYMOUS=1 cannot be used with Teams credentials" in p
        for p in config.incomplete_credentials()
    )
    with pytest.raises(ValueError, match="anonymous"):
        build_connections(config)


def test_anonymous_mode_listens_on_loopback_unless_an_address_is_given():
    from bot.cli import bind_address

    assert bind_address(Config(teams_anonymous=True), None) == "127.0.0.1"
    assert bind_address(Config(teams_anonymous=True), "0.0.0.0") == "0.0.0.0"
    assert bind_address(Config(teams_settings=teams_settings()), None) == "0.0.0.0"


async def test_anonymous_mode_shows_in_readyz_and_metrics(tmp_path, fakes):
    anonymous = await TeamsStack.open(tmp_path, *fakes, anonymous=True)
    try:
        async with anonymous.session.get(f"{anonymous.url}/readyz") as response:
            ready = await response.json()
        async with anonymous.session.get(f"{anonymous.url}/metrics") as response:
            metrics = await response.text()
    finally:
        await anonymous.aclose()
    assert ready["anonymous"] is True
    assert "countersign_teams_anonymous 1.0" in metrics


async def test_with_credentials_readyz_does_not_claim_anonymous(stack):
    async with stack.session.get(f"{stack.url}/readyz") as response:
        ready = await response.json()
    async with stack.session.get(f"{stack.url}/metrics") as response:
        metrics = await response.text()
    assert "anonymous" not in ready
    assert "countersign_teams_anonymous 0.0" in metrics


async def test_anonymous_mode_repeats_its_warning_while_it_stays_on(tmp_path):
    import asyncio

    from bot.engine.engine import Engine
    from bot.server import build_web_app

    reminders: list[str] = []
    seen_two = asyncio.Event()

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("still in anonymous mode"):
                reminders.append(record.getMessage())
                if len(reminders) >= 2:
                    seen_two.set()

    handler = Collect()
    logging.getLogger("adapters.teams.plugin").addHandler(handler)
    engine = await Engine.create(Config(db_path=tmp_path / "cs.db", teams_anonymous=True))
    plugin = TeamsPlugin()
    plugin.anonymous_reminder_seconds = 0.01
    try:
        await build_web_app(engine, engine.config, plugins=[plugin])
        await asyncio.wait_for(seen_two.wait(), timeout=10)
    finally:
        logging.getLogger("adapters.teams.plugin").removeHandler(handler)
        await plugin.close()
        await engine.stop()
    assert ANONYMOUS_WARNING in reminders[0]

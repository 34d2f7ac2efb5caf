"""A fake Bot Connector service and a fake Bot Framework token issuer: real HTTP on 127.0.0.1.

:class:`FakeBotConnector` answers what a bot sends to Teams' connector (the activity's
``serviceUrl``), like the real service, and records every request in :attr:`FakeBotConnector.requests`:

* ``POST /v3/conversations/{conversationId}/activities``            → a new message (``kind="send"``)
* ``POST /v3/conversations/{conversationId}/activities/{activityId}`` → a reply (``kind="reply"``)
* ``PUT  /v3/conversations/{conversationId}/activities/{activityId}`` → an update (``kind="update"``)

each answered ``{"id": ...}``. Tests wait for what they expect with :meth:`FakeBotConnector.wait_for`
(woken by each request, no polling sleeps).

:class:`FakeBotFrameworkIssuer` holds an RSA key pair, serves its public key as a JWKS document and
signs Bot Framework channel tokens (``iss=https://api.botframework.com``) with PyJWT.
:func:`trust_issuer` makes the SDK's ``JwtTokenValidator`` fetch the Bot Framework signing keys from
that JWKS instead of ``login.botframework.com`` — the rest of the SDK's validation runs unchanged.

::

    async with FakeBotConnector() as connector, FakeBotFrameworkIssuer() as issuer:
        trust_issuer(monkeypatch, issuer)
        token = issuer.token(audience="app-id", service_url=connector.base_url)
        ...
        update = await connector.wait_for(lambda r: r.kind == "update")
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.fakes.local_server import serve_locally

BOT_FRAMEWORK_ISSUER = "https://api.botframework.com"
_KEYS: dict[str, rsa.RSAPrivateKey] = {}


def shared_key(name: str = "default") -> rsa.RSAPrivateKey:
    """An RSA key generated once per test session (generating one takes tens of milliseconds)."""
    if name not in _KEYS:
        _KEYS[name] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return _KEYS[name]


@dataclass(frozen=True)
class ConnectorRequest:
    """One call the bot made to the connector."""

    kind: str
    method: str
    conversation_id: str
    activity_id: str | None
    body: dict[str, Any]
    authorization: str | None
    answered_id: str
    at: float = field(default_factory=time.monotonic)
    """When it arrived (monotonic seconds)."""

    @property
    def activity_type(self) -> str | None:
        """``message``, ``typing``, ..."""
        return self.body.get("type")

    @property
    def text(self) -> str | None:
        """The message text, if any."""
        return self.body.get("text")

    @property
    def stream_type(self) -> str | None:
        """``informative``, ``streaming`` or ``final`` for an activity of a streamed answer, else ``None``."""
        for entity in self.body.get("entities") or []:
            if entity.get("type") == "streaminfo":
                return entity.get("streamType") or "streaming"
        return None

    @property
    def cards(self) -> list[dict[str, Any]]:
        """The Adaptive Cards attached to the activity."""
        return [
            a["content"]
            for a in self.body.get("attachments") or []
            if a.get("contentType") == "application/vnd.microsoft.card.adaptive"
        ]


class FakeBotConnector:
    """The Bot Connector REST API a bot calls back into (see the module docstring)."""

    def __init__(self, fail_with: int | None = None) -> None:
        self.requests: list[ConnectorRequest] = []
        self.fail_with = fail_with
        """When set, every call is answered with this HTTP status (to test failures)."""
        self._ids = itertools.count(1)
        self._trouble: list[tuple[Callable[[ConnectorRequest], bool], int, dict[str, str]]] = []
        self._changed: asyncio.Condition | None = None
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        """The ``serviceUrl`` to put in activities."""
        return f"http://127.0.0.1:{self.port}/"

    async def start(self) -> FakeBotConnector:
        """Listen on an ephemeral port."""
        self._changed = asyncio.Condition()
        app = web.Application()
        app.router.add_post("/v3/conversations/{conversation_id}/activities", self._send)
        app.router.add_post("/v3/conversations/{conversation_id}/activities/{activity_id}", self._reply)
        app.router.add_put("/v3/conversations/{conversation_id}/activities/{activity_id}", self._update)
        self._runner, self.port = await serve_locally(app)
        return self

    async def stop(self) -> None:
        """Stop listening."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeBotConnector:
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    async def _record(self, request: web.Request, kind: str) -> web.Response:
        body = await request.json()
        activity_id = request.match_info.get("activity_id")
        answered = activity_id if kind == "update" and activity_id else f"bot-activity-{next(self._ids)}"
        entry = ConnectorRequest(
            kind=kind,
            method=request.method,
            conversation_id=request.match_info["conversation_id"],
            activity_id=activity_id,
            body=body,
            authorization=request.headers.get("Authorization"),
            answered_id=answered,
        )
        assert self._changed is not None
        async with self._changed:
            self.requests.append(entry)
            self._changed.notify_all()
        if self.fail_with is not None:
            return web.json_response({"error": {"code": "Failed", "message": "fake failure"}}, status=self.fail_with)
        for index, (matches, status, headers) in enumerate(self._trouble):
            if matches(entry):
                del self._trouble[index]
                body = {"error": {"code": "Throttled", "message": f"fake {status}"}}
                return web.json_response(body, status=status, headers=headers)
        return web.json_response({"id": answered})

    async def _send(self, request: web.Request) -> web.Response:
        return await self._record(request, "send")

    async def _reply(self, request: web.Request) -> web.Response:
        return await self._record(request, "reply")

    async def _update(self, request: web.Request) -> web.Response:
        return await self._record(request, "update")

    def answer_status(
        self, matches: Callable[[ConnectorRequest], bool], status: int, headers: dict[str, str] | None = None
    ) -> None:
        """Answer the next request that ``matches`` with HTTP ``status`` (e.g. 429 with ``Retry-After``); once."""
        self._trouble.append((matches, status, dict(headers or {})))

    # --- what tests look at ----------------------------------------------------------------------

    def streamed(self) -> list[ConnectorRequest]:
        """Every activity of a streamed answer (informative updates, text updates, final messages), in order."""
        return [r for r in self.requests if r.stream_type is not None]

    def posted(self) -> list[ConnectorRequest]:
        """New messages and replies (not updates), typing indicators left out."""
        return [r for r in self.requests if r.kind in ("send", "reply") and r.activity_type != "typing"]

    def updates(self) -> list[ConnectorRequest]:
        """Every ``PUT`` of an existing activity."""
        return [r for r in self.requests if r.kind == "update"]

    def typing(self) -> list[ConnectorRequest]:
        """Every typing indicator."""
        return [r for r in self.requests if r.activity_type == "typing"]

    def texts(self) -> list[str]:
        """The texts of the posted messages, in order."""
        return [r.text for r in self.posted() if r.text]

    def all_cards(self) -> list[dict[str, Any]]:
        """Every card the bot sent, posted or updated, in order."""
        return [card for r in self.requests for card in r.cards]

    async def wait_for(
        self, predicate: Callable[[ConnectorRequest], bool], count: int = 1, within: float = 10.0
    ) -> ConnectorRequest:
        """Wait until ``count`` recorded requests satisfy ``predicate``; return the last of them."""
        assert self._changed is not None

        def matches() -> list[ConnectorRequest]:
            return [r for r in self.requests if predicate(r)]

        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(matches()) >= count), within)
            return matches()[count - 1]


@dataclass
class FakeBotFrameworkIssuer:
    """Signs Bot Framework channel tokens and serves the matching JWKS (see the module docstring)."""

    key_id: str = "fake-botframework-key"
    private_key: rsa.RSAPrivateKey = field(default_factory=shared_key)
    jwks_requests: int = 0
    port: int | None = None
    _runner: web.AppRunner | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def jwks_url(self) -> str:
        """Where the public keys are served."""
        return f"http://127.0.0.1:{self.port}/v1/.well-known/keys"

    def jwks(self) -> dict[str, Any]:
        """The JWKS document: our one public key."""
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.private_key.public_key()))
        public.update({"kid": self.key_id, "use": "sig", "alg": "RS256"})
        return {"keys": [public]}

    async def _keys(self, _request: web.Request) -> web.Response:
        with self._lock:
            self.jwks_requests += 1
        return web.json_response(self.jwks())

    async def start(self) -> FakeBotFrameworkIssuer:
        """Serve the JWKS on an ephemeral port."""
        app = web.Application()
        app.router.add_get("/v1/.well-known/keys", self._keys)
        self._runner, self.port = await serve_locally(app)
        return self

    async def stop(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeBotFrameworkIssuer:
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    def token(
        self,
        audience: str,
        service_url: str,
        issuer: str = BOT_FRAMEWORK_ISSUER,
        lifetime: int = 3600,
        signing_key: rsa.RSAPrivateKey | None = None,
        **claims: Any,
    ) -> str:
        """A channel token like the Bot Framework sends with every activity."""
        now = int(time.time())
        payload = {
            "iss": issuer,
            "aud": audience,
            "serviceurl": service_url,
            "nbf": now - 5,
            "iat": now - 5,
            "exp": now + lifetime,
            **claims,
        }
        key = signing_key or self.private_key
        return jwt.encode(payload, key, algorithm="RS256", headers={"kid": self.key_id})


def trust_issuer(monkeypatch: Any, issuer: FakeBotFrameworkIssuer) -> None:
    """Make the SDK fetch the Bot Framework signing keys from ``issuer`` for the rest of the test.

    The SDK has no setting for the JWKS location: ``JwtTokenValidator`` maps the Bot Framework issuer
    to ``login.botframework.com`` and caches one ``PyJWKClient`` per JWKS URI in a class-level
    manager. We give it a fresh manager whose client for that URI reads our JWKS over HTTP.
    """
    from jwt import PyJWKClient
    from microsoft_agents.hosting.core.authorization import authentication_constants
    from microsoft_agents.hosting.core.authorization.jwt import jwt_token_validator as validator

    manager = validator._JwkClientManager()
    bot_framework_jwks = authentication_constants.AuthenticationConstants.PUBLIC_ABS_JWKS_URL
    manager._cache[bot_framework_jwks] = validator._JwkClientCacheEntry(PyJWKClient(issuer.jwks_url), threading.Lock())
    monkeypatch.setattr(validator.JwtTokenValidator, "_jwk_client_manager", manager)

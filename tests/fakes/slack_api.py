"""A fake Slack Web API for tests: real HTTP on 127.0.0.1, answers like Slack, records every call.

Point ``slack_sdk``'s ``AsyncWebClient(base_url=fake.base_url)`` (countersign:
``COUNTERSIGN_SLACK_API_URL``) at it. ``POST /api/<method>`` is answered like Slack for the methods
countersign uses (``auth.test``, ``chat.postMessage``, ``chat.update``, ``chat.postEphemeral``,
``views.open``, ``views.publish``, ``views.update``, ``reactions.add``, ``reactions.remove``,
``users.info``, ``assistant.threads.setStatus``, and the streaming methods ``chat.startStream``,
``chat.appendStream``, ``chat.stopStream``, whose text is kept per message in :attr:`FakeSlackAPI.streams`,
and refused once a stream is stopped); anything else gets ``{"ok": false, "error": "unknown_method"}``. Like Slack it
refuses messages with more than 50 blocks (``invalid_blocks``) or blocks too large in total
(``msg_blocks_too_long``), and a call without a token (``not_authed``) or, when ``tokens`` is set, with
a token it does not know (``invalid_auth``). ``POST /respond/<name>`` stands in for a slash command's
``response_url``; those calls are recorded under the method name ``"response_url"``.

Socket Mode too: ``apps.connections.open`` hands out ``ws://…/socket``; :meth:`FakeSlackAPI.socket_send`
pushes an envelope to the connected app and every frame the app sends back (its acks) is recorded under
the method name ``"socket"``.

Trouble on demand: :meth:`FakeSlackAPI.answer_status` answers the next calls of a method with an HTTP
status (429 with ``Retry-After``, 503, …) before answering normally, and :meth:`FakeSlackAPI.hold`
keeps calls of a method waiting until the test releases them (a slow Slack, without sleeping).

::

    async with FakeSlackAPI() as slack:
        client = AsyncWebClient(token="xoxb-test", base_url=slack.base_url)
        await client.chat_postMessage(channel="C1", text="hi")
        [call] = await slack.wait_for("chat.postMessage")
        assert call.args["text"] == "hi"
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.local_server import serve_locally

MAX_BLOCKS = 50
MAX_BLOCKS_CHARS = 13_000


@dataclass(frozen=True)
class SlackCall:
    """One recorded request: the API method, its arguments (query, form and JSON merged), the token,
    and the fake's answer (``response["ts"]`` is the ts of a posted message)."""

    method: str
    args: dict[str, Any]
    token: str | None = None
    response: dict[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=time.monotonic)
    """When it arrived (monotonic seconds): rate caps are checked on these."""


@dataclass
class FakeSlackAPI:
    """The fake server. ``calls`` holds every request in arrival order."""

    team_id: str = "T0TEAM"
    bot_user_id: str = "U0BOT"
    bot_id: str = "B0BOT"
    calls: list[SlackCall] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    """``method -> error``: answer every call of that method with ``{"ok": false, "error": ...}``."""
    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    tokens: frozenset[str] | None = None
    """The tokens this workspace knows; ``None`` accepts any token."""
    usergroups: dict[str, list[str]] = field(default_factory=dict)
    """User group id (``S…``) → member ids, for ``usergroups.users.list`` (tests change it at will)."""
    _statuses: dict[str, list[tuple[int, dict[str, str]]]] = field(default_factory=dict)
    _gates: dict[str, asyncio.Event] = field(default_factory=dict)
    _runner: web.AppRunner | None = None
    _port: int = 0
    _changed: asyncio.Condition | None = None
    _ts: Any = field(default_factory=lambda: itertools.count(1))
    _sockets: list[web.WebSocketResponse] = field(default_factory=list)
    streams: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``ts -> {"text", "stopped", "channel"}`` of every streamed message (its markdown as people see it)."""

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> FakeSlackAPI:
        """Serve on an ephemeral port of 127.0.0.1."""
        self._changed = asyncio.Condition()
        app = web.Application()
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/api/{method}", self._api)
        app.router.add_post("/respond/{name}", self._respond)
        app.router.add_get("/socket", self._socket)
        self._runner, self._port = await serve_locally(app, access_log=None)
        return self

    async def stop(self) -> None:
        """Stop serving."""
        for socket in list(self._sockets):
            await socket.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeSlackAPI:
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """The Web API base URL, with the trailing slash ``slack_sdk`` expects."""
        return f"http://127.0.0.1:{self._port}/api/"

    def response_url(self, name: str = "cmd") -> str:
        """A ``response_url`` for a slash command payload."""
        return f"http://127.0.0.1:{self._port}/respond/{name}"

    # ------------------------------------------------------------------ trouble

    def answer_status(self, method: str, status: int, *, times: int = 1, headers: dict[str, str] | None = None) -> None:
        """Answer the next ``times`` calls of ``method`` with HTTP ``status`` (recorded with ``{"status": …}``)."""
        self._statuses.setdefault(method, []).extend([(status, dict(headers or {}))] * times)

    def hold(self, method: str) -> asyncio.Event:
        """Keep every call of ``method`` waiting (after it is recorded as ``"<method>:held"``) until ``.set()``."""
        gate = self._gates[method] = asyncio.Event()
        return gate

    # ------------------------------------------------------------------ queries

    def calls_to(self, method: str, where: Callable[[SlackCall], bool] | None = None) -> list[SlackCall]:
        """Every recorded call of ``method`` (optionally filtered), oldest first."""
        return [c for c in self.calls if c.method == method and (where is None or where(c))]

    async def wait_for(
        self,
        method: str,
        count: int = 1,
        where: Callable[[SlackCall], bool] | None = None,
        seconds: float = 5.0,
    ) -> list[SlackCall]:
        """Wait until at least ``count`` calls of ``method`` (matching ``where``) arrived; return them all."""
        assert self._changed is not None, "start() the fake first"

        def enough() -> bool:
            return len(self.calls_to(method, where)) >= count

        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(enough), seconds)
            except TimeoutError:
                seen = [c.method for c in self.calls]
                raise AssertionError(f"expected {count} x {method} within {seconds}s; calls so far: {seen}") from None
        return self.calls_to(method, where)

    async def socket_send(self, envelope: dict[str, Any], seconds: float = 5.0) -> None:
        """Send a Socket Mode envelope to the connected app (waits for it to connect)."""
        assert self._changed is not None, "start() the fake first"
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: bool(self._sockets)), seconds)
        await self._sockets[-1].send_json(envelope)

    async def drop_sockets(self) -> None:
        """Close every Socket Mode connection from Slack's side (as Slack does on a deploy or a network fault)."""
        for socket in list(self._sockets):
            await socket.close()

    # ------------------------------------------------------------------ serving

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        await socket.send_json({"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A0APP"}})
        assert self._changed is not None
        async with self._changed:
            self._sockets.append(socket)
            self._changed.notify_all()
        try:
            async for frame in socket:
                if frame.type == WSMsgType.TEXT:
                    await self._record(SlackCall(method="socket", args=json.loads(frame.data)))
        finally:
            self._sockets.remove(socket)
        return socket

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        if request.can_read_body:
            if request.content_type == "application/json":
                args.update(await request.json())
            else:
                args.update(dict(await request.post()))
        for key in ("blocks", "view", "attachments"):
            if isinstance(args.get(key), str):
                args[key] = json.loads(args[key])
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else args.get("token")
        scripted = self._statuses.get(method)
        if scripted:
            status, headers = scripted.pop(0)
            await self._record(SlackCall(method=method, args=args, token=token, response={"status": status}))
            return web.json_response({"ok": False, "error": f"http_{status}"}, status=status, headers=headers)
        gate = self._gates.get(method)
        if gate is not None and not gate.is_set():
            await self._record(SlackCall(method=f"{method}:held", args=args, token=token))
            await gate.wait()
        call = SlackCall(method=method, args=args, token=token)
        answer = self._answer(call)
        await self._record(SlackCall(method=method, args=args, token=token, response=answer))
        return web.json_response(answer)

    async def _respond(self, request: web.Request) -> web.Response:
        body = await request.json()
        await self._record(SlackCall(method="response_url", args={"name": request.match_info["name"], **body}))
        return web.Response(text="ok")

    async def _record(self, call: SlackCall) -> None:
        assert self._changed is not None
        async with self._changed:
            self.calls.append(call)
            self._changed.notify_all()

    def _next_ts(self) -> str:
        return f"1700000{next(self._ts):03d}.000100"

    def _stream_answer(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        """``chat.startStream`` (in a thread only), ``chat.appendStream`` and ``chat.stopStream`` like Slack."""
        added = args.get("markdown_text") or ""
        if not args.get("channel"):
            return {"ok": False, "error": "channel_not_found"}
        if method == "chat.startStream":
            if not args.get("thread_ts"):
                return {"ok": False, "error": "invalid_arguments"}
            ts = self._next_ts()
            self.streams[ts] = {"text": added, "stopped": False, "channel": args["channel"]}
            return {"ok": True, "channel": args["channel"], "ts": ts}
        stream = self.streams.get(args.get("ts", ""))
        problem = _stream_problem(stream, added)
        if problem:
            return {"ok": False, "error": problem}
        assert stream is not None
        if method == "chat.appendStream" and not added:
            return {"ok": False, "error": "invalid_arguments"}
        stream["text"] += added
        stream["stopped"] = method == "chat.stopStream"
        return {"ok": True, "channel": args["channel"], "ts": args["ts"]}

    def _answer(self, call: SlackCall) -> dict[str, Any]:
        if not call.token:
            return {"ok": False, "error": "not_authed"}
        if self.tokens is not None and call.token not in self.tokens:
            return {"ok": False, "error": "invalid_auth"}
        if call.method in self.failures:
            return {"ok": False, "error": self.failures[call.method]}
        method = self._methods().get(call.method)
        if method is None:
            return {"ok": False, "error": "unknown_method"}
        return method(call.method, call.args)

    def _methods(self) -> dict[str, Callable[[str, dict[str, Any]], dict[str, Any]]]:
        """The Web API methods the fake answers, each by the handler of its family."""
        return {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_or_update,
            "chat.update": self._post_or_update,
            "chat.postEphemeral": self._post_ephemeral,
            "views.open": self._view,
            "views.publish": self._view,
            "views.update": self._view,
            "views.push": self._view,
            "reactions.add": self._reaction,
            "reactions.remove": self._reaction,
            "assistant.threads.setStatus": self._set_status,
            "assistant.threads.setSuggestedPrompts": self._set_suggested_prompts,
            "chat.startStream": self._stream_answer,
            "chat.appendStream": self._stream_answer,
            "chat.stopStream": self._stream_answer,
            "apps.connections.open": self._connections_open,
            "usergroups.users.list": self._usergroup_users,
            "conversations.open": self._conversations_open,
            "users.info": self._users_info,
        }

    def _auth_test(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://countersign-test.slack.com/",
            "team": "Test Team",
            "user": "countersign",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _post_or_update(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("channel"):
            return {"ok": False, "error": "channel_not_found"}
        if not args.get("text") and not args.get("blocks"):
            return {"ok": False, "error": "no_text"}
        problem = _blocks_problem(args.get("blocks"))
        if problem:
            return {"ok": False, "error": problem}
        ts = self._next_ts() if method == "chat.postMessage" else args.get("ts")
        if method == "chat.update" and not ts:
            return {"ok": False, "error": "message_not_found"}
        message = {"type": "message", "text": args.get("text", ""), "ts": ts, "bot_id": self.bot_id}
        return {"ok": True, "channel": args["channel"], "ts": ts, "message": message}

    def _post_ephemeral(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("channel") or not args.get("user"):
            return {"ok": False, "error": "invalid_arguments"}
        return {"ok": True, "message_ts": self._next_ts()}

    def _view(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        view = args.get("view")
        if not isinstance(view, dict) or not view.get("blocks"):
            return {"ok": False, "error": "invalid_arguments"}
        return {"ok": True, "view": {"id": f"V{next(self._ts):08d}", **view}}

    def _reaction(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("channel") or not args.get("timestamp") or not args.get("name"):
            return {"ok": False, "error": "invalid_arguments"}
        return {"ok": True}

    def _set_status(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("channel_id") or not args.get("thread_ts") or "status" not in args:
            return {"ok": False, "error": "invalid_arguments"}
        return {"ok": True}

    def _set_suggested_prompts(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        prompts = args.get("prompts")
        if isinstance(prompts, str):  # sent form-encoded: JSON text
            prompts = json.loads(prompts)
        if not args.get("channel_id") or not args.get("thread_ts") or not isinstance(prompts, list):
            return {"ok": False, "error": "invalid_arguments"}
        if not 1 <= len(prompts) <= 4 or not all({"title", "message"} <= set(p) for p in prompts):
            return {"ok": False, "error": "invalid_arguments"}  # Slack takes 1 to 4 prompts
        return {"ok": True}

    def _connections_open(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": f"ws://127.0.0.1:{self._port}/socket"}

    def _usergroup_users(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        group = args.get("usergroup", "")
        if group not in self.usergroups:
            return {"ok": False, "error": "no_such_subteam"}
        return {"ok": True, "users": list(self.usergroups[group])}

    def _conversations_open(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        users = str(args.get("users", ""))
        if not users:
            return {"ok": False, "error": "users_list_not_supplied"}
        return {"ok": True, "channel": {"id": "D" + users.replace(",", "")}}

    def _users_info(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        user_id = args.get("user", "")
        user = self.users.get(user_id) or {"id": user_id, "name": user_id.lower(), "real_name": f"User {user_id}"}
        return {"ok": True, "user": user}


STREAM_TEXT_LIMIT = 12_000


def _stream_problem(stream: dict[str, Any] | None, added: str) -> str | None:
    if stream is None:
        return "message_not_found"
    if stream["stopped"]:
        return "message_not_in_streaming_state"
    if len(stream["text"]) + len(added) > STREAM_TEXT_LIMIT:
        return "msg_too_long"
    return None


def _blocks_problem(blocks: Any) -> str | None:
    if blocks is None:
        return None
    if not isinstance(blocks, list) or len(blocks) > MAX_BLOCKS:
        return "invalid_blocks"
    if len(json.dumps(blocks, separators=(",", ":"), ensure_ascii=False)) > MAX_BLOCKS_CHARS:
        return "msg_blocks_too_long"
    return None

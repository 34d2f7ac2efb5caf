"""A fake OpenAI chat-completions server for tests: real HTTP on 127.0.0.1, scripted answers.

It answers ``POST /v1/chat/completions`` like OpenAI, as JSON or as a server-sent-event stream
(``data: {...}`` chunks, tool-call deltas split into name/id then argument fragments, a usage-only
chunk when ``stream_options.include_usage``, then ``data: [DONE]``). Every request body is kept in
:attr:`FakeOpenAIServer.requests` (its headers and query in ``request_headers`` and ``request_queries``).
Answers come from a queue the test fills, then from :attr:`FakeOpenAIServer.responder` when the queue
is empty.

From async tests::

    async with FakeOpenAIServer() as srv:
        srv.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
        srv.enqueue_text("Deleted old.log.")
        gen = OpenAIChatGenerator(api_key="test", api_base_url=srv.base_url, max_retries=0)
        reply = (await gen.run_async([ChatMessage.from_user("delete old.log")]))["replies"][0]
        assert srv.requests[0]["messages"][0] == {"role": "user", "content": "delete old.log"}

From sync code (the server runs its own event loop in a thread)::

    srv = FakeOpenAIServer().start_in_thread()
    try:
        srv.responder = lambda body: TextResponse(f"you said {body['messages'][-1]['content']}")
        ...
    finally:
        srv.stop()

``with FakeOpenAIServer() as srv:`` does the same as ``start_in_thread()`` / ``stop()``.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import itertools
import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.local_server import serve_locally

DEFAULT_USAGE = {"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28}
FAST_RETRY_HEADERS = {"retry-after-ms": "10"}
"""Sent with every error so the openai client's retry backoff takes 10 ms, not half a second."""


@dataclass(frozen=True)
class TextResponse:
    """A plain assistant text answer."""

    text: str
    finish_reason: str = "stop"
    usage: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_USAGE))


@dataclass(frozen=True)
class ToolCallsResponse:
    """An answer with tool calls: ``(name, arguments)`` or ``(name, arguments, id)`` each.

    ``arguments`` is a dict (sent as JSON) or a str (sent verbatim, e.g. to send invalid JSON).
    """

    calls: list[tuple[Any, ...]]
    text: str | None = None
    finish_reason: str = "tool_calls"
    usage: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_USAGE))


@dataclass(frozen=True)
class ErrorResponse:
    """An HTTP error; ``body`` defaults to OpenAI's ``{"error": {...}}`` shape."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DelayResponse:
    """Wait ``seconds`` (cut short when the server stops), then answer with ``then``."""

    seconds: float
    then: ResponseSpec | None = None


@dataclass(frozen=True)
class RawResponse:
    """Exactly ``body`` with HTTP ``status``: a broken server (``"<html>oops"``) or a JSON shape of your own."""

    body: str | dict[str, Any]
    status: int = 200
    content_type: str = "application/json"


@dataclass(frozen=True)
class CutStreamResponse:
    """A streamed answer whose connection drops after the first ``after`` pieces of ``text`` (a crashed server)."""

    text: str
    after: int = 2


@dataclass(frozen=True)
class HangResponse:
    """Never answer: the request is held until the server stops (a hung model)."""


ResponseSpec = (
    TextResponse | ToolCallsResponse | ErrorResponse | DelayResponse | RawResponse | HangResponse | CutStreamResponse
)
Responder = Callable[[dict[str, Any]], "ResponseSpec | str | Awaitable[ResponseSpec | str]"]


class FakeOpenAIServer:
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint on an ephemeral port (see the module docstring)."""

    def __init__(self, responder: Responder | None = None) -> None:
        self.responder: Responder | None = responder
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        self.request_queries: list[dict[str, str]] = []
        """Each request's URL query parameters (what a client's ``extra_query`` adds)."""
        self.piece_delay = 0.0
        """Seconds between two streamed text pieces, as a model that writes at its own pace."""
        self.port: int | None = None
        self._queue: collections.deque[ResponseSpec] = collections.deque()
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None
        self._arrived: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None

    # --- scripting ------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, for ``OpenAIChatGenerator(api_base_url=...)``."""
        if self.port is None:
            raise RuntimeError("FakeOpenAIServer is not started.")
        return f"http://127.0.0.1:{self.port}/v1"

    def enqueue(self, spec: ResponseSpec) -> None:
        """Answer a later request with ``spec`` (first in, first out)."""
        self._queue.append(spec)

    def enqueue_text(self, text: str, *, finish_reason: str = "stop") -> None:
        """Answer a later request with ``text``."""
        self.enqueue(TextResponse(text, finish_reason=finish_reason))

    def enqueue_tool_calls(self, calls: list[tuple[Any, ...]], *, text: str | None = None) -> None:
        """Answer a later request with tool calls ``[(name, args_dict_or_raw_str[, id]), ...]``."""
        self.enqueue(ToolCallsResponse(list(calls), text=text))

    def enqueue_error(self, status: int, body: Any = None, *, headers: dict[str, str] | None = None) -> None:
        """Answer a later request with HTTP ``status`` (retry-after-ms: 10 unless overridden)."""
        self.enqueue(ErrorResponse(status, body, dict(headers or {})))

    def enqueue_delay(self, seconds: float, then: ResponseSpec | str | None = None) -> None:
        """Hold a later request for ``seconds`` (cancelled when the server stops), then answer ``then``."""
        self.enqueue(DelayResponse(seconds, TextResponse(then) if isinstance(then, str) else then))

    def enqueue_raw(self, body: str | dict[str, Any], *, status: int = 200) -> None:
        """Answer a later request with exactly ``body`` (a dict is sent as JSON)."""
        self.enqueue(RawResponse(body, status))

    def enqueue_no_choices(self) -> None:
        """Answer a later request with a well-formed completion that has no choices at all."""
        self.enqueue(
            RawResponse(
                {
                    "id": f"chatcmpl-{next(self._ids)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": "fake-model",
                    "choices": [],
                    "usage": DEFAULT_USAGE,
                }
            )
        )

    def enqueue_hang(self) -> None:
        """Hold a later request without ever answering (until the server stops)."""
        self.enqueue(HangResponse())

    async def wait_for_requests(self, count: int) -> None:
        """Wait until ``count`` requests have arrived (async mode; wrap in ``asyncio.timeout`` to bound it)."""
        assert self._arrived is not None, "start the server with start_async() / async with"
        while len(self.requests) < count:
            self._arrived.clear()
            await self._arrived.wait()

    # --- async lifecycle ----------------------------------------------------------------------

    async def start_async(self) -> FakeOpenAIServer:
        """Start serving on the running event loop."""
        self._stopping = asyncio.Event()
        self._arrived = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        self._runner, self.port = await serve_locally(app, shutdown_timeout=2.0, access_log=None)
        return self

    async def stop_async(self) -> None:
        """Stop serving; requests held by a delay are released first."""
        if self._stopping is not None:
            self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeOpenAIServer:
        return await self.start_async()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop_async()

    # --- sync lifecycle (own loop in a thread) ------------------------------------------------

    def start_in_thread(self) -> FakeOpenAIServer:
        """Start serving on a private event loop in a daemon thread; returns once the port is bound."""
        loop = asyncio.new_event_loop()
        started: asyncio.Future[Any] | None = None
        ready = threading.Event()

        def serve() -> None:
            nonlocal started
            asyncio.set_event_loop(loop)
            started = asyncio.ensure_future(self.start_async(), loop=loop)
            started.add_done_callback(lambda fut: (ready.set(), fut.exception() and loop.stop()))
            loop.run_forever()
            loop.close()

        self._thread_loop = loop
        self._thread = threading.Thread(target=serve, name="fake-openai-server", daemon=True)
        self._thread.start()
        ready.wait()
        assert started is not None
        started.result()  # re-raises a failure to bind
        return self

    def stop(self) -> None:
        """Stop a server started with :meth:`start_in_thread` and join its thread."""
        if self._thread is None or self._thread_loop is None:
            raise RuntimeError("stop() is for start_in_thread(); from async code use `await stop_async()`.")
        loop = self._thread_loop
        asyncio.run_coroutine_threadsafe(self.stop_async(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join()
        self._thread = self._thread_loop = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start_in_thread()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- HTTP ---------------------------------------------------------------------------------

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response({"error": {"message": "body is not JSON", "type": "invalid_request"}}, status=400)
        self.requests.append(body)
        self.request_headers.append(dict(request.headers))
        self.request_queries.append(dict(request.query))
        if self._arrived is not None:
            self._arrived.set()
        spec = await self._next_spec(body)
        return await self._answer(request, body, spec)

    async def _next_spec(self, body: dict[str, Any]) -> ResponseSpec:
        if self._queue:
            return self._queue.popleft()
        if self.responder is None:
            return ErrorResponse(
                500,
                {"error": {"message": "FakeOpenAIServer: no scripted response left", "type": "fake_exhausted"}},
                {"x-should-retry": "false"},
            )
        spec = self.responder(body)
        if inspect.isawaitable(spec):
            spec = await spec
        return TextResponse(spec) if isinstance(spec, str) else spec

    async def _answer(self, request: web.Request, body: dict[str, Any], spec: ResponseSpec) -> web.StreamResponse:
        if isinstance(spec, DelayResponse):
            assert self._stopping is not None
            try:
                await asyncio.wait_for(self._stopping.wait(), timeout=spec.seconds)
                return web.json_response({"error": {"message": "server stopping"}}, status=503)
            except TimeoutError:
                return await self._answer(request, body, spec.then or TextResponse("(after a delay)"))
        if isinstance(spec, HangResponse):
            assert self._stopping is not None
            await self._stopping.wait()
            return web.json_response({"error": {"message": "server stopping"}}, status=503)
        if isinstance(spec, RawResponse):
            text = spec.body if isinstance(spec.body, str) else json.dumps(spec.body)
            return web.Response(text=text, status=spec.status, content_type=spec.content_type)
        if isinstance(spec, ErrorResponse):
            payload = spec.body
            if payload is None:
                payload = {"error": {"message": f"fake error {spec.status}", "type": "server_error", "code": None}}
            headers = {**FAST_RETRY_HEADERS, **spec.headers}
            if isinstance(payload, str):
                return web.Response(text=payload, status=spec.status, headers=headers)
            return web.json_response(payload, status=spec.status, headers=headers)
        model = body.get("model", "fake-model")
        if isinstance(spec, CutStreamResponse):
            return await self._stream(request, model, spec.text, [], "stop", DEFAULT_USAGE, False, cut_after=spec.after)
        calls = self._normalise_calls(spec) if isinstance(spec, ToolCallsResponse) else []
        text = spec.text
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._stream(request, model, text, calls, spec.finish_reason, spec.usage, include_usage)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for name, args, cid in calls
            ]
        completion = {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": spec.finish_reason, "logprobs": None}],
            "usage": spec.usage,
        }
        return web.json_response(completion)

    def _normalise_calls(self, spec: ToolCallsResponse) -> list[tuple[str, str, str]]:
        """``(name, arguments as sent, id)`` for every scripted call."""
        out = []
        for call in spec.calls:
            name, args = call[0], call[1]
            cid = call[2] if len(call) > 2 else f"call_{next(self._ids)}"
            out.append((name, args if isinstance(args, str) else json.dumps(args), cid))
        return out

    async def _stream(
        self,
        request: web.Request,
        model: str,
        text: str | None,
        calls: list[tuple[str, str, str]],
        finish_reason: str,
        usage: dict[str, int],
        include_usage: bool,
        cut_after: int | None = None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        chunk_id = f"chatcmpl-{next(self._ids)}"
        created = int(time.time())

        async def send(choices: list[dict[str, Any]], **extra: Any) -> None:
            chunk = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": choices,
                **extra,
            }
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        def delta(d: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
            return [{"index": 0, "delta": d, "finish_reason": finish, "logprobs": None}]

        await send(delta({"role": "assistant", "content": ""}))
        for number, piece in enumerate(_split_text(text or "")):
            if cut_after is not None and number >= cut_after:
                assert request.transport is not None
                request.transport.close()  # the connection drops mid-answer
                return response
            if number and self.piece_delay:
                await asyncio.sleep(self.piece_delay)
            await send(delta({"content": piece}))
        for index, (name, args, cid) in enumerate(calls):
            head = {"index": index, "id": cid, "type": "function", "function": {"name": name, "arguments": ""}}
            await send(delta({"tool_calls": [head]}))
            for fragment in _split_in_three(args):
                await send(delta({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}))
        await send(delta({}, finish_reason))
        if include_usage:
            await send([], usage=usage)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _split_text(text: str) -> list[str]:
    """Word-sized pieces that join back to ``text``."""
    pieces: list[str] = []
    for word in text.split(" "):
        pieces.append(word if not pieces else " " + word)
    return [p for p in pieces if p]


def _split_in_three(text: str) -> list[str]:
    """``text`` cut into (up to) three fragments, as a model streams JSON arguments."""
    if len(text) < 3:
        return [text] if text else []
    third = len(text) // 3
    return [text[:third], text[third : 2 * third], text[2 * third :]]

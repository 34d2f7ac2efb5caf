"""The chat generator for OpenAI and every OpenAI-compatible server (Ollama, vLLM, LM Studio, ...).

It speaks chat completions through ``openai.AsyncOpenAI``: tools, parallel tool calls and streaming.
The client's own environment variables apply (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``), and its
retries (connection errors, 408, 409, 429, 5xx, with backoff) run before any failure reaches us; what
is left becomes one :class:`~bot.llm.base.LLMError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import openai
import orjson
from openai._base_client import make_request_options
from openai.types.chat import ChatCompletion

from bot.aio import run_sync
from bot.llm.aiohttp_transport import AiohttpClient
from bot.llm.base import LLMError, LLMResponseError, StreamingCallback, StreamingChunk, emit_chunk
from bot.llm.openai_format import StreamAssembler, reply_from_choice, to_openai_messages, usage_to_dict
from bot.llm.openai_params import create_arguments
from bot.messages import ChatMessage
from bot.tools import Tool, Toolset, flatten_tools

PLACEHOLDER_API_KEY = "not-needed"
"""Sent when a base URL is set but no key is: local servers such as Ollama ignore it, the client needs one."""
RETRY_BACKOFF_START, RETRY_BACKOFF_MAX = 0.5, 8.0
"""The openai client's own backoff before retry n: ``min(0.5 * 2**n, 8)`` seconds (less some jitter)."""


class OpenAIChatGenerator:
    """Chat completions over the ``openai`` client.

    >>> gen = OpenAIChatGenerator(model="gpt-4o-mini", generation_kwargs={"temperature": 0})
    >>> gen.run([ChatMessage.from_user("What time is it?")], tools=[get_time])["replies"][0].tool_calls

    ``api_key`` / ``api_base_url`` default to the client's own ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``.
    ``timeout`` (seconds) and ``max_retries`` default to the client's (600 s, 2 retries).
    ``default_headers`` go with every request (an LLM gateway's key, a routing header).
    ``generation_kwargs`` (and a run's, which win) go with every call: the client's own keywords
    (``temperature``) as keywords, any other key (a server's ``top_k``) in ``extra_body``; explicit
    ``extra_body``, ``extra_query`` and ``extra_headers`` are merged, not replaced.
    The API key and the headers' values are never serialised nor shown in an error.
    """

    def __init__(
        self,
        model: str = "gpt-4o-mini",
        api_key: str | None = None,
        api_base_url: str | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        default_headers: dict[str, str] | None = None,
    ) -> None:
        self.model = model
        self.api_key = api_key
        self.api_base_url = api_base_url
        self.generation_kwargs = dict(generation_kwargs or {})
        self.timeout = timeout
        self.max_retries = max_retries
        self.default_headers = dict(default_headers or {})
        # An AsyncOpenAI client's connection pool is bound to the loop it was first used on, so
        # async callers get one client per event loop; sync callers get a fresh one per call.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )
        self._clients_lock = threading.Lock()

    # --- public API ---------------------------------------------------------------------------

    def run(
        self,
        messages: list[ChatMessage],
        tools: Sequence[Tool | Toolset] | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        streaming_callback: StreamingCallback | None = None,
    ) -> dict[str, list[ChatMessage]]:
        """Answer ``messages`` from sync code; works inside or outside a running event loop."""
        return run_sync(self._run_with_fresh_client(messages, tools, generation_kwargs, streaming_callback))

    async def run_async(
        self,
        messages: list[ChatMessage],
        tools: Sequence[Tool | Toolset] | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        streaming_callback: StreamingCallback | None = None,
    ) -> dict[str, list[ChatMessage]]:
        """Answer ``messages``; returns ``{"replies": [ChatMessage]}`` (one reply per choice)."""
        client = self._client_for_running_loop()
        return await self._generate(client, messages, tools, generation_kwargs, streaming_callback)

    async def warm_up(self) -> None:
        """Create this event loop's client and load its chat-completions code now, not in the first call.

        The client imports its HTTP transport and API resources lazily: about 0.2 s of CPU, seconds on a
        loaded host, that the first call would otherwise spend blocking the event loop (and every heartbeat
        and acknowledgement waiting on it). Missing credentials are left for the first call to report.
        """
        try:
            client = self._client_for_running_loop()
        except LLMError:
            return
        _ = client.chat.completions  # the attribute access imports the resource modules

    async def aclose(self) -> None:
        """Close the client of the running event loop (others close when their loop is collected)."""
        loop = asyncio.get_running_loop()
        with self._clients_lock:
            client = self._clients.pop(loop, None)
        if client is not None:
            await client.close()

    def to_dict(self) -> dict[str, Any]:
        """Serialise the settings; the API key and extra headers are left out (secrets from the environment)."""
        return {
            "type": "bot.llm.OpenAIChatGenerator",
            "init_parameters": {
                "model": self.model,
                "api_base_url": self.api_base_url,
                "generation_kwargs": dict(self.generation_kwargs),
                "timeout": self.timeout,
                "max_retries": self.max_retries,
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OpenAIChatGenerator:
        """Inverse of :meth:`to_dict`."""
        return cls(**data.get("init_parameters", {}))

    # --- the client ---------------------------------------------------------------------------

    def _new_client(self) -> openai.AsyncOpenAI:
        kwargs: dict[str, Any] = {"api_key": self.api_key, "base_url": self.api_base_url}
        base_url_set = bool(self.api_base_url or os.environ.get("OPENAI_BASE_URL"))
        if self.api_key is None and not os.environ.get("OPENAI_API_KEY") and base_url_set:
            kwargs["api_key"] = PLACEHOLDER_API_KEY
        if self.timeout is not None:
            kwargs["timeout"] = self.timeout
        if self.max_retries is not None:
            kwargs["max_retries"] = self.max_retries
        if self.default_headers:
            kwargs["default_headers"] = dict(self.default_headers)
        try:
            return openai.AsyncOpenAI(**kwargs, http_client=AiohttpClient())
        except openai.OpenAIError as err:
            raise LLMError(
                "No credentials for the model server: set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server)."
            ) from err

    def _client_for_running_loop(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        with self._clients_lock:
            client = self._clients.get(loop)
            if client is None:
                client = self._clients[loop] = self._new_client()
        return client

    async def _run_with_fresh_client(
        self,
        messages: list[ChatMessage],
        tools: Sequence[Tool | Toolset] | None,
        generation_kwargs: dict[str, Any] | None,
        streaming_callback: StreamingCallback | None,
    ) -> dict[str, list[ChatMessage]]:
        client = self._new_client()
        try:
            return await self._generate(client, messages, tools, generation_kwargs, streaming_callback)
        finally:
            await client.close()

    # --- one call -----------------------------------------------------------------------------

    async def _generate(
        self,
        client: openai.AsyncOpenAI,
        messages: list[ChatMessage],
        tools: Sequence[Tool | Toolset] | None,
        generation_kwargs: dict[str, Any] | None,
        streaming_callback: StreamingCallback | None,
    ) -> dict[str, list[ChatMessage]]:
        # The client's own keywords as keywords, server-specific ones (top_k, min_p) in extra_body.
        request = create_arguments(self.generation_kwargs, generation_kwargs)
        request.pop("stream", None)  # streaming is chosen by passing a streaming_callback
        request["model"] = self.model
        request["messages"] = to_openai_messages(messages)
        specs = [t.tool_spec for t in flatten_tools(tools)]
        if specs:
            request["tools"] = specs
        try:
            if streaming_callback is None:
                # The client bounds each attempt; this bounds them all, with the pauses between them (a
                # server's Retry-After may ask for up to two minutes, longer than anyone should wait).
                async with asyncio.timeout(self._total_wait()):
                    completion = await _post_completion(client, request, stream=False)
                return {"replies": self._replies_from_completion(client, completion)}
            return {"replies": await self._stream(client, request, streaming_callback)}
        except openai.OpenAIError as err:
            raise self._llm_error(client, err) from err
        except json.JSONDecodeError as err:
            where = _without_userinfo(str(client.base_url)).rstrip("/")
            raise LLMResponseError(f"The model server at {where} answered with a body that is not valid JSON.") from err
        except TimeoutError as err:
            where = _without_userinfo(str(client.base_url)).rstrip("/")
            raise LLMError(
                f"The model call to {where} timed out after {self._total_wait():g} s (all attempts).",
                reason=f"the model server at {where} did not answer in time",
            ) from err

    def _total_wait(self) -> float | None:
        """The longest a call may take over all its attempts, or ``None`` when no timeout is set."""
        if self.timeout is None:
            return None
        retries = self.max_retries if self.max_retries is not None else openai.DEFAULT_MAX_RETRIES
        pauses = sum(min(RETRY_BACKOFF_START * 2**n, RETRY_BACKOFF_MAX) for n in range(retries))
        return self.timeout * (retries + 1) + pauses

    def _replies_from_completion(self, client: openai.AsyncOpenAI, completion: Any) -> list[ChatMessage]:
        if not isinstance(completion, ChatCompletion) or not isinstance(getattr(completion, "choices", None), list):
            # the client does not validate: any JSON body (a list, a string) comes back as it is
            where = _without_userinfo(str(client.base_url)).rstrip("/")
            raise LLMResponseError(f"The model server at {where} answered with JSON that is not a chat completion.")
        model = completion.model or self.model
        usage = usage_to_dict(completion.usage)
        return [reply_from_choice(choice, model=model, usage=usage) for choice in completion.choices]

    async def _stream(
        self, client: openai.AsyncOpenAI, request: dict[str, Any], callback: StreamingCallback
    ) -> list[ChatMessage]:
        request["stream_options"] = {"include_usage": True, **(request.get("stream_options") or {})}
        # Only opening the stream is bounded in total: a long answer that keeps arriving is not hung, and
        # a silent gap between chunks is bounded by the client's read timeout.
        async with asyncio.timeout(self._total_wait()):
            stream = await _post_completion(client, request, stream=True)
        assemblers: dict[int, StreamAssembler] = {}
        usage = usage_to_dict(None)
        model = self.model
        async with stream:
            async for chunk in stream:
                model = chunk.get("model") or model
                choices = chunk.get("choices") or ()
                if chunk.get("usage") is not None:
                    usage = usage_to_dict(chunk["usage"])
                    if not choices:  # the final usage-only chunk
                        await emit_chunk(callback, StreamingChunk(content="", meta={"model": model, "usage": usage}))
                for choice in choices:
                    index = choice.get("index") or 0
                    delta = choice.get("delta") or {}
                    finish_reason = choice.get("finish_reason")
                    assembler = assemblers.get(index)
                    if assembler is None:
                        assembler = assemblers[index] = StreamAssembler(index=index)
                    deltas = assembler.add_delta(delta, finish_reason)
                    await emit_chunk(
                        callback,
                        StreamingChunk(
                            content=delta.get("content") or "",
                            tool_call_deltas=deltas,
                            meta={"model": model, "index": index},
                            finish_reason=finish_reason,
                        ),
                    )
        if not assemblers:  # no choices at all: as a completion without choices, no reply (the agent retries once)
            return []
        return [assemblers[i].reply(model=model, usage=usage) for i in sorted(assemblers)]

    def _llm_error(self, client: openai.AsyncOpenAI, err: openai.OpenAIError) -> LLMError:
        where = _without_userinfo(str(client.base_url)).rstrip("/")
        if isinstance(err, openai.APITimeoutError):
            limit = f" after {self.timeout:g} s" if self.timeout is not None else ""
            message, status = f"The model call to {where} timed out{limit}.", None
            reason = f"the model server at {where} did not answer in time{limit}"
        elif isinstance(err, openai.APIConnectionError):
            message, status = f"Could not connect to the model server at {where}: {err.message}", None
            reason = f"the model server at {where} could not be reached"
        elif isinstance(err, openai.APIStatusError):
            message = f"The model server at {where} answered HTTP {err.status_code}: {_status_detail(err)}"
            status = err.status_code
            reason = f"the model server at {where} answered with an error (see the log)"
        else:
            message, status = f"The model call to {where} failed: {err}", None
            reason = f"the model call to {where} failed"
        secrets = [client.api_key, *self.default_headers.values()]
        for secret in secrets:
            if secret and secret != PLACEHOLDER_API_KEY and len(secret) >= 4:
                message = message.replace(secret, "••••••")
        return LLMError(message, status_code=status, reason=reason)


DRAIN_SECONDS = 0.1
"""How long a stream's rest after ``[DONE]`` is read before its connection is closed instead (as the client)."""
OPTION_KEYWORDS = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})
"""The keywords of ``chat.completions.create`` that are request options, not fields of the body."""


class ChunkStream(openai.AsyncStream[dict[str, Any]]):
    """A streamed chat completion's chunks as the JSON objects the server sent (``orjson``), not one typed
    object per chunk: the client's own stream, with its error events, time-outs and connection reuse.

    The client builds a pydantic object for every chunk, several per streamed answer; the generator reads
    a few keys of each, so plain dicts do the same for a fraction of the CPU.
    """

    async def __stream__(self) -> AsyncIterator[dict[str, Any]]:
        response = self.response
        events = self._iter_events()
        try:
            async for sse in events:
                if sse.data.startswith("[DONE]"):
                    await self._finish(events)
                    return
                data = orjson.loads(sse.data)
                if not isinstance(data, dict):
                    raise LLMResponseError("The model server streamed a chunk that is not a JSON object.")
                if data.get("error"):  # an error event in the stream, as the client raises it
                    error = data["error"]
                    message = error.get("message") if isinstance(error, dict) else None
                    if not message or not isinstance(message, str):
                        message = "An error occurred during streaming"
                    raise openai.APIError(message=message, request=response.request, body=error)
                yield data
        finally:
            await response.aclose()

    async def _finish(self, events: AsyncIterator[Any]) -> None:
        """Read what follows ``[DONE]`` to the body's end, for at most ``DRAIN_SECONDS``, and ignore it.

        Over HTTP/1.1 a connection is reused only once its body is read; reading it through the same
        iterators also ends them, where leaving them suspended has the event loop finalise each one.
        """
        if self.response.http_version != "HTTP/1.1":
            return
        with contextlib.suppress(TimeoutError, openai.APIError):  # cleanup never fails a complete answer
            async with asyncio.timeout(DRAIN_SECONDS):
                async for _ in events:
                    pass


async def _post_completion(client: openai.AsyncOpenAI, request: dict[str, Any], *, stream: bool) -> Any:
    """``chat.completions.create(**request)``, without the client's transform of every parameter.

    ``create`` walks the whole request (every message, every tool's schema) against its typed parameters to
    rename and reformat fields; ours are plain JSON already, so the body goes as it is, through the same
    request path (headers, authentication, retries, time-outs, errors). A stream yields :class:`ChunkStream`'s
    dicts.
    """
    body = {key: value for key, value in request.items() if key not in OPTION_KEYWORDS}
    if stream:
        body["stream"] = True
    options = make_request_options(
        extra_headers=request.get("extra_headers"),
        extra_query=request.get("extra_query"),
        extra_body=request.get("extra_body"),
        timeout=request.get("timeout", openai.NOT_GIVEN),
        security={"bearer_auth": True},
    )
    return await client.post(
        "/chat/completions",
        body=body,
        options=options,
        cast_to=ChatCompletion,
        stream=stream,
        stream_cls=ChunkStream,
    )


def _without_userinfo(url: str) -> str:
    """``url`` without ``user:password@`` (never echo credentials embedded in a base URL)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def _status_detail(err: openai.APIStatusError) -> str:
    """The server's own error message when it sent one, else the client's summary."""
    body = err.body
    if isinstance(body, dict) and isinstance(body.get("message"), str) and body["message"]:
        return body["message"]
    if isinstance(body, str) and body.strip():
        return body.strip()[:300]
    return err.message

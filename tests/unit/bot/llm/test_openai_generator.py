"""OpenAIChatGenerator against the real openai client and a fake OpenAI server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from bot.llm import (
    ChatGenerator,
    LLMError,
    LLMResponseError,
    OpenAIChatGenerator,
    StreamingChunk,
    chat_generator_from_dict,
)
from bot.messages import ChatMessage, ToolCall
from bot.tools import Toolset, tool
from tests.fakes.openai_server import FakeOpenAIServer, RawResponse

API_KEY = "sk-test-0123456789abcdef"


@tool
def delete_file(path: str) -> str:
    """Delete a file.

    :param path: File to delete.
    """
    return f"deleted {path}"


@tool
def get_time() -> str:
    """Get the current time."""
    return "12:00"


TOOLS = [delete_file, get_time]


@pytest.fixture(autouse=True)
def _no_ambient_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own OPENAI_* variables must not leak into these tests."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture
async def make_generator(server: FakeOpenAIServer) -> AsyncIterator[Callable[..., OpenAIChatGenerator]]:
    """Builds generators aimed at the fake server and closes their clients afterwards."""
    made: list[OpenAIChatGenerator] = []

    def make(**kwargs: Any) -> OpenAIChatGenerator:
        kwargs.setdefault("api_key", API_KEY)
        kwargs.setdefault("api_base_url", server.base_url)
        kwargs.setdefault("max_retries", 0)
        generator = OpenAIChatGenerator(**kwargs)
        made.append(generator)
        return generator

    yield make
    for generator in made:
        await generator.aclose()


def user(text: str) -> list[ChatMessage]:
    return [ChatMessage.from_user(text)]


async def test_openai_generator_satisfies_the_chat_generator_protocol() -> None:
    assert isinstance(OpenAIChatGenerator(api_key=API_KEY), ChatGenerator)


async def test_text_reply_carries_model_usage_finish_reason_and_index(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    server.enqueue_text("Hello from the model.")
    result = await make_generator(model="gpt-4o-mini").run_async(user("hi"))

    [reply] = result["replies"]
    assert reply.text == "Hello from the model."
    assert reply.tool_calls == []
    assert reply.meta["model"] == "gpt-4o-mini"
    assert reply.meta["finish_reason"] == "stop"
    assert reply.meta["usage"] == {"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28}
    assert reply.meta["index"] == 0
    assert reply.meta["id"]


async def test_tool_call_reply_has_parsed_arguments_and_the_call_id(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    server.enqueue_tool_calls([("delete_file", {"path": "old.log"}, "call_abc")])
    [reply] = (await make_generator().run_async(user("delete old.log"), tools=TOOLS))["replies"]

    assert reply.text is None
    assert reply.tool_calls == [ToolCall(tool_name="delete_file", arguments={"path": "old.log"}, id="call_abc")]
    assert reply.meta["finish_reason"] == "tool_calls"


async def test_parallel_tool_calls_all_come_back_in_order(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    server.enqueue_tool_calls(
        [("delete_file", {"path": "a.txt"}), ("delete_file", {"path": "b.txt"}), ("get_time", {})]
    )
    [reply] = (await make_generator().run_async(user("clean up"), tools=TOOLS))["replies"]

    assert [(c.tool_name, c.arguments) for c in reply.tool_calls] == [
        ("delete_file", {"path": "a.txt"}),
        ("delete_file", {"path": "b.txt"}),
        ("get_time", {}),
    ]
    assert len({c.id for c in reply.tool_calls}) == 3


async def test_request_sends_tools_and_a_tool_round_trip_in_openai_format(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    call = ToolCall(tool_name="delete_file", arguments={"path": "old.log"}, id="call_1")
    history = [
        ChatMessage.from_system("You are careful."),
        ChatMessage.from_user("delete old.log"),
        ChatMessage.from_assistant(tool_calls=[call]),
        ChatMessage.from_tool("Tool execution for 'delete_file' was rejected by the user.", origin=call, error=True),
    ]
    server.enqueue_text("I did not delete it.")
    await make_generator(model="my-model").run_async(history, tools=Toolset(TOOLS))

    body = server.requests[0]
    assert body["model"] == "my-model"
    assert body["messages"] == [
        {"role": "system", "content": "You are careful."},
        {"role": "user", "content": "delete old.log"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "delete_file", "arguments": '{"path": "old.log"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "Tool execution for 'delete_file' was rejected by the user.",
        },
    ]
    assert body["tools"] == [delete_file.tool_spec, get_time.tool_spec]
    assert "stream" not in body


async def test_no_tools_key_is_sent_when_no_tools_are_offered(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    server.enqueue_text("ok")
    await make_generator().run_async(user("hi"))
    assert "tools" not in server.requests[0]


async def test_generation_kwargs_merge_init_values_with_per_call_overrides(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    server.enqueue_text("ok")
    generator = make_generator(generation_kwargs={"temperature": 0.2, "max_tokens": 50})
    await generator.run_async(user("hi"), generation_kwargs={"temperature": 0.9, "seed": 7})

    body = server.requests[0]
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0.9, 50, 7)


async def test_streaming_text_reaches_the_callback_piece_by_piece_and_assembles_the_reply(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    server.enqueue_text("The disk is 80 percent full.")
    chunks: list[StreamingChunk] = []
    [reply] = (await make_generator().run_async(user("disk?"), streaming_callback=chunks.append))["replies"]

    assert server.requests[0]["stream"] is True
    assert server.requests[0]["stream_options"] == {"include_usage": True}
    text_chunks = [c.content for c in chunks if c.content]
    assert len(text_chunks) > 1
    assert "".join(text_chunks) == "The disk is 80 percent full."
    assert reply.text == "The disk is 80 percent full."
    assert reply.meta["finish_reason"] == "stop"
    assert reply.meta["usage"] == {"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28}
    assert [c.finish_reason for c in chunks if c.finish_reason] == ["stop"]
    assert chunks[-1].meta["usage"]["total_tokens"] == 28


async def test_streamed_tool_call_deltas_are_assembled_into_complete_calls(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    server.enqueue_tool_calls(
        [("delete_file", {"path": "reports/q3 final.txt"}, "call_x"), ("get_time", {}, "call_y")],
        text="Working on it.",
    )
    chunks: list[StreamingChunk] = []

    async def on_chunk(chunk: StreamingChunk) -> None:  # async callbacks are awaited
        chunks.append(chunk)

    [reply] = (await make_generator().run_async(user("go"), tools=TOOLS, streaming_callback=on_chunk))["replies"]

    assert reply.text == "Working on it."
    assert reply.tool_calls == [
        ToolCall(tool_name="delete_file", arguments={"path": "reports/q3 final.txt"}, id="call_x"),
        ToolCall(tool_name="get_time", arguments={}, id="call_y"),
    ]
    assert reply.meta["finish_reason"] == "tool_calls"
    assert reply.meta["usage"]["total_tokens"] == 28
    deltas = [d for c in chunks for d in c.tool_call_deltas if d["index"] == 0]
    assert deltas[0] == {"index": 0, "id": "call_x", "name": "delete_file", "arguments": ""}
    fragments = [d["arguments"] for d in deltas[1:]]
    assert len(fragments) > 1
    assert "".join(fragments) == '{"path": "reports/q3 final.txt"}'


async def test_a_server_error_then_success_is_retried_by_the_client(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    server.enqueue_error(500)
    server.enqueue_text("recovered")
    [reply] = (await make_generator(max_retries=2).run_async(user("hi")))["replies"]

    assert reply.text == "recovered"
    assert len(server.requests) == 2


async def test_a_persistent_server_error_becomes_one_llm_error_after_the_retries(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    for _ in range(3):
        server.enqueue_error(503, {"error": {"message": "overloaded", "type": "server_error"}})

    with pytest.raises(LLMError) as caught:
        await make_generator(max_retries=2).run_async(user("hi"))

    assert len(server.requests) == 3
    assert caught.value.status_code == 503
    assert "HTTP 503" in str(caught.value)
    assert "overloaded" in str(caught.value)
    assert not isinstance(caught.value, LLMResponseError)


async def test_an_error_message_never_contains_the_api_key(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    server.enqueue_error(401, {"error": {"message": f"Incorrect API key provided: {API_KEY}.", "type": "auth"}})

    with pytest.raises(LLMError) as caught:
        await make_generator().run_async(user("hi"))

    assert caught.value.status_code == 401
    assert "Incorrect API key provided" in str(caught.value)
    assert API_KEY not in str(caught.value)


async def test_a_timeout_becomes_an_llm_error_quickly(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    server.enqueue_delay(5.0, then="too late")
    started = time.monotonic()

    with pytest.raises(LLMError) as caught:
        await make_generator(timeout=0.5, max_retries=0).run_async(user("hi"))

    assert time.monotonic() - started < 3.0
    assert "timed out" in str(caught.value)
    assert caught.value.status_code is None


async def test_an_unreachable_server_becomes_an_llm_error(make_generator: Callable[..., OpenAIChatGenerator]) -> None:
    async with FakeOpenAIServer() as gone:
        dead_url = gone.base_url  # the port is closed once the server stops

    with pytest.raises(LLMError) as caught:
        await make_generator(api_base_url=dead_url, max_retries=0).run_async(user("hi"))

    assert "Could not connect" in str(caught.value)


@pytest.mark.parametrize("raw_arguments", ['{"path": "old.log"', '["old.log"]'])
async def test_tool_arguments_that_are_not_a_json_object_raise_llm_response_error(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator], raw_arguments: str
) -> None:
    server.enqueue_tool_calls([("delete_file", raw_arguments)])

    with pytest.raises(LLMResponseError, match="delete_file"):
        await make_generator().run_async(user("delete old.log"), tools=TOOLS)


async def test_streamed_invalid_tool_arguments_raise_llm_response_error(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    server.enqueue_tool_calls([("delete_file", "{not json at all")])

    with pytest.raises(LLMResponseError):
        await make_generator().run_async(user("x"), tools=TOOLS, streaming_callback=lambda chunk: None)


async def test_an_error_event_in_a_stream_is_an_llm_error_with_the_servers_message(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    piece = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "Hel"}}],
    }
    server.enqueue(
        RawResponse(
            f'data: {json.dumps(piece)}\n\ndata: {{"error": {{"message": "the model is overloaded"}}}}\n\n',
            content_type="text/event-stream",
        )
    )
    chunks: list[StreamingChunk] = []

    with pytest.raises(LLMError, match="the model is overloaded"):
        await make_generator().run_async(user("hi"), streaming_callback=chunks.append)
    assert [c.content for c in chunks] == ["Hel"]


@pytest.mark.parametrize("data", ["[1, 2]", "{not json"], ids=["a list", "not JSON"])
async def test_a_streamed_chunk_that_is_not_a_json_object_is_an_llm_response_error(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator], data: str
) -> None:
    server.enqueue(RawResponse(f"data: {data}\n\ndata: [DONE]\n\n", content_type="text/event-stream"))

    with pytest.raises(LLMResponseError):
        await make_generator().run_async(user("hi"), streaming_callback=lambda chunk: None)


async def test_a_streamed_answer_leaves_no_async_generator_for_the_event_loop_to_finalise(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    # The stream is read to its end after [DONE] (its connection is then reused): an iterator left suspended
    # instead would be finalised by the event loop, a cross-thread wake-up each, several per model call.
    finalised: list[object] = []
    hooks = sys.get_asyncgen_hooks()

    def finalizer(agen: Any) -> None:
        finalised.append(agen)
        assert hooks.finalizer is not None
        hooks.finalizer(agen)

    generator = make_generator()
    server.enqueue_text("warm")  # the client's first call loads its code, which keeps generators of its own
    await generator.run_async(user("hi"), streaming_callback=lambda chunk: None)
    sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=finalizer)
    try:
        for text in ("The disk is full.", "It is not."):
            server.enqueue_text(text)
            await generator.run_async(user("disk?"), streaming_callback=lambda chunk: None)
    finally:
        sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=hooks.finalizer)

    assert finalised == []


async def test_openai_base_url_from_the_environment_is_honoured_with_a_placeholder_key(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    server.enqueue_text("local model here")
    generator = OpenAIChatGenerator(model="llama3.2", max_retries=0)
    try:
        [reply] = (await generator.run_async(user("hi")))["replies"]
    finally:
        await generator.aclose()

    assert reply.text == "local model here"
    assert server.request_headers[0]["Authorization"] == "Bearer not-needed"


async def test_openai_api_key_from_the_environment_is_sent(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    server.enqueue_text("ok")
    generator = OpenAIChatGenerator(api_base_url=server.base_url, max_retries=0)
    try:
        await generator.run_async(user("hi"))
    finally:
        await generator.aclose()

    assert server.request_headers[0]["Authorization"] == "Bearer sk-from-env"


async def test_no_key_and_no_base_url_is_a_clear_llm_error() -> None:
    with pytest.raises(LLMError, match="OPENAI_API_KEY"):
        await OpenAIChatGenerator().run_async(user("hi"))


async def test_warm_up_sends_nothing_and_the_next_call_is_answered(server: FakeOpenAIServer) -> None:
    server.enqueue_text("warm")
    generator = OpenAIChatGenerator(api_key=API_KEY, api_base_url=server.base_url, max_retries=0)
    try:
        await generator.warm_up()
        assert server.request_headers == []
        [reply] = (await generator.run_async(user("hi")))["replies"]
    finally:
        await generator.aclose()

    assert reply.text == "warm"


async def test_warm_up_without_credentials_is_quiet_and_the_call_still_says_what_is_missing() -> None:
    generator = OpenAIChatGenerator()
    await generator.warm_up()
    with pytest.raises(LLMError, match="OPENAI_API_KEY"):
        await generator.run_async(user("hi"))


def test_warm_up_loads_what_the_first_call_would_load_on_the_event_loop() -> None:
    # A fresh interpreter: this process has long imported everything. What the first call imports lazily
    # (the HTTP transport, the chat-completions resource) blocks the event loop for seconds on a busy host.
    script = (
        "import asyncio, sys\n"
        "from bot.llm import OpenAIChatGenerator\n"
        "lazy = ('httpcore2', 'openai.resources.chat.completions')\n"
        "before = [m for m in lazy if m in sys.modules]\n"
        "asyncio.run(OpenAIChatGenerator(api_key='k', api_base_url='http://127.0.0.1:9').warm_up())\n"
        "print(before, [m for m in lazy if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)

    assert done.stdout.strip() == "[] ['httpcore2', 'openai.resources.chat.completions']", done.stderr


def test_sync_run_outside_an_event_loop_works_repeatedly() -> None:
    with FakeOpenAIServer() as srv:
        srv.responder = lambda body: f"echo: {body['messages'][-1]['content']}"
        generator = OpenAIChatGenerator(api_key=API_KEY, api_base_url=srv.base_url, max_retries=0)

        # Each sync call runs on a fresh event loop; a client bound to an earlier loop must not be reused.
        first = generator.run(user("one"))["replies"][0]
        second = generator.run(user("two"))["replies"][0]
        streamed = generator.run(user("three"), streaming_callback=lambda chunk: None)["replies"][0]

    assert [first.text, second.text, streamed.text] == ["echo: one", "echo: two", "echo: three"]


async def test_sync_run_inside_a_running_event_loop_works() -> None:
    asyncio.get_running_loop()  # this test body runs on pytest-asyncio's loop
    with FakeOpenAIServer() as srv:  # served from its own thread: this loop is blocked by the sync call
        srv.enqueue_tool_calls([("get_time", {})])
        generator = OpenAIChatGenerator(api_key=API_KEY, api_base_url=srv.base_url, max_retries=0)
        [reply] = generator.run(user("time?"), tools=TOOLS)["replies"]

    assert reply.tool_call is not None and reply.tool_call.tool_name == "get_time"


async def test_run_async_works_from_one_event_loop_after_another() -> None:
    # One generator used from two loops in turn (e.g. worker threads) must not reuse a client bound to the first.
    texts: list[str | None] = []
    with FakeOpenAIServer() as threaded:
        threaded.responder = lambda body: "from the other loop"
        generator = OpenAIChatGenerator(api_key=API_KEY, api_base_url=threaded.base_url, max_retries=0)

        async def call_and_close() -> str | None:
            try:
                return (await generator.run_async(user("hi")))["replies"][0].text
            finally:
                await generator.aclose()

        texts.append(await asyncio.to_thread(asyncio.run, call_and_close()))
        texts.append(await asyncio.to_thread(asyncio.run, call_and_close()))

    assert texts == ["from the other loop", "from the other loop"]


def test_to_dict_never_contains_the_api_key_and_round_trips() -> None:
    generator = OpenAIChatGenerator(
        model="gpt-4o",
        api_key=API_KEY,
        api_base_url="http://127.0.0.1:1/v1",
        generation_kwargs={"temperature": 0},
        timeout=12.5,
        max_retries=1,
    )
    data = generator.to_dict()

    assert data["type"] == "bot.llm.OpenAIChatGenerator"
    assert API_KEY not in repr(data)
    restored = chat_generator_from_dict(data)
    assert isinstance(restored, OpenAIChatGenerator)
    assert restored.to_dict() == data
    assert restored.api_key is None


def test_a_message_without_a_tool_call_id_is_refused_before_sending() -> None:
    call = ToolCall(tool_name="get_time", arguments={})
    generator = OpenAIChatGenerator(api_key=API_KEY, api_base_url="http://127.0.0.1:1/v1")

    with pytest.raises(ValueError, match="no id"):
        generator.run([ChatMessage.from_user("t"), ChatMessage.from_assistant(tool_calls=[call])])


async def test_the_fake_server_releases_a_delayed_request_when_it_stops() -> None:
    srv = await FakeOpenAIServer().start_async()
    srv.enqueue_delay(30.0, then="never sent")
    generator = OpenAIChatGenerator(api_key=API_KEY, api_base_url=srv.base_url, max_retries=0)
    pending = asyncio.ensure_future(generator.run_async(user("hi")))
    async with asyncio.timeout(5):
        await srv.wait_for_requests(1)  # the request is now held by the delay

    started = time.monotonic()
    await srv.stop_async()
    with pytest.raises(LLMError):
        await pending
    await generator.aclose()

    assert time.monotonic() - started < 3.0


async def test_an_empty_script_answers_an_error_the_client_does_not_retry(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    with pytest.raises(LLMError, match="no scripted response left"):
        await make_generator(max_retries=2).run_async(user("hi"))

    assert len(server.requests) == 1


async def test_an_async_responder_drives_the_conversation(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    async def responder(body: dict[str, Any]) -> str:
        return f"{len(body['messages'])} messages seen"

    server.responder = responder
    [reply] = (await make_generator().run_async(user("a") + user("b")))["replies"]

    assert reply.text == "2 messages seen"

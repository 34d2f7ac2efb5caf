"""How model-server failures reach the agent: broken bodies, hung servers, empty answers (fake OpenAI server)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.agent import Agent
from bot.config import Config, ConfigError
from bot.llm import LLMError, OpenAIChatGenerator
from bot.messages import ChatMessage
from tests.fakes.engine_kit import Harness
from tests.fakes.openai_server import FakeOpenAIServer

API_KEY = "sk-test-0123456789abcdef"
USER = [ChatMessage.from_user("hi")]
SLACK = 0.5  # seconds of scheduling noise allowed above a computed bound


@pytest.fixture(autouse=True)
def _no_ambient_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture
async def generator(server: FakeOpenAIServer) -> AsyncIterator[Any]:
    made: list[OpenAIChatGenerator] = []

    def make(**kwargs: Any) -> OpenAIChatGenerator:
        kwargs.setdefault("max_retries", 0)
        gen = OpenAIChatGenerator(api_key=API_KEY, api_base_url=server.base_url, **kwargs)
        made.append(gen)
        return gen

    yield make
    for gen in made:
        await gen.aclose()


@pytest.mark.parametrize("body", ["<html>502 Bad Gateway</html>", '{"choices": [', ""])
async def test_a_200_whose_body_is_not_json_is_an_llm_error(
    server: FakeOpenAIServer, generator: Any, body: str
) -> None:
    server.enqueue_raw(body)

    with pytest.raises(LLMError) as caught:
        await generator().run_async(USER)

    assert "not valid JSON" in str(caught.value)
    assert server.base_url.rstrip("/") in str(caught.value)
    assert API_KEY not in str(caught.value)


@pytest.mark.parametrize("body", [["not", "a", "completion"], {"status": "ok"}, "42"])
async def test_a_200_with_a_json_body_that_is_not_a_completion_is_an_llm_error(
    server: FakeOpenAIServer, generator: Any, body: Any
) -> None:
    server.enqueue_raw(body)

    with pytest.raises(LLMError) as caught:
        await generator().run_async(USER)

    assert "not a chat completion" in str(caught.value)


async def test_a_long_retry_after_cannot_stretch_the_wait_past_timeout_and_retries(
    server: FakeOpenAIServer, generator: Any
) -> None:
    # the client honours a server's Retry-After of up to two minutes; the generator does not wait that long
    server.enqueue_error(429, headers={"retry-after-ms": "100000"})
    server.enqueue_text("too late")
    bounded = generator(timeout=0.3, max_retries=1)
    await bounded.warm_up()  # the bound is for the call, not for the client's first imports (seconds under load)
    started = time.monotonic()

    with pytest.raises(LLMError) as caught:
        await bounded.run_async(USER)

    assert time.monotonic() - started < 0.3 * 2 + 0.5 + SLACK
    assert "timed out after 1.1 s (all attempts)" in str(caught.value)
    assert len(server.requests) == 1


@pytest.mark.parametrize("empty", ["no_choices", "no_text"])
async def test_an_agent_asks_an_empty_model_twice_then_ends_the_run(
    server: FakeOpenAIServer, generator: Any, empty: str
) -> None:
    for _ in range(5):
        if empty == "no_choices":
            server.enqueue_no_choices()
        else:
            server.enqueue_text("")

    result = await Agent(generator()).run_async(USER)

    assert result["exit_reason"] == "empty"
    assert len(server.requests) == 2


# --- COUNTERSIGN_LLM_TIMEOUT / COUNTERSIGN_LLM_RETRIES ---------------------------------------------------


def test_timeout_and_retries_come_from_the_environment_into_the_generator() -> None:
    config = Config.from_env(
        {"OPENAI_API_KEY": API_KEY, "COUNTERSIGN_LLM_TIMEOUT": "2.5", "COUNTERSIGN_LLM_RETRIES": "0"}
    )

    generator = config.build_generator()

    assert (config.llm_timeout_seconds, config.llm_max_retries) == (2.5, 0)
    assert (generator.timeout, generator.max_retries) == (2.5, 0)


def test_without_the_variables_the_defaults_apply() -> None:
    config = Config.from_env({})

    assert (config.llm_timeout_seconds, config.llm_max_retries) == (60.0, 2)


@pytest.mark.parametrize(
    ("name", "raw", "says"),
    [
        ("COUNTERSIGN_LLM_TIMEOUT", "soon", "must be a number of seconds"),
        ("COUNTERSIGN_LLM_TIMEOUT", "0", "more than 0"),
        ("COUNTERSIGN_LLM_TIMEOUT", "-3", "more than 0"),
        ("COUNTERSIGN_LLM_TIMEOUT", "inf", "more than 0"),
        ("COUNTERSIGN_LLM_TIMEOUT", "nan", "more than 0"),
        ("COUNTERSIGN_LLM_RETRIES", "1.5", "whole number"),
        ("COUNTERSIGN_LLM_RETRIES", "-1", "at least 0"),
    ],
)
def test_a_bad_value_is_a_config_error_naming_the_variable(name: str, raw: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Config.from_env({name: raw})

    assert str(caught.value).startswith(name)
    assert says in str(caught.value)


async def test_a_hung_model_configured_from_the_environment_fails_within_the_configured_bound(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue_hang()
    server.enqueue_hang()
    config = Config.from_env(
        {
            "OPENAI_API_KEY": API_KEY,
            "OPENAI_BASE_URL": server.base_url,
            "COUNTERSIGN_LLM_TIMEOUT": "0.3",
            "COUNTERSIGN_LLM_RETRIES": "1",
        }
    )
    generator = config.build_generator()
    await generator.warm_up()  # the bound is for the call, not for the client's first imports (seconds under load)
    started = time.monotonic()

    try:
        with pytest.raises(LLMError, match="timed out"):
            await Agent(generator).run_async(USER)
    finally:
        await generator.aclose()

    # two attempts of 0.3 s each and the client's backoff of at most 0.5 s between them
    assert 0.3 * 2 <= time.monotonic() - started < 0.3 * 2 + 0.5 + SLACK
    assert len(server.requests) == 2


# --- through the engine: the person is told, once, after two empty answers -----------------------------


async def test_the_engine_tells_the_person_after_two_empty_answers_from_the_server(
    server: FakeOpenAIServer, generator: Any, tmp_path: Any
) -> None:
    server.enqueue_no_choices()
    server.enqueue_text("")
    for _ in range(5):
        server.enqueue_text("never asked for")
    harness = await Harness.open(tmp_path, generator=generator())
    try:
        await harness.say("hello?")
        await harness.engine.wait_idle()
        replies = harness.surface.replies_in(harness.thread())
    finally:
        await harness.close()

    assert replies == ["(The model returned an empty answer twice; please try again.)"]
    assert len(server.requests) == 2


async def test_a_hung_streaming_model_is_reported_within_the_bound_too(
    server: FakeOpenAIServer, generator: Any
) -> None:
    server.enqueue_hang()
    server.enqueue_hang()
    chunks: list[Any] = []
    bounded = generator(timeout=0.3, max_retries=1)
    await bounded.warm_up()  # the bound is for the call, not for the client's first imports (seconds under load)
    started = time.monotonic()

    with pytest.raises(LLMError, match="timed out"):
        await bounded.run_async(USER, streaming_callback=chunks.append)

    assert time.monotonic() - started < 0.3 * 2 + 0.5 + SLACK
    assert chunks == []
    assert len(server.requests) == 2

"""Server-specific generation parameters (vLLM's top_k, llama.cpp's min_p, ...) reach the model server.

The openai client refuses a keyword it does not know, so such keys travel in ``extra_body``; the
client's own keywords (temperature, max_tokens) stay keywords. Checked over real HTTP against the
fake OpenAI server, from the generator, the agent, the configuration and the real ``countersign``
command.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from bot.agent import Agent
from bot.config import Config, ConfigError
from bot.llm import StreamingChunk
from bot.llm.openai_generator import OpenAIChatGenerator
from bot.llm.openai_params import create_arguments
from bot.messages import ChatMessage
from tests.fakes.openai_server import FakeOpenAIServer
from tests.unit.bot.test_cli import TIMEOUT, clean_env

SERVER_PARAMETERS: dict[str, Any] = {
    "top_k": 20,
    "repetition_penalty": 1.05,
    "min_p": 0.05,
    "chat_template_kwargs": {"enable_thinking": False},
}
"""What vLLM takes beyond OpenAI's parameters (llama.cpp and others take some of them too)."""


def user(text: str) -> list[ChatMessage]:
    return [ChatMessage.from_user(text)]


@pytest.fixture(autouse=True)
def _no_ambient_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture
async def make_generator(server: FakeOpenAIServer) -> AsyncIterator[Callable[..., OpenAIChatGenerator]]:
    """Generators aimed at the fake server; their clients are closed afterwards."""
    made: list[OpenAIChatGenerator] = []

    def make(**kwargs: Any) -> OpenAIChatGenerator:
        generator = OpenAIChatGenerator(api_key="sk-test", api_base_url=server.base_url, max_retries=0, **kwargs)
        made.append(generator)
        return generator

    yield make
    for generator in made:
        await generator.aclose()


async def ignore(chunk: StreamingChunk) -> None:
    """A streaming callback: the tests read the request, not the chunks."""


# --- the split ----------------------------------------------------------------------------------------


def test_the_clients_own_keywords_stay_keywords_and_every_other_key_goes_in_extra_body() -> None:
    arguments = create_arguments({"temperature": 0.2, "max_tokens": 64, **SERVER_PARAMETERS})

    assert arguments == {"temperature": 0.2, "max_tokens": 64, "extra_body": SERVER_PARAMETERS}


def test_explicit_request_options_merge_across_layers_with_the_later_layer_winning() -> None:
    arguments = create_arguments(
        {"top_k": 20, "extra_body": {"min_p": 0.05}, "extra_headers": {"X-Team": "ops"}, "extra_query": {"a": "1"}},
        {"top_k": 40, "extra_body": {"typical_p": 0.9}, "extra_headers": {"X-Run": "r1"}, "extra_query": {"b": "2"}},
    )

    assert arguments == {
        "extra_body": {"top_k": 40, "min_p": 0.05, "typical_p": 0.9},
        "extra_headers": {"X-Team": "ops", "X-Run": "r1"},
        "extra_query": {"a": "1", "b": "2"},
    }


# --- over the wire --------------------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True], ids=["non-streaming", "streaming"])
async def test_server_parameters_arrive_in_the_body_exactly_beside_temperature_and_max_tokens(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator], streaming: bool
) -> None:
    server.enqueue_text("ok")
    generator = make_generator(generation_kwargs={"temperature": 0.2, "max_tokens": 64, **SERVER_PARAMETERS})

    [reply] = (await generator.run_async(user("hi"), streaming_callback=ignore if streaming else None))["replies"]

    assert reply.text == "ok"
    body = server.requests[0]
    assert {key: body[key] for key in SERVER_PARAMETERS} == SERVER_PARAMETERS
    assert (body["temperature"], body["max_tokens"]) == (0.2, 64)
    assert "extra_body" not in body
    assert body.get("stream", False) is streaming


@pytest.mark.parametrize("streaming", [False, True], ids=["non-streaming", "streaming"])
async def test_a_runs_generation_kwargs_merge_with_the_generators_own(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator], streaming: bool
) -> None:
    server.enqueue_text("ok")
    generator = make_generator(
        generation_kwargs={"top_k": 20, "extra_body": {"min_p": 0.05}, "extra_headers": {"X-Team": "ops"}},
        default_headers={"X-Gateway": "gw"},
    )

    await generator.run_async(
        user("hi"),
        generation_kwargs={
            "repetition_penalty": 1.05,
            "extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
            "extra_headers": {"X-Run": "r1"},
            "extra_query": {"api-version": "2026-01-01"},
        },
        streaming_callback=ignore if streaming else None,
    )

    body = server.requests[0]
    assert {key: body[key] for key in SERVER_PARAMETERS} == SERVER_PARAMETERS
    headers = {k.lower(): v for k, v in server.request_headers[0].items()}
    assert (headers["x-team"], headers["x-run"], headers["x-gateway"]) == ("ops", "r1", "gw")
    assert server.request_queries[0] == {"api-version": "2026-01-01"}


def test_the_sync_run_sends_server_parameters_too() -> None:
    with FakeOpenAIServer() as srv:
        srv.enqueue_text("ok")
        generator = OpenAIChatGenerator(api_key="sk-test", api_base_url=srv.base_url, max_retries=0)

        generator.run(user("hi"), generation_kwargs={"top_k": 5, "temperature": 0})

    assert (srv.requests[0]["top_k"], srv.requests[0]["temperature"]) == (5, 0)


async def test_an_agent_runs_generation_kwargs_reach_the_server(
    server: FakeOpenAIServer, make_generator: Callable[..., OpenAIChatGenerator]
) -> None:
    server.enqueue_text("ok")
    agent = Agent(chat_generator=make_generator(generation_kwargs={"top_k": 20}))

    result = await agent.run_async(user("hi"), generation_kwargs={"min_p": 0.05, "max_tokens": 32})

    assert result["last_message"].text == "ok"
    body = server.requests[0]
    assert (body["top_k"], body["min_p"], body["max_tokens"]) == (20, 0.05, 32)


async def test_countersign_generation_kwargs_reach_the_server_from_the_configuration(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue_text("ok")
    config = Config.from_env(
        {
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "sk-test",
            "COUNTERSIGN_LLM_RETRIES": "0",
            "COUNTERSIGN_GENERATION_KWARGS": '{"top_k": 20, "repetition_penalty": 1.05, "temperature": 0.3}',
        }
    )
    generator = config.build_generator()
    try:
        [reply] = (await generator.run_async(user("hi"), streaming_callback=ignore))["replies"]
    finally:
        await generator.aclose()

    assert reply.text == "ok"
    body = server.requests[0]
    assert (body["top_k"], body["repetition_penalty"], body["temperature"]) == (20, 1.05, 0.3)


# --- refused at start -----------------------------------------------------------------------------------


def refused(value: str) -> str:
    with pytest.raises(ConfigError) as info:
        Config.from_env({"COUNTERSIGN_GENERATION_KWARGS": value})
    return str(info.value)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ('{"temperature": "hot"}', "temperature must be a number, got a string"),
        ('{"max_tokens": "x"}', "max_tokens must be a whole number, got a string"),
        ('{"max_tokens": 1.5}', "max_tokens must be a whole number, got 1.5"),
        ('{"top_p": true}', "top_p must be a number, got true"),
        ('{"stop": 5}', "stop must be a string or a list, got 5"),
        ('{"extra_body": [1]}', "extra_body must be an object, got a list"),
        ('{"extra_headers": {"X-Team": 1}}', "extra_headers: the value of X-Team must be a string, got 1"),
    ],
)
def test_a_known_parameter_of_the_wrong_type_is_refused_naming_the_variable(value: str, problem: str) -> None:
    assert refused(value) == f"COUNTERSIGN_GENERATION_KWARGS: {problem}"


def test_server_parameters_and_well_typed_known_ones_are_accepted() -> None:
    value = (
        '{"temperature": 1, "max_tokens": 800, "seed": null, "stop": ["END"], "reasoning_effort": "low", '
        '"top_k": "anything the server takes", "chat_template_kwargs": {"enable_thinking": false}, '
        '"extra_body": {"min_p": 0.05}, "extra_query": {"api-version": "1"}}'
    )

    config = Config.from_env({"COUNTERSIGN_GENERATION_KWARGS": value})

    assert config.generation_kwargs["top_k"] == "anything the server takes"
    assert config.generation_kwargs["extra_body"] == {"min_p": 0.05}


@pytest.mark.parametrize(
    ("value", "line"),
    [
        ('{"temperature": "hot"}', "COUNTERSIGN_GENERATION_KWARGS: temperature must be a number, got a string"),
        (
            '["top_k", 20]',
            'COUNTERSIGN_GENERATION_KWARGS must be a JSON object like {"temperature": 0.2, "max_tokens": 800}, '
            "got a list",
        ),
    ],
    ids=["wrong-type", "not-an-object"],
)
def test_the_countersign_command_refuses_bad_generation_kwargs_with_one_line_and_exit_code_2(
    tmp_path: Path, value: str, line: str
) -> None:
    script = Path(sys.executable).with_name("countersign")

    result = subprocess.run(
        [str(script), "chat", "--user", "ana"],
        cwd=tmp_path,
        env=clean_env(tmp_path, COUNTERSIGN_GENERATION_KWARGS=value, OPENAI_API_KEY="sk-test"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )

    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [f"countersign: configuration error: {line}"]

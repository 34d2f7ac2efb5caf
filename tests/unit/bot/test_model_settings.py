"""The model's settings: system prompt, generation parameters, step limit and gateway headers.

Each is read from the environment once, refused at start with one line naming the variable, and,
where it changes what goes over the wire, checked against the fake OpenAI server over real HTTP.
"""

from __future__ import annotations

import pytest

from bot.cli import main
from bot.config import DEFAULT_SYSTEM_PROMPT, Config, ConfigError
from bot.engine.engine import Engine
from bot.engine.model import Inbound
from bot.messages import ChatMessage
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.recording_surface import RecordingSurface
from tests.unit.bot.test_cli import terminal  # noqa: F401  (the in-process fixture of the CLI tests)

GATEWAY_SECRET = "gw-Zq81-very-secret-value"


def refused(environ: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        Config.from_env(environ)
    return str(info.value)


# --- COUNTERSIGN_SYSTEM_PROMPT ----------------------------------------------------------------------------


def test_the_system_prompt_is_the_text_given_or_the_default():
    assert Config.from_env({}).system_prompt == DEFAULT_SYSTEM_PROMPT
    assert Config.from_env({"COUNTERSIGN_SYSTEM_PROMPT": "  You run the payments team's chat.  "}).system_prompt == (
        "You run the payments team's chat."
    )


def test_an_at_sign_reads_the_system_prompt_from_a_file(tmp_path):
    prompt = tmp_path / "prompt.md"
    prompt.write_text("You are the on-call helper.\nNever restart databases.\n", encoding="utf-8")

    assert Config.from_env({"COUNTERSIGN_SYSTEM_PROMPT": f"@{prompt}"}).system_prompt == (
        "You are the on-call helper.\nNever restart databases."
    )


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda folder: folder / "missing.md", "does not exist"),
        (lambda folder: folder, "is a folder, not a file"),
        (lambda folder: _write(folder / "empty.md", b"  \n"), "is empty"),
        (lambda folder: _write(folder / "latin1.md", "Café".encode("latin-1")), "is not UTF-8 text"),
    ],
)
def test_a_system_prompt_file_that_cannot_be_used_is_refused(tmp_path, make, problem):
    path = make(tmp_path)

    message = refused({"COUNTERSIGN_SYSTEM_PROMPT": f"@{path}"})

    assert message.startswith("COUNTERSIGN_SYSTEM_PROMPT: ")
    assert problem in message


def test_a_system_prompt_longer_than_the_limit_is_refused():
    assert "at most 100000 are allowed" in refused({"COUNTERSIGN_SYSTEM_PROMPT": "x" * 100_001})


# --- COUNTERSIGN_GENERATION_KWARGS -----------------------------------------------------------------------


def test_generation_kwargs_are_a_json_object():
    config = Config.from_env({"COUNTERSIGN_GENERATION_KWARGS": '{"temperature": 0.2, "max_tokens": 800}'})

    assert config.generation_kwargs == {"temperature": 0.2, "max_tokens": 800}
    assert Config.from_env({}).generation_kwargs == {}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("temperature=0", "COUNTERSIGN_GENERATION_KWARGS is not valid JSON (line 1, column 1)"),
        ("[1, 2]", "COUNTERSIGN_GENERATION_KWARGS must be a JSON object like"),
        ('{"model": "gpt-5"}', "COUNTERSIGN_GENERATION_KWARGS: model cannot be set here"),
        ('{"stream": true, "tools": []}', "COUNTERSIGN_GENERATION_KWARGS: stream, tools cannot be set here"),
    ],
)
def test_generation_kwargs_that_are_not_an_object_or_set_what_countersign_sets_are_refused(value, problem):
    assert refused({"COUNTERSIGN_GENERATION_KWARGS": value}).startswith(problem)


# --- COUNTERSIGN_MAX_STEPS --------------------------------------------------------------------------------


def test_the_step_limit_defaults_to_100_and_takes_a_whole_number():
    assert Config.from_env({}).max_agent_steps == 100
    assert Config.from_env({"COUNTERSIGN_MAX_STEPS": "8"}).max_agent_steps == 8


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("0", "COUNTERSIGN_MAX_STEPS must be at least 1, got 0"),
        ("1001", "COUNTERSIGN_MAX_STEPS must be at most 1000, got 1001"),
        ("many", "COUNTERSIGN_MAX_STEPS must be a whole number, got 'many'"),
    ],
)
def test_a_step_limit_out_of_range_is_refused(value, problem):
    assert refused({"COUNTERSIGN_MAX_STEPS": value}) == problem


# --- COUNTERSIGN_LLM_HEADERS ------------------------------------------------------------------------------


def test_gateway_headers_are_a_json_object_of_strings_kept_out_of_the_config_repr():
    config = Config.from_env({"COUNTERSIGN_LLM_HEADERS": f'{{"api-key": "{GATEWAY_SECRET}", "X-Team": "ops"}}'})

    assert config.llm_headers == {"api-key": GATEWAY_SECRET, "X-Team": "ops"}
    assert GATEWAY_SECRET not in repr(config)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (f'{{"api-key": {GATEWAY_SECRET}}}', "COUNTERSIGN_LLM_HEADERS is not valid JSON (line 1, column 13)"),
        (f'["{GATEWAY_SECRET}"]', "COUNTERSIGN_LLM_HEADERS must be a JSON object like"),
        ('{"bad header": "x"}', "COUNTERSIGN_LLM_HEADERS: 'bad header' is not a valid HTTP header name"),
        ('{"X-Retries": 3}', "COUNTERSIGN_LLM_HEADERS: the value of X-Retries must be a string, got a int"),
        (
            f'{{"api-key": "{GATEWAY_SECRET}\\r\\nX-Evil: 1"}}',
            "COUNTERSIGN_LLM_HEADERS: the value of api-key holds line breaks or control characters",
        ),
    ],
)
def test_bad_gateway_headers_are_refused_without_echoing_a_value(value, problem):
    message = refused({"COUNTERSIGN_LLM_HEADERS": value})

    assert message.startswith(problem)
    assert GATEWAY_SECRET not in message


def test_a_bad_headers_setting_stops_the_program_with_one_line_and_no_secret(terminal, monkeypatch, capsys):  # noqa: F811
    monkeypatch.setenv("COUNTERSIGN_LLM_HEADERS", f"{{'api-key': '{GATEWAY_SECRET}'}}")

    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("countersign: configuration error: COUNTERSIGN_LLM_HEADERS is not valid JSON")
    assert err.count("\n") == 1
    assert GATEWAY_SECRET not in err


# --- COUNTERSIGN_STREAM_UPDATE_SECONDS --------------------------------------------------------------------


def test_the_stream_update_interval_defaults_to_one_second_and_must_be_positive():
    assert Config.from_env({}).stream_update_seconds == 1.0
    assert Config.from_env({"COUNTERSIGN_STREAM_UPDATE_SECONDS": "0.25"}).stream_update_seconds == 0.25
    assert refused({"COUNTERSIGN_STREAM_UPDATE_SECONDS": "0"}) == (
        "COUNTERSIGN_STREAM_UPDATE_SECONDS must be more than 0 seconds, got '0'"
    )


# --- over the wire ----------------------------------------------------------------------------------------


async def test_headers_and_generation_kwargs_reach_the_model_server_over_http():
    async with FakeOpenAIServer() as llm:
        llm.enqueue_text("hello")
        config = Config.from_env(
            {
                "OPENAI_BASE_URL": llm.base_url,
                "OPENAI_API_KEY": "test",
                "COUNTERSIGN_LLM_HEADERS": f'{{"api-key": "{GATEWAY_SECRET}", "X-Team": "ops"}}',
                "COUNTERSIGN_GENERATION_KWARGS": '{"temperature": 0.1, "max_tokens": 64, "reasoning_effort": "low"}',
            }
        )
        generator = config.build_generator()
        try:
            reply = (await generator.run_async([ChatMessage.from_user("hi")]))["replies"][0]
        finally:
            await generator.aclose()

    assert reply.text == "hello"
    headers = {k.lower(): v for k, v in llm.request_headers[0].items()}
    assert headers["api-key"] == GATEWAY_SECRET
    assert headers["x-team"] == "ops"
    body = llm.requests[0]
    assert (body["temperature"], body["max_tokens"], body["reasoning_effort"]) == (0.1, 64, "low")
    assert GATEWAY_SECRET not in repr(generator.to_dict())


async def test_a_model_error_never_shows_a_gateway_header_value():
    async with FakeOpenAIServer() as llm:
        llm.enqueue_error(401, {"error": {"message": f"bad gateway key {GATEWAY_SECRET}"}})
        config = Config.from_env(
            {
                "OPENAI_BASE_URL": llm.base_url,
                "OPENAI_API_KEY": "test",
                "COUNTERSIGN_LLM_RETRIES": "0",
                "COUNTERSIGN_LLM_HEADERS": f'{{"api-key": "{GATEWAY_SECRET}"}}',
            }
        )
        generator = config.build_generator()
        try:
            with pytest.raises(Exception) as failed:
                await generator.run_async([ChatMessage.from_user("hi")])
        finally:
            await generator.aclose()

    assert "bad gateway key ••••••" in str(failed.value)
    assert GATEWAY_SECRET not in str(failed.value)


async def test_the_engine_sends_the_system_prompt_and_stops_at_the_step_limit(tmp_path):
    async with FakeOpenAIServer() as llm:
        # The model keeps asking for a harmless tool: with a limit of 2 steps the run stops after two calls.
        llm.responder = lambda body: _tool_call("get_time")
        config = Config.from_env(
            {
                "OPENAI_BASE_URL": llm.base_url,
                "OPENAI_API_KEY": "test",
                "COUNTERSIGN_SYSTEM_PROMPT": "You are the payments team's helper.",
                "COUNTERSIGN_MAX_STEPS": "2",
                "COUNTERSIGN_DB": str(tmp_path / "cs.db"),
            }
        )
        engine = await Engine.create(config)
        surface = RecordingSurface()
        engine.register_surface("slack", surface)
        await engine.start(sweep=False)
        try:
            await engine.handle_message(Inbound("slack", "T1", "C1", "1.0", "U1", "what time is it?", "Ev1"))
        finally:
            await engine.stop()

    assert len(llm.requests) == 2
    assert llm.requests[0]["messages"][0] == {"role": "system", "content": "You are the payments team's helper."}
    assert "(I stopped after too many steps without finishing.)" in surface.replies[-1].text


def _tool_call(name: str):
    from tests.fakes.openai_server import ToolCallsResponse

    return ToolCallsResponse([(name, {})])


def _write(path, data: bytes):
    path.write_bytes(data)
    return path

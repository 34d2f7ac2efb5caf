"""OfflineDemoChatGenerator: a rule-based stand-in that drives the demo tools without a model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest

from bot.config import Config
from bot.demo_tools import build_demo_toolset
from bot.llm import ANNOUNCEMENT, ChatGenerator, OfflineDemoChatGenerator, StreamingChunk
from bot.messages import ChatMessage, ToolCall
from bot.tools import Toolset, tool

PHRASE = "offline demo model — set OPENAI_API_KEY or OPENAI_BASE_URL for a real LLM"


@pytest.fixture
def tools(tmp_path: Path) -> Toolset:
    return build_demo_toolset(tmp_path / "sandbox")


def ask(text: str, tools: Toolset, history: list[ChatMessage] | None = None) -> ChatMessage:
    messages = [*(history or []), ChatMessage.from_user(text)]
    return OfflineDemoChatGenerator().run(messages, tools=tools)["replies"][0]


def test_the_announcement_is_the_exact_phrase() -> None:
    assert ANNOUNCEMENT == PHRASE
    assert isinstance(OfflineDemoChatGenerator(), ChatGenerator)


def test_the_first_text_reply_announces_the_offline_model_and_later_ones_do_not(tools: Toolset) -> None:
    first = ask("hello", tools)
    second = ask("hello again", tools, history=[ChatMessage.from_user("hello"), first])

    assert PHRASE in (first.text or "")
    assert PHRASE not in (second.text or "")


def test_unknown_requests_get_a_help_text_listing_what_it_can_do(tools: Toolset) -> None:
    reply = ask("what's the weather?", tools)

    assert reply.tool_calls == []
    for example in ("list files", "read notes.txt", "delete old.log", "restart nginx", "what time is it?"):
        assert example in (reply.text or "")
    assert reply.meta["finish_reason"] == "stop"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("list the files please", [("list_files", {})]),
        ("ls", [("list_files", {})]),
        ("read notes.txt", [("read_file", {"path": "notes.txt"})]),
        ("please delete old.log", [("delete_file", {"path": "old.log"})]),
        ("Remove the file 'notes.txt'.", [("delete_file", {"path": "notes.txt"})]),
        ("restart nginx", [("restart_service", {"service": "nginx"})]),
        ("force restart the service postgres", [("restart_service", {"service": "postgres", "force": True})]),
        ("what time is it?", [("get_time", {})]),
        (
            "delete old.log and delete notes.txt",
            [("delete_file", {"path": "old.log"}), ("delete_file", {"path": "notes.txt"})],
        ),
    ],
)
def test_commands_become_tool_calls(tools: Toolset, text: str, expected: list[tuple[str, dict]]) -> None:
    reply = ask(text, tools)

    assert [(c.tool_name, c.arguments) for c in reply.tool_calls] == expected
    assert all(c.id for c in reply.tool_calls)
    assert reply.meta["finish_reason"] == "tool_calls"
    assert reply.meta["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def test_only_tools_it_was_given_are_called(tools: Toolset) -> None:
    without_delete = Toolset(t for t in tools if t.name != "delete_file")

    reply = ask("delete old.log", without_delete)

    assert reply.tool_calls == []
    assert "delete_file is not among the tools" in (reply.text or "")


def test_a_rejected_call_is_summarised_as_failed_or_rejected_with_its_text(tools: Toolset) -> None:
    call = ToolCall(tool_name="delete_file", arguments={"path": "old.log"}, id="call_1")
    rejection = "Tool execution for 'delete_file' was rejected by the user. With user feedback: keep it"
    history = [
        ChatMessage.from_user("delete old.log"),
        ChatMessage.from_assistant(tool_calls=[call]),
        ChatMessage.from_tool(rejection, origin=call, error=True),
    ]

    reply = OfflineDemoChatGenerator().run(history, tools=tools)["replies"][0]

    assert reply.tool_calls == []
    assert "failed or was rejected" in (reply.text or "")
    assert rejection in (reply.text or "")


def test_it_drives_delete_then_summarises_the_result(tools: Toolset, tmp_path: Path) -> None:
    generator = OfflineDemoChatGenerator()
    messages = [ChatMessage.from_user("delete old.log")]

    [call_reply] = generator.run(messages, tools=tools)["replies"]
    [call] = call_reply.tool_calls
    tool = next(t for t in tools if t.name == call.tool_name)
    result = tool.invoke(**call.arguments)
    messages += [call_reply, ChatMessage.from_tool(result, origin=call)]
    [summary] = generator.run(messages, tools=tools)["replies"]

    assert not (tmp_path / "sandbox" / "old.log").exists()
    assert "Deleted old.log." in (summary.text or "")
    assert PHRASE in (summary.text or "")  # its first text reply of the conversation
    assert summary.meta["finish_reason"] == "stop"


async def test_run_async_streams_the_text_as_one_chunk(tools: Toolset) -> None:
    chunks: list[StreamingChunk] = []

    result = await OfflineDemoChatGenerator().run_async(
        [ChatMessage.from_user("hi")], tools=tools, streaming_callback=chunks.append
    )

    assert [c.content for c in chunks] == [result["replies"][0].text]


def test_the_offline_chat_path_never_imports_the_openai_client(tmp_path: Path) -> None:
    # Importing openai takes over a second; `countersign chat` with the offline model must not pay it.
    # A fresh interpreter: this test process may have imported openai for other tests already.
    script = (
        "import sys\n"
        "from bot.config import Config\n"
        "import adapters.console.chat\n"
        "generator = Config.from_env({}).build_generator()\n"
        "print(type(generator).__name__, 'openai' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["OfflineDemoChatGenerator", "False"]


def test_a_configured_model_still_builds_the_openai_generator() -> None:
    generator = Config.from_env({"OPENAI_API_KEY": "sk-test"}).build_generator()
    assert type(generator).__name__ == "OpenAIChatGenerator"


# --- any configured tool: `call`, a word match, and the listing -----------------------------------------


def _own_tools() -> Toolset:
    @tool
    def scale_service(service: str, replicas: int, region: Literal["eu", "us"] = "eu") -> str:
        """Scale a service to a number of replicas.

        :param service: Service name.
        :param replicas: How many.
        :param region: Where.
        """
        return f"{service} {replicas} {region}"

    @tool
    def tag_release(version: str, labels: list[str], dry_run: bool = False, extra: dict | None = None) -> str:
        """Tag a release."""
        return version

    return Toolset([scale_service, tag_release])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("call scale_service service=checkout replicas=3", ("scale_service", {"service": "checkout", "replicas": 3})),
        (
            'call tag_release version=1.2 labels=\'["a", "b"]\' dry_run=yes extra=\'{"k": 1}\'',
            ("tag_release", {"version": "1.2", "labels": ["a", "b"], "dry_run": True, "extra": {"k": 1}}),
        ),
        ("scale to 3 replicas the checkout", ("scale_service", {"service": "checkout", "replicas": 3})),
        ("scale checkout to 3 replicas", ("scale_service", {"service": "checkout", "replicas": 3})),
        (
            "please scale service=web replicas=2 region=us",
            ("scale_service", {"service": "web", "replicas": 2, "region": "us"}),
        ),
    ],
)
def test_the_offline_model_calls_any_configured_tool(text: str, expected: tuple[str, dict]) -> None:
    reply = ask(text, _own_tools())

    assert [(c.tool_name, c.arguments) for c in reply.tool_calls] == [expected]
    assert [list(c.arguments) for c in reply.tool_calls] == [list(expected[1])]  # in the schema's order


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("call scale_service service=checkout replicas=three", "replicas: 'three' is not a whole number"),
        ("call scale_service service=checkout", "scale_service needs replicas"),
        ("call scale_service size=3", "scale_service has no parameter 'size'"),
        ("call restart_service service=x", "restart_service is not among the configured tools"),
        ("call tag_release version=1 labels=nope", "is not JSON"),
    ],
)
def test_a_call_that_does_not_fit_says_why_and_lists_the_tools(text: str, problem: str) -> None:
    reply = ask(text, _own_tools())

    assert reply.tool_calls == []
    assert problem in (reply.text or "")
    assert "call scale_service service=<string> replicas=<integer> [region=<string>]" in (reply.text or "")


def test_without_a_match_the_reply_lists_the_configured_tools_and_the_call_syntax() -> None:
    for text in ("hello", "list files"):
        reply = ask(text, _own_tools())

        assert reply.tool_calls == []
        assert "`call <tool> key=value …`" in (reply.text or "")
        assert "- `call tag_release version=<string> labels=<array>" in (reply.text or "")
        assert "I have no tools" not in (reply.text or "")

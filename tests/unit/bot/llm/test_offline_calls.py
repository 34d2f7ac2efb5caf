"""The offline model calls any configured tool: ``call <tool> key=value``, a word match, or a list of tools."""

from __future__ import annotations

from typing import Literal

import pytest

from bot.llm import OfflineDemoChatGenerator
from bot.messages import ChatMessage
from bot.tools import Toolset, tool


@tool(confirmation_default="always")
def scale_service(service: str, replicas: int, region: Literal["eu", "us"] = "eu") -> str:
    """Scale a service to a number of replicas.

    :param service: Service name.
    :param replicas: How many instances should run.
    :param region: Where to scale it.
    """
    return f"{service} in {region} now runs {replicas} replicas"


@tool(confirmation_default="never")
def service_status(service: str) -> str:
    """Tell whether a service is healthy.

    :param service: Service name.
    """
    return f"{service}: healthy"


@tool
def tag_release(labels: list[str], meta: dict[str, int], dry_run: bool = False) -> str:
    """Tag a release.

    :param labels: Labels.
    :param meta: Numbers.
    :param dry_run: Only pretend.
    """
    return "ok"


TOOLS = Toolset([scale_service, service_status, tag_release])


def ask(text: str) -> ChatMessage:
    return OfflineDemoChatGenerator().run([ChatMessage.from_user(text)], tools=[TOOLS])["replies"][0]


def only_call(reply: ChatMessage) -> tuple[str, dict[str, object]]:
    assert len(reply.tool_calls) == 1, reply.text
    return reply.tool_calls[0].tool_name, reply.tool_calls[0].arguments


def test_call_types_each_value_by_the_tools_schema() -> None:
    name, arguments = only_call(ask("call scale_service service=checkout replicas=3 region=us"))

    assert name == "scale_service"
    assert arguments == {"service": "checkout", "replicas": 3, "region": "us"}


def test_call_takes_json_for_lists_and_objects_and_words_for_booleans() -> None:
    reply = ask("""call tag_release labels='["a","b c"]' meta='{"build": 7}' dry_run=yes""")

    assert only_call(reply) == ("tag_release", {"labels": ["a", "b c"], "meta": {"build": 7}, "dry_run": True})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("call scale_service service=checkout replicas=three", "replicas must be a whole number"),
        ("call scale_service service=checkout", "replicas"),
        ("call scale_service service=checkout replicas=3 region=mars", "region"),
        ("call scale_service checkout", "is not key=value"),
        ("call nope x=1", "nope is not among the tools I was given"),
        ("call scale_service service='unclosed", "could not read that call"),
    ],
)
def test_a_call_that_does_not_fit_says_what_is_wrong_and_how_to_call_it(text: str, expected: str) -> None:
    reply = ask(text)

    assert reply.tool_calls == []
    assert expected in (reply.text or "")
    if "not among" not in expected and "could not read" not in expected:
        assert "call scale_service service=STRING replicas=INTEGER [region=STRING]" in (reply.text or "")


def test_plain_words_naming_a_tool_call_it_with_the_values_they_carry() -> None:
    assert only_call(ask("scale checkout to 3 replicas")) == (
        "scale_service",
        {"service": "checkout", "replicas": 3},
    )
    assert only_call(ask("what is the service status of payments?")) == (
        "service_status",
        {"service": "payments"},
    )


def test_words_missing_a_required_value_call_nothing_and_list_the_tools_with_the_call_syntax() -> None:
    reply = ask("scale it up")

    assert reply.tool_calls == []
    text = reply.text or ""
    assert "My tools are scale_service, service_status, tag_release" in text
    assert "call service_status service=STRING" in text
    assert "I have no tools" not in text


def test_a_demo_phrase_for_a_tool_not_on_offer_still_lists_the_configured_tools() -> None:
    reply = ask("list files")

    assert reply.tool_calls == []
    assert "list_files is not among the tools I was given" in (reply.text or "")
    assert "call scale_service" in (reply.text or "")


def test_with_no_tools_it_says_it_has_none() -> None:
    reply = OfflineDemoChatGenerator().run([ChatMessage.from_user("call x")], tools=[])["replies"][0]

    assert "x is not among the tools I was given" in (reply.text or "")
    none = OfflineDemoChatGenerator().run([ChatMessage.from_user("hi")], tools=[])["replies"][0]
    assert "I have no tools to call" in (none.text or "")

"""Streaming callbacks of the wrong kind are refused as Haystack refuses them, the agent's own first.

``run`` takes plain callbacks and ``run_async`` async ones. Haystack's ``select_streaming_callback``
checks the init callback (given to ``Agent(...)``), then the run-time one, each with its own text;
code written for Haystack matches on those texts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bot.agent import Agent
from bot.llm import ScriptedChatGenerator, StreamingChunk
from bot.messages import ChatMessage
from tests.fakes.agent_kit import says

USER = ChatMessage.from_user("Hello")


async def async_callback(chunk: StreamingChunk) -> None:
    """An async streaming callback (for run_async only)."""


def sync_callback(chunk: StreamingChunk) -> None:
    """A plain streaming callback (for run only)."""


def agent_with(init_callback: Callable[..., Any] | None) -> tuple[Agent, ScriptedChatGenerator]:
    generator = ScriptedChatGenerator([says("hi")])
    return Agent(chat_generator=generator, streaming_callback=init_callback), generator


# --- the four combinations --------------------------------------------------------------------------


def test_run_refuses_an_async_init_callback_before_calling_the_model() -> None:
    agent, generator = agent_with(async_callback)

    with pytest.raises(ValueError) as refused:
        agent.run([USER])

    assert str(refused.value) == "The init callback cannot be a coroutine."
    assert generator.calls == []


async def test_run_async_refuses_a_sync_init_callback_before_calling_the_model() -> None:
    agent, generator = agent_with(sync_callback)

    with pytest.raises(ValueError) as refused:
        await agent.run_async([USER])

    assert str(refused.value) == "The init callback must be async compatible."
    assert generator.calls == []


def test_run_refuses_an_async_runtime_callback() -> None:
    agent, generator = agent_with(None)

    with pytest.raises(ValueError) as refused:
        agent.run([USER], streaming_callback=async_callback)

    assert str(refused.value) == "The runtime callback cannot be a coroutine."
    assert generator.calls == []


async def test_run_async_refuses_a_sync_runtime_callback() -> None:
    agent, generator = agent_with(None)

    with pytest.raises(ValueError) as refused:
        await agent.run_async([USER], streaming_callback=sync_callback)

    assert str(refused.value) == "The runtime callback must be async compatible."
    assert generator.calls == []


# --- order, and the right kinds ---------------------------------------------------------------------


def test_the_init_callback_is_checked_first_even_when_a_runtime_callback_of_the_right_kind_is_given() -> None:
    agent, _ = agent_with(async_callback)

    with pytest.raises(ValueError, match=r"^The init callback cannot be a coroutine\.$"):
        agent.run([USER], streaming_callback=sync_callback)


async def test_a_right_init_callback_does_not_excuse_a_wrong_runtime_one() -> None:
    agent, _ = agent_with(async_callback)

    with pytest.raises(ValueError, match=r"^The runtime callback must be async compatible\.$"):
        await agent.run_async([USER], streaming_callback=sync_callback)


def test_a_plain_init_callback_receives_the_reply_of_run() -> None:
    seen: list[str] = []
    agent, _ = agent_with(lambda chunk: seen.append(chunk.content))

    agent.run([USER])

    assert seen == ["hi"]


async def test_an_async_init_callback_receives_the_reply_of_run_async() -> None:
    seen: list[str] = []

    async def collect(chunk: StreamingChunk) -> None:
        seen.append(chunk.content)

    agent, _ = agent_with(collect)

    await agent.run_async([USER])

    assert seen == ["hi"]

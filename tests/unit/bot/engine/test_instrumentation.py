"""The engine's model-call tap: it counts latency, errors and tokens and is otherwise the generator it wraps."""

from __future__ import annotations

import inspect

import pytest

from bot.engine.instrumentation import ObservedChatGenerator
from bot.llm import LLMError, ScriptedChatGenerator
from bot.messages import ChatMessage
from bot.metrics import PrometheusObserver


class HaystackStyle:
    """A generator as Haystack users write them: ``run(messages)`` only, no tools."""

    def run(self, messages: list[ChatMessage]) -> dict:
        return {
            "replies": [ChatMessage.from_assistant("hi", meta={"usage": {"prompt_tokens": 3, "completion_tokens": 1}})]
        }


async def test_it_shows_the_wrapped_signatures_and_counts_calls_tokens_and_errors():
    observer = PrometheusObserver()
    plain = ObservedChatGenerator(HaystackStyle(), observer)
    assert list(inspect.signature(plain.run).parameters) == ["messages"]
    assert list(inspect.signature(plain.run_async).parameters) == ["messages"]
    assert (await plain.run_async(messages=[ChatMessage.from_user("hello")]))["replies"][0].text == "hi"

    failing = ObservedChatGenerator(ScriptedChatGenerator([LLMError("timed out")]), observer)
    assert "tools" in inspect.signature(failing.run_async).parameters
    with pytest.raises(LLMError):
        await failing.run_async(messages=[ChatMessage.from_user("hello")])
    assert failing.calls  # the scripted generator's own attribute

    registry = observer.registry
    assert registry.get_sample_value("countersign_llm_latency_seconds_count") == 2
    assert registry.get_sample_value("countersign_llm_errors_total", {"error": "LLMError"}) == 1
    assert registry.get_sample_value("countersign_llm_tokens_total", {"kind": "prompt"}) == 3

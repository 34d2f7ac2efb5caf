"""LLM chat generators: the protocol, the OpenAI-compatible client, and two local stand-ins.

- :class:`OpenAIChatGenerator` talks to OpenAI or any OpenAI-compatible server.
- :class:`ScriptedChatGenerator` replays prepared replies (tests).
- :class:`OfflineDemoChatGenerator` follows a few rules so the demo runs without a model.

Every failure of a model call is an :class:`LLMError`; a malformed answer is an :class:`LLMResponseError`.
"""

from typing import TYPE_CHECKING

from bot.llm.base import ChatGenerator, LLMError, LLMResponseError, StreamingCallback, StreamingChunk
from bot.llm.offline_demo import ANNOUNCEMENT, OfflineDemoChatGenerator
from bot.llm.scripted import ScriptedChatGenerator
from bot.llm.serde import chat_generator_from_dict

if TYPE_CHECKING:  # imported lazily at run time (below); type checkers see it as a plain name
    from bot.llm.openai_generator import OpenAIChatGenerator


def __getattr__(name: str) -> object:
    # The openai client takes over a second to import; the offline demo and the tests of other parts
    # should not pay for it.
    if name == "OpenAIChatGenerator":
        from bot.llm.openai_generator import OpenAIChatGenerator

        return OpenAIChatGenerator
    raise AttributeError(f"module 'bot.llm' has no attribute {name!r}")


__all__ = [
    "ANNOUNCEMENT",
    "ChatGenerator",
    "LLMError",
    "LLMResponseError",
    "OfflineDemoChatGenerator",
    "OpenAIChatGenerator",
    "ScriptedChatGenerator",
    "StreamingCallback",
    "StreamingChunk",
    "chat_generator_from_dict",
]

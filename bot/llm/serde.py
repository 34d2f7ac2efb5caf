"""Rebuilding a chat generator from its ``{"type", "init_parameters"}`` dict."""

from __future__ import annotations

import importlib
from typing import Any

from bot.llm.base import ChatGenerator


def chat_generator_from_dict(data: dict[str, Any]) -> ChatGenerator:
    """Import the class named by ``data["type"]`` (``package.module.Class``) and call its ``from_dict``.

    >>> chat_generator_from_dict(OpenAIChatGenerator(model="gpt-4o").to_dict()).model
    'gpt-4o'
    """
    type_name = data.get("type")
    if not isinstance(type_name, str) or "." not in type_name:
        raise ValueError(f"A chat generator dict needs a dotted 'type', got {type_name!r}.")
    module_name, _, class_name = type_name.rpartition(".")
    cls = getattr(importlib.import_module(module_name), class_name, None)
    if cls is None or not hasattr(cls, "from_dict"):
        raise ValueError(f"{type_name!r} is not a chat generator class with from_dict().")
    return cls.from_dict(data)

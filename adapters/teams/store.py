"""The small key → JSON store the Teams adapter keeps its references in (the engine implements it)."""

from __future__ import annotations

from typing import Any, Protocol


class ConversationStore(Protocol):
    """The engine's ``save_conversation`` / ``load_conversation``."""

    async def save_conversation(self, key: str, reference: dict[str, Any]) -> None:
        """Store ``reference`` under ``key``."""
        ...

    async def load_conversation(self, key: str) -> dict[str, Any] | None:
        """The object stored under ``key``, or ``None``."""
        ...

"""Confirmation policies: each answers one question, *should the human be asked about this call?*"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from bot.canonical import canonical_json
from bot.hitl.dataclasses import ConfirmationUIResult
from bot.hitl.serialization import default_from_dict, default_to_dict


class ConfirmationPolicy(Protocol):
    """Decides whether a tool call needs a human's confirmation, and may learn from the answers.

    Subclass it to inherit the no-op :meth:`update_after_confirmation` and the default serialisation.
    """

    def should_ask(self, tool_name: str, tool_description: str, tool_params: dict[str, Any]) -> bool:
        """Whether to ask the human before running ``tool_name`` with ``tool_params``."""
        ...

    def update_after_confirmation(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        confirmation_result: ConfirmationUIResult,
    ) -> None:
        """Learn from the human's answer about a call (the default learns nothing)."""
        return None

    def to_dict(self) -> dict[str, Any]:
        """Serialise as ``{"type": ..., "init_parameters": {}}``."""
        return default_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConfirmationPolicy:
        """Inverse of :meth:`to_dict`."""
        return default_from_dict(cls, data)


class AlwaysAskPolicy(ConfirmationPolicy):
    """Ask before every call.

    >>> AlwaysAskPolicy().should_ask("delete_file", "Delete a file", {"path": "a.txt"})
    True
    """

    def should_ask(self, tool_name: str, tool_description: str, tool_params: dict[str, Any]) -> bool:
        """Always ``True``."""
        return True


class NeverAskPolicy(ConfirmationPolicy):
    """Never ask: every call runs as requested.

    >>> NeverAskPolicy().should_ask("read_file", "Read a file", {"path": "a.txt"})
    False
    """

    def should_ask(self, tool_name: str, tool_description: str, tool_params: dict[str, Any]) -> bool:
        """Always ``False``."""
        return False


class AskOncePolicy(ConfirmationPolicy):
    """Ask once per distinct ``(tool_name, params)``; a confirmed pair is not asked about again.

    Unlike Haystack's, it remembers *every* confirmed pair, not only the last one per tool, and params
    are compared canonically (key order does not matter). Only a plain ``"confirm"`` is remembered: a
    rejection, or a modification (which confirmed other params than those asked about), is not. The
    memory lives in this object only and is not serialised, so a restored policy asks again.

    >>> policy = AskOncePolicy()
    >>> policy.update_after_confirmation("restart", "", {"unit": "nginx"}, ConfirmationUIResult("confirm"))
    >>> policy.should_ask("restart", "", {"unit": "nginx"})
    False
    >>> policy.should_ask("restart", "", {"unit": "redis"})
    True
    """

    def __init__(self) -> None:
        self._confirmed: set[tuple[str, str]] = set()
        self._lock = threading.Lock()  # strategies may run concurrently (run_async uses worker threads)

    def should_ask(self, tool_name: str, tool_description: str, tool_params: dict[str, Any]) -> bool:
        """``False`` only if this exact call was confirmed before."""
        with self._lock:
            return (tool_name, canonical_json(tool_params)) not in self._confirmed

    def update_after_confirmation(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        confirmation_result: ConfirmationUIResult,
    ) -> None:
        """Remember the call if the human confirmed it."""
        if confirmation_result.action == "confirm":
            with self._lock:
                self._confirmed.add((tool_name, canonical_json(tool_params)))

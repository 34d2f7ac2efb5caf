"""A human's answer (:class:`ConfirmationUIResult`) and a call's fate (:class:`ToolExecutionDecision`)."""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, fields
from typing import Any

CONFIRMATION_ACTIONS = ("confirm", "reject", "modify")
"""The actions a :class:`ConfirmationUIResult` may carry; anything else is rejected by the strategies."""


@dataclass(frozen=True)
class ConfirmationUIResult:
    """The answer a confirmation UI got from the human.

    ``action`` is ``"confirm"``, ``"reject"`` or ``"modify"``. It is deliberately not validated here: a
    strategy receiving any other action rejects the call (fail closed) instead of crashing.

    >>> ConfirmationUIResult(action="modify", new_tool_params={"path": "b.txt"}, feedback="wrong file")
    """

    action: str
    feedback: str | None = None
    new_tool_params: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Serialise to a plain dict (the params are deep-copied)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConfirmationUIResult:
        """Inverse of :meth:`to_dict`."""
        return cls(**_known_fields(cls, data))


@dataclass(frozen=True)
class ToolExecutionDecision:
    """The decision for one tool call: run it (perhaps with edited params) or not, with feedback for the LLM.

    >>> ToolExecutionDecision(tool_name="delete_file", execute=False, tool_call_id="call_1",
    ...                       feedback="Tool execution for 'delete_file' was rejected by the user.")
    """

    tool_name: str
    execute: bool
    tool_call_id: str | None = None
    feedback: str | None = None
    final_tool_params: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        # A truthy string such as "false" must never read as "execute": only a real bool does.
        if not isinstance(self.execute, bool):
            kind = type(self.execute).__name__
            raise TypeError(f"ToolExecutionDecision.execute must be a bool, got {kind}.")
        if self.final_tool_params is not None and not isinstance(self.final_tool_params, dict):
            raise TypeError("ToolExecutionDecision.final_tool_params must be a dict or None.")

    def to_dict(self) -> dict[str, Any]:
        """Serialise to a dict with exactly the five fields (the params are deep-copied)."""
        return {
            "tool_name": self.tool_name,
            "execute": self.execute,
            "tool_call_id": self.tool_call_id,
            "feedback": self.feedback,
            "final_tool_params": copy.deepcopy(self.final_tool_params),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolExecutionDecision:
        """Inverse of :meth:`to_dict`; unknown keys are refused with ``ValueError``."""
        return cls(**_known_fields(cls, data))


def _known_fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"Unknown field(s) for {cls.__name__}: {', '.join(unknown)}")
    return copy.deepcopy(dict(data))

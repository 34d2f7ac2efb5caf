"""Chat messages exchanged between users, the LLM and tools.

The vocabulary follows Haystack's dataclasses (``ChatRole``, ``ToolCall``, ``ToolCallResult``,
``ChatMessage``) so that its users feel at home. Every message receives a stable id in
``meta["id"]`` at creation; stores use it to make writes idempotent. Equality ignores that id, as in
Haystack, so transcripts compare with ``==``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from bot.ids import new_id


class ChatRole(StrEnum):
    """Who authored a message."""

    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


@dataclass
class ToolCall:
    """A tool invocation requested by the LLM.

    >>> ToolCall(tool_name="delete_file", arguments={"path": "a.txt"}, id="call_1")
    """

    tool_name: str
    arguments: dict[str, Any]
    id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Serialise to plain JSON-compatible data."""
        return {"tool_name": self.tool_name, "arguments": copy.deepcopy(self.arguments), "id": self.id}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        """Inverse of :meth:`to_dict`."""
        return cls(tool_name=data["tool_name"], arguments=dict(data.get("arguments") or {}), id=data.get("id"))


@dataclass
class ToolCallResult:
    """The outcome of one tool call, tied to the call that produced it."""

    result: str
    origin: ToolCall
    error: bool

    def to_dict(self) -> dict[str, Any]:
        """Serialise to plain JSON-compatible data."""
        return {"result": self.result, "origin": self.origin.to_dict(), "error": self.error}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCallResult:
        """Inverse of :meth:`to_dict`."""
        return cls(result=data["result"], origin=ToolCall.from_dict(data["origin"]), error=bool(data["error"]))


@dataclass(eq=False)
class ChatMessage:
    """One message of a conversation.

    Build messages with the ``from_*`` constructors; they assign ``meta["id"]``. Two messages are
    equal when everything but that id is: ``ChatMessage.from_user("x") == ChatMessage.from_user("x")``.
    Messages are mutable, so (like Haystack's) they are not hashable; code that needs identity uses the id.
    """

    role: ChatRole
    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_result: ToolCallResult | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if type(self.role) is not ChatRole:  # the enum call costs ~0.5 µs even for a ChatRole
            self.role = ChatRole(self.role)
        if "id" not in self.meta:  # not setdefault: it would draw a uuid4 for every copy too
            self.meta["id"] = new_id()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ChatMessage):
            return NotImplemented
        return (
            self.role == other.role
            and self.text == other.text
            and self.tool_calls == other.tool_calls
            and self.tool_call_result == other.tool_call_result
            and _without_id(self.meta) == _without_id(other.meta)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, and equal messages may differ in id

    def __copy__(self) -> ChatMessage:
        # copy.copy's generic __reduce_ex__ path costs ~2.5 µs a message; recording long histories adds up.
        clone = object.__new__(ChatMessage)
        clone.__dict__.update(self.__dict__)
        return clone

    @property
    def id(self) -> str:
        """The message's stable id (``meta["id"]``)."""
        return self.meta["id"]

    @property
    def tool_call(self) -> ToolCall | None:
        """The first tool call, or ``None``."""
        return self.tool_calls[0] if self.tool_calls else None

    def is_from(self, role: ChatRole | str) -> bool:
        """Whether this message has the given role."""
        return self.role == ChatRole(role)

    @classmethod
    def from_user(cls, text: str, meta: dict[str, Any] | None = None) -> ChatMessage:
        """A message written by a human."""
        return cls(role=ChatRole.USER, text=text, meta=dict(meta or {}))

    @classmethod
    def from_system(cls, text: str, meta: dict[str, Any] | None = None) -> ChatMessage:
        """A system prompt."""
        return cls(role=ChatRole.SYSTEM, text=text, meta=dict(meta or {}))

    @classmethod
    def from_assistant(
        cls,
        text: str | None = None,
        tool_calls: list[ToolCall] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> ChatMessage:
        """A reply of the LLM: text, tool calls, or both."""
        return cls(role=ChatRole.ASSISTANT, text=text, tool_calls=list(tool_calls or []), meta=dict(meta or {}))

    @classmethod
    def from_tool(
        cls, tool_result: str, origin: ToolCall, error: bool = False, meta: dict[str, Any] | None = None
    ) -> ChatMessage:
        """The result of running ``origin``."""
        return cls(
            role=ChatRole.TOOL,
            tool_call_result=ToolCallResult(result=tool_result, origin=origin, error=error),
            meta=dict(meta or {}),
        )

    def to_dict(self) -> dict[str, Any]:
        """Serialise losslessly to JSON-compatible data."""
        return {
            "role": self.role.value,
            "text": self.text,
            "tool_calls": [tc.to_dict() for tc in self.tool_calls],
            "tool_call_result": self.tool_call_result.to_dict() if self.tool_call_result else None,
            "meta": copy.deepcopy(self.meta),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChatMessage:
        """Inverse of :meth:`to_dict`; the message keeps its id."""
        result = data.get("tool_call_result")
        return cls(
            role=ChatRole(data["role"]),
            text=data.get("text"),
            tool_calls=[ToolCall.from_dict(tc) for tc in data.get("tool_calls") or []],
            tool_call_result=ToolCallResult.from_dict(result) if result else None,
            meta=copy.deepcopy(data.get("meta") or {}),
        )


_ROLES = {role.value: role for role in ChatRole}


def _call_data(call: ToolCall) -> dict[str, Any]:
    return {"tool_name": call.tool_name, "arguments": call.arguments, "id": call.id}


def message_data(message: ChatMessage) -> dict[str, Any]:
    """``message.to_dict()`` sharing the message's objects instead of copying them.

    For a writer that encodes the data at once (snapshots, stores): it must not keep or change it.
    """
    result = message.tool_call_result
    calls = message.tool_calls
    return {
        "role": message.role,  # a str already (StrEnum): .value's descriptor costs more than the rest
        "text": message.text,
        "tool_calls": [_call_data(c) for c in calls] if calls else [],
        "tool_call_result": (
            {"result": result.result, "origin": _call_data(result.origin), "error": result.error} if result else None
        ),
        "meta": message.meta,
    }


def message_from_data(data: dict[str, Any]) -> ChatMessage:
    """``ChatMessage.from_dict(data)`` for freshly parsed data nobody else holds: taken over, not copied.

    Skips the dataclass constructor and the enum call (the hot path of every history read and snapshot
    load); an unknown role is still refused with ``ValueError``, a missing field with ``KeyError``.
    """
    role = _ROLES.get(data["role"])
    if role is None:
        raise ValueError(f"{data['role']!r} is not a valid ChatRole")
    result = data.get("tool_call_result")
    if result:
        result = ToolCallResult(result["result"], _call_from_data(result["origin"]), bool(result["error"]))
    meta = data.get("meta") or {}
    if "id" not in meta:
        meta["id"] = new_id()
    calls = data.get("tool_calls")
    # Plain attribute stores: the cheapest way to fill a fresh instance (measured against __dict__ updates).
    message = object.__new__(ChatMessage)
    message.role = role
    message.text = data.get("text")
    message.tool_calls = [_call_from_data(c) for c in calls] if calls else []
    message.tool_call_result = result or None
    message.meta = meta
    return message


def _call_from_data(data: dict[str, Any]) -> ToolCall:
    arguments = data.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise TypeError(f"tool call arguments must be an object, not {type(arguments).__name__}")
    return ToolCall(data["tool_name"], arguments, data.get("id"))


def _without_id(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k != "id"} if "id" in meta else meta

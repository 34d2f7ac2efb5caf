"""``AgentSnapshot``: everything needed to resume a paused run, in any process, days later."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bot import jsonio
from bot.hitl.dataclasses import ToolExecutionDecision
from bot.messages import ChatMessage, ToolCall, message_data, message_from_data, new_id

SNAPSHOT_SCHEMA_VERSION = 1
REFERENCED_SCHEMA_VERSION = 2
"""The engine's stored form, which keeps the thread's stored history by reference (:mod:`bot.agent.stored_snapshot`)."""
DECIDE_STAGE = "decide"
"""A step paused before its calls run: the pending calls await approval (the human-in-the-loop pause)."""
REVIEW_STAGE = "review"
"""A step paused after its calls ran: ``held_results`` await review before the model sees them."""
CHAT_GENERATOR_STAGE = "chat_generator"
"""Stopped at a breakpoint before the model's call: ``messages`` is the transcript so far."""
TOOL_INVOKER_STAGE = "tool_invoker"
"""Stopped at a breakpoint before a step's calls are decided and run (``messages`` ends with the reply)."""
STAGES = (DECIDE_STAGE, REVIEW_STAGE, CHAT_GENERATOR_STAGE, TOOL_INVOKER_STAGE)


class SnapshotError(ValueError):
    """A snapshot that cannot be resumed: unreadable, from an unknown schema, or from changed tools."""


@dataclass
class AgentSnapshot:
    """The state of a run paused at a breakpoint.

    ``messages`` ends with the assistant message whose tool calls await decisions;
    ``pending_tool_calls`` are the calls a human must decide; ``decisions`` are those already made
    for the other calls of the step (they wait with the pending ones).
    """

    run_id: str
    messages: list[ChatMessage]
    pending_tool_calls: list[ToolCall]
    decisions: list[ToolExecutionDecision] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    step_count: int = 0
    token_usage: dict[str, int] = field(default_factory=dict)
    tool_call_counts: dict[str, int] = field(default_factory=dict)
    tools_fingerprint: str = ""
    tool_descriptions: dict[str, str] = field(default_factory=dict)
    tool_bindings: dict[str, str] = field(default_factory=dict)
    """Per tool that has one (:attr:`bot.tools.Tool.binding`, e.g. an MCP tool's schema and annotations): what an
    approval of its calls binds to, as it was when the run paused."""
    history_id: str | None = None
    tool_names: list[str] | None = None
    """The names of the tools the run was paused with (``None`` in older snapshots: the agent's tools)."""
    stage: str = DECIDE_STAGE
    """Where the run stopped (one of :data:`STAGES`); it says how the run resumes."""
    held_results: list[ChatMessage] = field(default_factory=list)
    """At the review stage: every result of the step, held until the reviews are in."""
    component_visits: dict[str, int] = field(default_factory=dict)
    """How often the run has visited ``chat_generator`` and ``tool_invoker`` (breakpoints count them)."""
    break_point: dict[str, Any] | None = None
    """The breakpoint that stopped the run, if one did."""
    snapshot_id: str = field(default_factory=new_id)
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    schema_version: int = SNAPSHOT_SCHEMA_VERSION

    @property
    def step_message(self) -> ChatMessage:
        """The assistant message of the paused step."""
        return self.messages[-1]

    def to_dict(self) -> dict[str, Any]:
        """Serialise to JSON-compatible data."""
        return self._data([m.to_dict() for m in self.messages], [m.to_dict() for m in self.held_results])

    def _data(self, messages: list[dict[str, Any]], held: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "snapshot_id": self.snapshot_id,
            "run_id": self.run_id,
            "created_at": self.created_at,
            "messages": messages,
            "pending_tool_calls": [c.to_dict() for c in self.pending_tool_calls],
            "decisions": [d.to_dict() for d in self.decisions],
            "state": self.state,
            "step_count": self.step_count,
            "token_usage": dict(self.token_usage),
            "tool_call_counts": dict(self.tool_call_counts),
            "tools_fingerprint": self.tools_fingerprint,
            "tool_descriptions": dict(self.tool_descriptions),
            "tool_bindings": dict(self.tool_bindings),
            "history_id": self.history_id,
            "tool_names": self.tool_names,
            "stage": self.stage,
            "held_results": held,
            "component_visits": dict(self.component_visits),
            "break_point": self.break_point,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgentSnapshot:
        """Inverse of :meth:`to_dict`; refuses unknown schema versions and malformed data."""
        return cls._from_data(data, ChatMessage.from_dict)

    @classmethod
    def _from_data(cls, data: Any, message_from: Callable[[dict[str, Any]], ChatMessage]) -> AgentSnapshot:
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version == REFERENCED_SCHEMA_VERSION:
            raise SnapshotError(
                f"Snapshot of run {data.get('run_id')!r} refers to its thread's stored history (the engine's stored "
                "form); load it with bot.agent.stored_snapshot.load_snapshot(data, chat_message_store)."
            )
        if version != SNAPSHOT_SCHEMA_VERSION:
            raise SnapshotError(
                f"Unsupported snapshot schema version {version!r} (this countersign reads {SNAPSHOT_SCHEMA_VERSION})."
            )
        try:
            return cls(
                run_id=data["run_id"],
                snapshot_id=data["snapshot_id"],
                created_at=data["created_at"],
                messages=[message_from(m) for m in data["messages"]],
                pending_tool_calls=[ToolCall.from_dict(c) for c in data["pending_tool_calls"]],
                decisions=[ToolExecutionDecision.from_dict(d) for d in data.get("decisions", [])],
                state=dict(data.get("state") or {}),
                step_count=int(data.get("step_count", 0)),
                token_usage=dict(data.get("token_usage") or {}),
                tool_call_counts=dict(data.get("tool_call_counts") or {}),
                tools_fingerprint=data.get("tools_fingerprint", ""),
                tool_descriptions=dict(data.get("tool_descriptions") or {}),
                tool_bindings={str(k): str(v) for k, v in (data.get("tool_bindings") or {}).items()},
                history_id=data.get("history_id"),
                tool_names=list(data["tool_names"]) if data.get("tool_names") is not None else None,
                stage=_stage(data.get("stage", DECIDE_STAGE)),
                held_results=[message_from(m) for m in data.get("held_results") or []],
                component_visits={str(k): int(v) for k, v in (data.get("component_visits") or {}).items()},
                break_point=data.get("break_point"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotError(f"Malformed snapshot for run {data.get('run_id')!r}: {exc!r}") from exc

    def to_json(self) -> str:
        """Serialise to a JSON string."""
        try:
            # Messages without to_dict()'s defensive deep copies: the encoder only reads them. Resuming
            # crosses this path on every approval, and deep copies were most of its cost.
            return jsonio.dumps(snapshot_data(self))
        except TypeError as exc:
            raise SnapshotError(f"Snapshot of run {self.run_id} is not JSON-serialisable: {exc}") from exc

    @classmethod
    def from_json(cls, text: str) -> AgentSnapshot:
        """Inverse of :meth:`to_json`."""
        try:
            data = jsonio.loads(text)
        except ValueError as exc:
            raise SnapshotError(f"Snapshot is not valid JSON: {exc}") from exc
        # The parser built fresh objects, so from_dict()'s deep copy of every message's meta is skipped.
        return cls._from_data(data, message_from_data)


def snapshot_data(snapshot: AgentSnapshot) -> dict[str, Any]:
    """``snapshot.to_dict()`` sharing the snapshot's objects: for a writer that encodes it at once.

    The engine hands this to storage on every pause, which encodes it once (no JSON text to re-parse).
    """
    return snapshot._data(
        [message_data(m) for m in snapshot.messages], [message_data(m) for m in snapshot.held_results]
    )


def _stage(value: Any) -> str:
    if value not in STAGES:
        raise ValueError(f"unknown stage {value!r}")
    return value


def snapshot_from_data(data: Any) -> AgentSnapshot:
    """``AgentSnapshot.from_dict(data)`` for freshly parsed data nobody else holds (e.g. a stored snapshot).

    The messages take the parsed objects over instead of deep-copying them.
    """
    return AgentSnapshot._from_data(data, message_from_data)

"""Debugging breakpoints: stop a run before a component's N-th visit, and resume from the snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.agent.snapshot import AgentSnapshot

CHAT_GENERATOR = "chat_generator"
TOOL_INVOKER = "tool_invoker"
COMPONENTS = (CHAT_GENERATOR, TOOL_INVOKER)


@dataclass(frozen=True)
class Breakpoint:
    """Stop before ``component_name``'s visit number ``visit_count`` (0 = the first).

    ``chat_generator`` counts calls of the model, ``tool_invoker`` counts steps that call tools, both
    over the whole run (a resumed run continues counting). ``snapshot_file_path`` is a folder: when
    given, the snapshot is also written there as one JSON file.

    >>> agent.run([ChatMessage.from_user("hi")], break_point=Breakpoint("tool_invoker", visit_count=1))
    """

    component_name: str
    visit_count: int = 0
    snapshot_file_path: str | None = None

    def __post_init__(self) -> None:
        if self.component_name not in COMPONENTS:
            raise ValueError(f"component_name must be one of {list(COMPONENTS)}, not {self.component_name!r}.")
        if isinstance(self.visit_count, bool) or not isinstance(self.visit_count, int) or self.visit_count < 0:
            raise ValueError(f"visit_count must be an integer >= 0, not {self.visit_count!r}.")

    def to_dict(self) -> dict[str, Any]:
        """Serialise to JSON-compatible data."""
        return {
            "component_name": self.component_name,
            "visit_count": self.visit_count,
            "snapshot_file_path": self.snapshot_file_path,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Breakpoint:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)


@dataclass(frozen=True)
class AgentBreakpoint:
    """A :class:`Breakpoint` inside the agent named ``agent_name`` (Haystack's pipeline-level form)."""

    break_point: Breakpoint
    agent_name: str = "agent"

    def to_dict(self) -> dict[str, Any]:
        """Serialise to JSON-compatible data."""
        return {"break_point": self.break_point.to_dict(), "agent_name": self.agent_name}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgentBreakpoint:
        """Inverse of :meth:`to_dict`."""
        return cls(Breakpoint.from_dict(data["break_point"]), agent_name=data.get("agent_name", "agent"))


def as_breakpoint(break_point: Breakpoint | AgentBreakpoint | None) -> Breakpoint | None:
    """The component breakpoint of either form (``run(break_point=...)`` takes both)."""
    if break_point is None or isinstance(break_point, Breakpoint):
        return break_point
    if isinstance(break_point, AgentBreakpoint):
        return break_point.break_point
    raise TypeError(f"break_point must be a Breakpoint or an AgentBreakpoint, not {type(break_point).__name__}.")


class BreakpointException(Exception):
    """The run stopped at a :class:`Breakpoint`; resume it with ``agent.run([], snapshot=exc.snapshot)``.

    Not a ``HITLBreakpointException``: nobody is asked anything, so an engine never stores approvals for it.
    """

    def __init__(
        self,
        message: str,
        *,
        component: str,
        snapshot: AgentSnapshot,
        break_point: Breakpoint,
        snapshot_file_path: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.component = component
        self.snapshot = snapshot
        self.break_point = break_point
        self.snapshot_file_path = snapshot_file_path

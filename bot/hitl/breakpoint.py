"""Breakpoints: pause a run for a human decision that arrives later, possibly in another process."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bot.hitl.dataclasses import ToolExecutionDecision
from bot.hitl.policies import AlwaysAskPolicy, ConfirmationPolicy
from bot.hitl.serialization import check_type, component_from_dict, component_to_dict

if TYPE_CHECKING:
    from bot.agent.snapshot import AgentSnapshot
    from bot.messages import ToolCall


class HITLBreakpointException(Exception):
    """A tool call needs a human decision; the run stops here and can be resumed from ``snapshot``.

    Raised by :class:`BreakpointConfirmationStrategy` for one call; when it leaves ``Agent.run`` it also
    carries ``snapshot`` (an ``AgentSnapshot``) and ``pending_tool_calls`` (every call of the step that
    awaits a decision).
    """

    def __init__(
        self,
        message: str,
        tool_name: str,
        snapshot_file_path: str | None = None,
        tool_call_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.tool_name = tool_name
        self.snapshot_file_path = snapshot_file_path
        self.tool_call_id = tool_call_id
        self.snapshot: AgentSnapshot | None = None
        self.pending_tool_calls: list[ToolCall] = []


class BreakpointConfirmationStrategy:
    """A confirmation strategy that pauses the run whenever its policy asks.

    ``snapshot_file_path`` is a folder: when given, each pause also writes its snapshot there as one JSON
    file named after the run and the step.

    >>> agent = Agent(gen, tools=[delete_file], confirmation_strategies={"delete_file":
    ...     BreakpointConfirmationStrategy(snapshot_file_path="snapshots/")})
    """

    def __init__(
        self, snapshot_file_path: str | None = None, confirmation_policy: ConfirmationPolicy | None = None
    ) -> None:
        self.snapshot_file_path = snapshot_file_path
        self.confirmation_policy: ConfirmationPolicy = confirmation_policy or AlwaysAskPolicy()

    def run(
        self,
        *,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str | None = None,
        confirmation_strategy_context: dict[str, Any] | None = None,
    ) -> ToolExecutionDecision:
        """Raise :class:`HITLBreakpointException` if the policy asks; otherwise approve unchanged."""
        if self.confirmation_policy.should_ask(tool_name, tool_description, tool_params):
            raise HITLBreakpointException(
                f"Tool '{tool_name}' needs a human decision before it runs.",
                tool_name=tool_name,
                snapshot_file_path=self.snapshot_file_path,
                tool_call_id=tool_call_id,
            )
        return ToolExecutionDecision(
            tool_name=tool_name, execute=True, tool_call_id=tool_call_id, final_tool_params=dict(tool_params)
        )

    async def run_async(self, **kwargs: Any) -> ToolExecutionDecision:
        """Async twin of :meth:`run` (nothing here blocks)."""
        return self.run(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """Serialise in the ``{"type", "init_parameters"}`` shape."""
        return {
            "type": f"{type(self).__module__}.{type(self).__qualname__}",
            "init_parameters": {
                "snapshot_file_path": self.snapshot_file_path,
                "confirmation_policy": component_to_dict(self.confirmation_policy),
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BreakpointConfirmationStrategy:
        """Inverse of :meth:`to_dict`; Haystack's dict, which has no policy, loads with the default one."""
        check_type(cls, data)
        params = dict(data.get("init_parameters") or {})
        policy = params.get("confirmation_policy")
        return cls(
            snapshot_file_path=params.get("snapshot_file_path"),
            confirmation_policy=component_from_dict(policy) if policy else None,
        )

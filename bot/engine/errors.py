"""Why the engine refused something. ``str(error)`` is one sentence a person can be shown as is."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import ParamSpec, TypeVar

from storage import StorageError

logger = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")


class EngineError(Exception):
    """Base class: a refusal the adapter shows to the person who caused it."""


class ApprovalNotFound(EngineError):
    """The approval id is unknown (stale button, forged value)."""

    def __init__(self, approval_id: str) -> None:
        super().__init__("This approval no longer exists.")
        self.approval_id = approval_id


class NotAnApprover(EngineError):
    """The actor may not decide this approval."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)


class NotShownHere(EngineError):
    """A click from a conversation the approval was never shown in (or from nowhere the adapter could name)."""

    def __init__(self, place: str | None) -> None:
        super().__init__("This approval can't be decided from here; use the message or list where it was shown to you.")
        self.place = place


class AlreadyDecided(EngineError):
    """Someone decided first (or this actor already voted)."""

    def __init__(
        self, status: str, decided_by: str | None, decided_at: datetime | None, detail: str | None = None
    ) -> None:
        who = f" by {decided_by}" if decided_by else ""
        super().__init__(detail or f"This approval was already {status}{who}.")
        self.status = status
        self.decided_by = decided_by
        self.decided_at = decided_at


class ApprovalExpired(EngineError):
    """The approval's time ran out; it was rejected automatically."""

    def __init__(self) -> None:
        super().__init__("This approval expired without a decision; the call was not run.")


class ApprovalClosed(EngineError):
    """The approval was superseded by a newer message or cancelled."""

    def __init__(self, status: str) -> None:
        super().__init__(f"This approval was {status}; the call was not run.")
        self.status = status


class InvalidEdit(EngineError):
    """Edited parameters that do not satisfy the tool's schema; ``errors`` maps field to message."""

    def __init__(self, errors: dict[str, str]) -> None:
        detail = "; ".join(f"{k}: {v}" for k, v in errors.items())
        super().__init__(f"The edited parameters are invalid: {detail}")
        self.errors = errors


class ToolsNotConfigured(EngineError):
    """The call (or the paused run it belongs to) uses tools this process is not configured with now."""

    def __init__(self, missing: Sequence[str]) -> None:
        names = ", ".join(missing)
        verb, them = ("is", "it") if len(missing) == 1 else ("are", "them")
        super().__init__(
            f"{names} {verb} not configured here now, so this call can't run. "
            f"Set COUNTERSIGN_TOOLS to the module that provides {them} (for example "
            f"COUNTERSIGN_TOOLS=mytools:tools) and start again, or reject the call."
        )
        self.missing = tuple(missing)


class MCPServerNotConnected(ToolsNotConfigured):
    """The call's tool comes from an MCP server that is not connected now: nothing is decided, the call waits."""

    def __init__(self, server: str, tool_name: str) -> None:
        EngineError.__init__(
            self, f"The MCP server {server} is not connected; try again when it is. Nothing was decided."
        )
        self.missing = (tool_name,)
        self.server = server


class MCPToolsChanged(ToolsNotConfigured):
    """A paused call's MCP tool changed on its server since the pause (across a restart): the run does not resume."""

    def __init__(self, changed: Sequence[str]) -> None:
        super().__init__(changed)
        names = ", ".join(changed)
        EngineError.__init__(
            self,
            f"{names} changed on {'its MCP server' if len(changed) == 1 else 'their MCP servers'} since this call "
            "paused (the input schema or annotations differ), so it was not run.",
        )


class UnknownAction(EngineError):
    """An action other than confirm, reject or modify."""

    def __init__(self, action: str) -> None:
        super().__init__(f"Unknown action {action!r}; nothing was decided.")


class NotAnAdmin(EngineError):
    """A policy change by someone who is not an admin."""

    def __init__(self, what: str = "change policies") -> None:
        super().__init__(f"Only countersign admins can {what}.")


class NotAllowedToStop(EngineError):
    """Someone who is neither the run's requester nor an admin tried to stop it."""

    def __init__(self) -> None:
        super().__init__("Only the person who asked, or an admin, can stop this.")


class CommandError(EngineError):
    """Bad admin-command syntax or arguments; the message includes usage help."""


MESSAGE_NOT_SAVED = (
    "I can't reach my database right now; your message was not saved — please send it again in a minute."
)
"""What a surface that cannot have the message delivered again (Teams, the console) tells its sender.

Slack redelivers an event answered with a 5xx, so there the adapter answers 503 and says nothing.
"""


class DatabaseUnavailable(EngineError):
    """The database could not be reached (or failed) while deciding; nothing was decided, the person may retry."""

    def __init__(self) -> None:
        super().__init__("I can't reach my database right now; nothing was decided — please try again in a minute.")


class DecidedButUnfinished(EngineError):
    """The decision won its compare-and-set, then the database failed before the rest was written.

    The decision stands (recovery resumes the run once the database is back), so the person must not be
    told that nothing was decided.
    """

    def __init__(self) -> None:
        super().__init__(
            "Your decision was recorded, but I lost my database while finishing it; "
            "I'll carry on with it once the database is back. No need to decide again."
        )


def refused_while_storage_fails(method: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Turn a :class:`StorageError` leaving ``method`` into :class:`DatabaseUnavailable` (one sentence, no traceback).

    Every decision path writes its compare-and-set first and nothing before it, so a failure up to there
    leaves the approval pending: deciding again once the database is back works exactly once. A failure
    after the compare-and-set won is :class:`DecidedButUnfinished`, raised by the method itself.
    """

    @functools.wraps(method)
    async def refusing(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except StorageError as exc:
            logger.warning("decision refused: storage unavailable (%s)", exc)
            raise DatabaseUnavailable() from exc

    return refusing


class PolicyKeptChanging(EngineError):
    """A step's pause was refused again and again because a tool's policy changed since it was read; the run fails
    closed (nothing of the step ran) rather than deciding on a policy it cannot confirm."""

    def __init__(self) -> None:
        super().__init__(
            "Sorry, a tool's approval policy changed while I was deciding this request, again and again; "
            "nothing ran. Please ask again."
        )


class QuestionNotOpen(EngineError):
    """A question that is answered, expired, or not asked in this process."""

    def __init__(self) -> None:
        super().__init__("This question is no longer open: it was answered, it expired, or its call ended.")


class NotAllowedToAnswer(EngineError):
    """Only the run's requester or an admin may answer a tool's question."""

    def __init__(self) -> None:
        super().__init__("Only the person who asked for this, or an admin, can answer this question.")


class InvalidAnswer(InvalidEdit):
    """Answers to a tool's question that do not satisfy its schema; ``errors`` maps field to message."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__(errors)
        detail = "; ".join(f"{k}: {v}" for k, v in errors.items())
        self.args = (f"Some answers are not valid: {detail}",)

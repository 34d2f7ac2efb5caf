"""Why the engine refused something. ``str(error)`` is one sentence a person can be shown as is."""

from __future__ import annotations

from datetime import datetime


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


class UnknownAction(EngineError):
    """An action other than confirm, reject or modify."""

    def __init__(self, action: str) -> None:
        super().__init__(f"Unknown action {action!r}; nothing was decided.")


class NotAnAdmin(EngineError):
    """A policy change by someone who is not an admin."""

    def __init__(self) -> None:
        super().__init__("Only countersign admins can change policies.")


class CommandError(EngineError):
    """Bad admin-command syntax or arguments; the message includes usage help."""

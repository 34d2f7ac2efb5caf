"""The ``Surface`` protocol: how the engine speaks through a chat platform. Adapters implement it.

The methods after :meth:`Surface.show_queued` are optional: a surface that cannot stream, show a status
line or tool steps leaves them out, and :mod:`bot.engine.streaming` falls back to a sensible default
(the answer posted once, :meth:`Surface.show_working`, nothing). The engine never asks which platform
it talks to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from bot.engine.model import ApprovalView, Note, ThreadRef, ToolStep


class Surface(Protocol):
    """Output side of one platform. Every method must escape untrusted text for its platform."""

    async def post_reply(self, thread: ThreadRef, text: str | Note) -> None:
        """Post the agent's answer (model text: untrusted, may be long) in the thread.

        A :class:`~bot.engine.model.Note` is a notice of the engine's that names people: render its
        mentions as the platform's mentions or display names, and escape its text parts.
        """
        ...

    async def render_approvals(self, thread: ThreadRef, approvals: Sequence[ApprovalView]) -> dict[str, Any]:
        """Show the pending calls of a paused step as one interactive message.

        Returns a JSON-serialisable reference to the rendered message (e.g. Slack ``{"channel", "ts"}``)
        that the engine stores and later passes to :meth:`update_approvals`.
        """
        ...

    async def update_approvals(
        self, thread: ThreadRef, message_ref: dict[str, Any], approvals: Sequence[ApprovalView]
    ) -> None:
        """Re-render that message for everyone: decided calls lose their buttons and show the outcome."""
        ...

    async def tell_user(self, thread: ThreadRef, user: str, text: str | Note) -> None:
        """Tell one person something privately (Slack ephemeral message); a ``Note`` as in :meth:`post_reply`."""
        ...

    async def show_working(self, thread: ThreadRef, working: bool, message_id: str | None = None) -> None:
        """Show (or stop showing) that the bot is working, e.g. a reaction or a typing indicator."""
        ...

    async def show_queued(self, thread: ThreadRef, message_id: str | None = None) -> None:
        """Show that a message waits behind the thread's active run (Slack: the status line; Teams: typing).

        Optional: the engine skips a surface that lacks it, so the default is to show nothing.
        """
        ...

    async def start_stream(self, thread: ThreadRef, requester: str, run_id: str) -> dict[str, Any] | None:
        """Open a message that an answer will stream into; a JSON-serialisable reference to it, or ``None``.

        ``None`` (or a missing method) means the answer is posted once, when it is complete. The engine
        starts a stream when the first text arrives, and may show a Stop control on it that ends ``run_id``.
        """
        ...

    async def append_stream(self, thread: ThreadRef, stream: dict[str, Any], text: str, shown: int) -> None:
        """Show ``text`` (model text so far: untrusted) in the stream; its first ``shown`` characters already are.

        Called at most once per ``COUNTERSIGN_STREAM_UPDATE_SECONDS``. Raise
        :class:`~bot.engine.streaming.StreamRateLimited` on a platform's 429; any other exception ends
        the streaming (the full text is then posted once at the end).
        """
        ...

    async def finish_stream(self, thread: ThreadRef, stream: dict[str, Any], text: str, shown: int) -> None:
        """End the stream so that the message shows exactly ``text`` (its first ``shown`` characters are shown).

        Raising means the message could not be finished: the engine then posts ``text`` with
        :meth:`post_reply`, so the answer is never lost.
        """
        ...

    async def set_status(self, thread: ThreadRef, status: str | None, message_id: str | None = None) -> None:
        """Show a short status ("thinking…", "running get_time…", "waiting for approval"), or clear it (``None``)."""
        ...

    async def show_tool_step(self, thread: ThreadRef, step: ToolStep) -> None:
        """Show a call that ran without approval as one compact line (render it with ``tool_step_line``)."""
        ...

    async def direct_thread(self, workspace: str, user: str) -> ThreadRef | None:
        """The direct-message conversation with ``user`` (opened if needed), to show them approvals and
        reminders; ``None`` when there is none (Teams: no personal chat with the bot yet).

        Optional: the engine skips a surface that lacks it, so the default is no direct messages.
        """
        ...

    async def group_members(self, group_id: str) -> Sequence[str]:
        """The members of one of the platform's user groups (Slack: ``usergroups.users.list``).

        Optional: without it, platform groups have no members (fail closed).
        """
        ...

    async def refresh_home(self, workspace: str, users: Sequence[str]) -> None:
        """Show ``users`` their personal list of approvals again (Slack's App Home), after one changed.

        Optional: the engine skips a surface that lacks it.
        """
        ...

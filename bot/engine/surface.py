"""The ``Surface`` protocol: how the engine speaks through a chat platform. Adapters implement it.

The methods from :meth:`Surface.show_queued` on are optional: they have default bodies (Haystack's
``protocol.py`` style), so a surface that subclasses :class:`Surface` and cannot stream, show a status
line or tool steps simply leaves them out, and the engine falls back to what the default says (the
answer posted once, :meth:`Surface.show_working`, nothing). The engine never asks which platform it
talks to, and never probes a surface for a method.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

from bot.engine.model import ApprovalView, Note, QuestionView, ThreadRef, ToolStep


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

        Optional: the default shows nothing.
        """
        return

    async def start_stream(self, thread: ThreadRef, requester: str, run_id: str) -> dict[str, Any] | None:
        """Open a message that an answer will stream into; a JSON-serialisable reference to it, or ``None``.

        ``None`` (the default: the surface cannot stream) means the answer is posted once, when it is
        complete. The engine starts a stream when the first text arrives, and may show a Stop control on it
        that ends ``run_id``.
        """
        return None

    async def append_stream(self, thread: ThreadRef, stream: dict[str, Any], text: str, shown: int) -> None:
        """Show ``text`` (model text so far: untrusted) in the stream; its first ``shown`` characters already are.

        Called at most once per ``COUNTERSIGN_STREAM_UPDATE_SECONDS``. Raise
        :class:`~bot.engine.streaming.StreamRateLimited` on a platform's 429; any other exception ends
        the streaming (the full text is then posted once at the end). Only called on a stream
        :meth:`start_stream` opened; the default (never called) does nothing.
        """
        return

    async def finish_stream(self, thread: ThreadRef, stream: dict[str, Any], text: str, shown: int) -> None:
        """End the stream so that the message shows exactly ``text`` (its first ``shown`` characters are shown).

        Raising means the message could not be finished: the engine then posts ``text`` with
        :meth:`post_reply`, so the answer is never lost. Only called on a stream :meth:`start_stream`
        opened; the default (never called) does nothing.
        """
        return

    async def set_status(
        self, thread: ThreadRef, status: str | None, message_id: str | None = None
    ) -> Literal[False] | None:
        """Show a short status ("thinking…", "running get_time…", "waiting for approval"), or clear it (``None``).

        The default returns ``False``: the surface has no status line, so the engine shows
        :meth:`show_working` instead and does not keep a paused run's status. A surface with a status line
        returns ``None``.
        """
        return False

    async def show_tool_step(self, thread: ThreadRef, step: ToolStep) -> None:
        """Show a call that ran without approval as one compact line (render it with ``tool_step_line``).

        Optional: the default shows nothing.
        """
        return

    async def direct_thread(self, workspace: str, user: str) -> ThreadRef | None:
        """The direct-message conversation with ``user`` (opened if needed), to show them approvals and
        reminders; ``None`` when there is none (Teams: no personal chat with the bot yet).

        Optional: the default is ``None`` (no direct messages).
        """
        return None

    async def group_members(self, group_id: str) -> Sequence[str]:
        """The members of one of the platform's user groups (Slack: ``usergroups.users.list``).

        Optional: by default platform groups have no members (fail closed).
        """
        return ()

    async def refresh_home(self, workspace: str, users: Sequence[str]) -> None:
        """Show ``users`` their personal list of approvals again (Slack's App Home), after one changed.

        Optional: the default shows nothing.
        """
        return

    async def ask_question(self, thread: ThreadRef, question: QuestionView) -> dict[str, Any] | None:
        """Ask the run's requester a running tool's question (form or link) in the thread; a JSON-serialisable
        reference to the message, later passed to :meth:`update_question`.

        Optional: the default (``None``) means the surface cannot ask, and the question is declined.
        """
        return None

    async def update_question(self, thread: ThreadRef, ref: dict[str, Any], question: QuestionView) -> None:
        """Show a question's outcome (answered, declined, expired) in place of its inputs.

        Optional: the default shows nothing.
        """
        return

"""A ``Surface`` for tests that records every call the engine makes and lets a test await the next one.

>>> surface = RecordingSurface()
>>> engine.register_surface("slack", surface)
>>> await engine.handle_message(inbound)
>>> rendering = surface.renders[-1]          # the approvals of the paused step
>>> view = rendering.approvals[0]
>>> await engine.decide(DecisionRequest(view.approval_id, "U1", "confirm", place=view.thread.place))
>>> reply = await surface.next_reply(within=5)   # the answer posted after the resume

Every call lands in :attr:`calls` in order, and in a list per kind (:attr:`replies`, :attr:`renders`,
:attr:`updates`, :attr:`tells`, :attr:`working`, :attr:`queued`). Waiting is bounded (``within`` seconds):
``next_*`` raise ``TimeoutError`` instead of hanging a test.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bot.engine.model import ApprovalView, Note, QuestionView, ThreadRef, ToolStep, plain_text
from bot.engine.presentation import tool_step_line
from bot.engine.surface import Surface

DEFAULT_TIMEOUT = 5.0


@dataclass(frozen=True)
class Reply:
    """``post_reply(thread, text)`` (a ``Note`` recorded as its plain text, and as itself in ``note``)."""

    thread: ThreadRef
    text: str
    note: Note | None = None


@dataclass(frozen=True)
class Rendering:
    """``render_approvals(thread, approvals)`` and the message reference it returned."""

    thread: ThreadRef
    approvals: tuple[ApprovalView, ...]
    message_ref: dict[str, Any]


@dataclass(frozen=True)
class Update:
    """``update_approvals(thread, message_ref, approvals)``."""

    thread: ThreadRef
    message_ref: dict[str, Any]
    approvals: tuple[ApprovalView, ...]


@dataclass(frozen=True)
class Asked:
    """``ask_question(thread, question)`` (a running tool's question) and the reference it returned."""

    thread: ThreadRef
    question: QuestionView
    ref: dict[str, Any]


@dataclass(frozen=True)
class QuestionUpdate:
    """``update_question(thread, ref, question)``: the question's outcome."""

    thread: ThreadRef
    ref: dict[str, Any]
    question: QuestionView


@dataclass(frozen=True)
class Tell:
    """``tell_user(thread, user, text)`` (a ``Note`` recorded as its plain text, and as itself in ``note``)."""

    thread: ThreadRef
    user: str
    text: str
    note: Note | None = None


@dataclass(frozen=True)
class Working:
    """``show_working(thread, working, message_id)``."""

    thread: ThreadRef
    working: bool
    message_id: str | None


@dataclass(frozen=True)
class Queued:
    """``show_queued(thread, message_id)``."""

    thread: ThreadRef
    message_id: str | None


Call = Any  # Reply | Rendering | Update | Tell | Working | Queued, and the streaming surface's calls


class RecordingSurface(Surface):
    """Implements :class:`bot.engine.surface.Surface`; records calls, returns ``{"ref": n}`` from renders."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._refs = itertools.count(1)
        self._changed = asyncio.Condition()
        self._cursor: dict[type, int] = {}
        self.platform = "slack"
        self.direct: set[str] = set()
        """People who have a direct conversation with the bot (``D-<user>``); nobody by default."""

    # --- the Surface protocol -------------------------------------------------------------------

    async def post_reply(self, thread: ThreadRef, text: str | Note) -> None:
        """Record an answer posted in the thread."""
        await self._record(Reply(thread, plain_text(text), text if isinstance(text, Note) else None))

    async def render_approvals(self, thread: ThreadRef, approvals: Sequence[ApprovalView]) -> dict[str, Any]:
        """Record the approvals of a paused step; the reference is ``{"ref": n}``, counting from 1."""
        ref = {"ref": next(self._refs)}
        await self._record(Rendering(thread, tuple(approvals), ref))
        return ref

    async def update_approvals(
        self, thread: ThreadRef, message_ref: dict[str, Any], approvals: Sequence[ApprovalView]
    ) -> None:
        """Record a re-rendering of an approval message."""
        await self._record(Update(thread, dict(message_ref), tuple(approvals)))

    async def ask_question(self, thread: ThreadRef, question: QuestionView) -> dict[str, Any] | None:
        """Record a tool's question; the reference is ``{"ref": n}`` like an approval message's."""
        ref = {"ref": next(self._refs)}
        await self._record(Asked(thread, question, ref))
        return ref

    async def update_question(self, thread: ThreadRef, ref: dict[str, Any], question: QuestionView) -> None:
        """Record a question's outcome."""
        await self._record(QuestionUpdate(thread, dict(ref), question))

    async def tell_user(self, thread: ThreadRef, user: str, text: str | Note) -> None:
        """Record a private message to one person."""
        await self._record(Tell(thread, user, plain_text(text), text if isinstance(text, Note) else None))

    async def show_working(self, thread: ThreadRef, working: bool, message_id: str | None = None) -> None:
        """Record the working indicator being switched on or off."""
        await self._record(Working(thread, working, message_id))

    async def direct_thread(self, workspace: str, user: str) -> ThreadRef | None:
        """``D-<user>`` for the people in :attr:`direct`; ``None`` for everyone else."""
        if user not in self.direct:
            return None
        return ThreadRef(self.platform, workspace, f"D-{user}", "dm")

    async def show_queued(self, thread: ThreadRef, message_id: str | None = None) -> None:
        """Record that a message waits behind the thread's active run."""
        await self._record(Queued(thread, message_id))

    # --- what was recorded ----------------------------------------------------------------------

    @property
    def replies(self) -> list[Reply]:
        """Every ``post_reply``, in order."""
        return [c for c in self.calls if isinstance(c, Reply)]

    @property
    def renders(self) -> list[Rendering]:
        """Every ``render_approvals``, in order."""
        return [c for c in self.calls if isinstance(c, Rendering)]

    @property
    def updates(self) -> list[Update]:
        """Every ``update_approvals``, in order."""
        return [c for c in self.calls if isinstance(c, Update)]

    @property
    def tells(self) -> list[Tell]:
        """Every ``tell_user``, in order."""
        return [c for c in self.calls if isinstance(c, Tell)]

    @property
    def working(self) -> list[Working]:
        """Every ``show_working``, in order."""
        return [c for c in self.calls if isinstance(c, Working)]

    @property
    def queued(self) -> list[Queued]:
        """Every ``show_queued``, in order."""
        return [c for c in self.calls if isinstance(c, Queued)]

    def replies_in(self, thread: ThreadRef) -> list[str]:
        """The texts posted in one thread, in order."""
        return [r.text for r in self.replies if r.thread == thread]

    def last_update_for(self, approval_id: str) -> ApprovalView | None:
        """The approval as it was last re-rendered, or ``None`` if it never was."""
        for update in reversed(self.updates):
            for view in update.approvals:
                if view.approval_id == approval_id:
                    return view
        return None

    # --- waiting --------------------------------------------------------------------------------

    async def next_reply(self, within: float = DEFAULT_TIMEOUT) -> Reply:
        """The first reply not returned by an earlier ``next_reply`` (waits for it, at most ``within`` s)."""
        return await self._next(Reply, within)

    async def next_render(self, within: float = DEFAULT_TIMEOUT) -> Rendering:
        """The first rendering not returned by an earlier ``next_render``."""
        return await self._next(Rendering, within)

    async def next_update(self, within: float = DEFAULT_TIMEOUT) -> Update:
        """The first update not returned by an earlier ``next_update``."""
        return await self._next(Update, within)

    async def wait_for(self, predicate: Callable[[Call], bool], within: float = DEFAULT_TIMEOUT) -> Call:
        """The first recorded call (past or future) that satisfies ``predicate``."""

        def found() -> Call | None:
            return next((c for c in self.calls if predicate(c)), None)

        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: found() is not None), within)
        result = found()
        assert result is not None
        return result

    async def _next(self, kind: type, within: float) -> Any:
        def available() -> list[Call]:
            return [c for c in self.calls if isinstance(c, kind)]

        position = self._cursor.get(kind, 0)
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(available()) > position), within)
        self._cursor[kind] = position + 1
        return available()[position]

    async def _record(self, call: Call) -> None:
        async with self._changed:
            self.calls.append(call)
            self._changed.notify_all()


@dataclass(frozen=True)
class StreamCall:
    """``start_stream`` / ``append_stream`` / ``finish_stream``: ``text`` is what the message shows after it."""

    kind: str
    thread: ThreadRef
    stream: dict[str, Any]
    text: str
    shown: int
    at: float


@dataclass(frozen=True)
class Status:
    """``set_status(thread, status, message_id)``."""

    thread: ThreadRef
    status: str | None


@dataclass(frozen=True)
class Step:
    """``show_tool_step(thread, step)``: ``line`` is the step as :func:`tool_step_line` renders it."""

    thread: ThreadRef
    step: ToolStep
    line: str


class StreamingRecordingSurface(RecordingSurface):
    """A :class:`RecordingSurface` that also streams, shows a status line and tool steps.

    ``fail_appends`` maps the number of an ``append_stream`` call (1 = the first) to the exception it
    raises (a :class:`StreamRateLimited` for a 429, anything else for a stream that breaks);
    ``fail_finish`` makes every ``finish_stream`` raise it. Timestamps are the loop's monotonic time.
    """

    def __init__(
        self, *, fail_appends: dict[int, Exception] | None = None, fail_finish: Exception | None = None
    ) -> None:
        super().__init__()
        self.fail_appends = dict(fail_appends or {})
        self.fail_finish = fail_finish
        self._streams = itertools.count(1)
        self._appends = 0

    async def start_stream(self, thread: ThreadRef, requester: str, run_id: str) -> dict[str, Any] | None:
        """Open a stream ``{"stream": n}``."""
        ref = {"stream": next(self._streams), "run_id": run_id}
        await self._record(StreamCall("start", thread, ref, "", 0, asyncio.get_running_loop().time()))
        return ref

    async def append_stream(self, thread: ThreadRef, stream: dict[str, Any], text: str, shown: int) -> None:
        """Record the text the message shows now (or raise the scripted failure)."""
        self._appends += 1
        failure = self.fail_appends.get(self._appends)
        if failure is not None:
            await self._record(
                StreamCall("refused", thread, dict(stream), text, shown, asyncio.get_running_loop().time())
            )
            raise failure
        await self._record(StreamCall("append", thread, dict(stream), text, shown, asyncio.get_running_loop().time()))

    async def finish_stream(self, thread: ThreadRef, stream: dict[str, Any], text: str, shown: int) -> None:
        """Record the message's final text (or raise the scripted failure)."""
        if self.fail_finish is not None:
            raise self.fail_finish
        await self._record(StreamCall("finish", thread, dict(stream), text, shown, asyncio.get_running_loop().time()))

    async def set_status(self, thread: ThreadRef, status: str | None, message_id: str | None = None) -> None:
        """Record the status line."""
        await self._record(Status(thread, status))

    async def show_tool_step(self, thread: ThreadRef, step: ToolStep) -> None:
        """Record a tool step and its rendered line."""
        await self._record(Step(thread, step, tool_step_line(step)))

    @property
    def streams(self) -> list[StreamCall]:
        """Every stream call (start, append, refused, finish), in order."""
        return [c for c in self.calls if isinstance(c, StreamCall)]

    def final_texts(self) -> list[str]:
        """The final text of every finished stream, in order."""
        return [c.text for c in self.streams if c.kind == "finish"]

    @property
    def statuses(self) -> list[str | None]:
        """Every status shown, in order."""
        return [c.status for c in self.calls if isinstance(c, Status)]

    @property
    def steps(self) -> list[Step]:
        """Every tool step shown."""
        return [c for c in self.calls if isinstance(c, Step)]

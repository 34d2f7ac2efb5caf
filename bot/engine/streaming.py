"""Live answers: one run's text streamed into the thread, its status line, its tool steps, and Stop.

A :class:`LiveAnswer` is the streaming callback of one invocation of the agent (a run, or a resume).
Each model call's text streams into a message of its own: text the model wrote before a tool call is
finished and kept as it is, the approval (or the tool step) comes after it, and the next model call (or
the resumed run) streams into a new message. So the last message holds exactly the final answer.

Messages are updated at most once per ``interval`` (``COUNTERSIGN_STREAM_UPDATE_SECONDS``) by a
background flusher, so a slow platform never slows the model's stream, and a platform's 429 moves the
next update back by its ``Retry-After``. A stream that fails is not touched again; its text is
delivered whole when the answer is complete (see :meth:`LiveAnswer.deliver`), so nothing is lost.

Stop goes through the agent's hooks like any other stop: :class:`StopFromChat` (an ``after_tool`` hook)
ends the run once the step that was under way has run, with ``exit_reason`` :data:`STOPPED_FROM_CHAT`.

Surfaces that lack the optional methods get the defaults here: no streaming (the answer is posted
once), :meth:`~bot.engine.surface.Surface.show_working` for the status, and no tool steps.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bot.engine.model import ThreadRef, ToolStep
from bot.engine.surface import Surface
from bot.llm.base import RUNNING_TOOLS, StreamingChunk
from bot.redaction import mask_text

logger = logging.getLogger(__name__)

THINKING = "thinking…"
WAITING_FOR_APPROVAL = "waiting for approval"


def running(*tool_names: str) -> str:
    """The status while tools are called, each named once: ``running get_time…``, ``running a, b…``."""
    return f"running {', '.join(dict.fromkeys(tool_names))}…"


class StreamRateLimited(Exception):  # noqa: N818  (a signal, like StopIteration, not a failure)
    """A surface's platform asked to slow down (HTTP 429): try again after ``retry_after`` seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"rate limited; retry after {retry_after:g} s")
        self.retry_after = max(0.0, float(retry_after))


STOPPED_FROM_CHAT = "stopped_from_chat"
"""The ``exit_reason`` of a run someone stopped from chat (the Stop button, Ctrl-C): see :class:`StopFromChat`."""


class StopFromChat:
    """The ``after_tool`` hook that ends a run someone stopped from chat, once its current step has run.

    It asks the run's :class:`LiveAnswer` (this process: a click or Ctrl-C here; or the run's stored stop
    request: a click on another replica) and calls ``event.stop``: the agent finishes the step (every call
    of it runs, its results are stored) and returns with ``exit_reason`` :data:`STOPPED_FROM_CHAT`.
    A tool that runs is never interrupted.
    """

    def __init__(self, live: dict[str, LiveAnswer]) -> None:
        self.live = live

    async def __call__(self, event: Any) -> None:
        """At ``after_tool``: stop the run if someone asked."""
        live = self.live.get(event.run_id)
        if live is not None and await live.stop_asked():
            event.stop(STOPPED_FROM_CHAT)


def settled(text: str) -> str:
    """``text`` up to its last whitespace: only whole words are shown while a stream grows.

    A secret split across two chunks (``sk-ab`` + ``cd…``) would otherwise be shown half, before the
    surface's masking could recognise it; a whole word is masked as it is in a finished message.

    >>> settled("The key is sk-ab")
    'The key is '
    """
    cut = max(text.rfind(" "), text.rfind("\n"), text.rfind("\t"))
    return text[: cut + 1]


def masked_growth(text: str, shown: int) -> str:
    """The masked text to add to a message that shows ``mask_text(text[:shown])`` so that it shows
    ``mask_text(text)`` (for platforms that append, not replace).

    >>> masked_growth("key: abc password=hunter2 ", 9)
    'password=•••••• '
    """
    before, after = mask_text(text[:shown]), mask_text(text)
    return after[len(before) :] if after.startswith(before) else after[len(_common_prefix(before, after)) :]


def _common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]


@dataclass
class _Segment:
    """The message one model call's text streams into."""

    ref: dict[str, Any] | None = None
    opened: bool = False
    """Whether the surface was asked to start the message (``ref`` is ``None`` if it could not)."""
    text: str = ""
    shown: int = 0
    broken: bool = False
    finished: bool = False


class LiveAnswer:
    """The streaming callback of one agent invocation, driving the surface (see the module docstring).

    >>> live = LiveAnswer(surface, thread, "U1", "run-1", interval=1.0)
    >>> await agent.run_async([...], streaming_callback=live.on_chunk)
    >>> await live.deliver(answer_text)  # False: post it the usual way
    >>> await live.close()
    """

    def __init__(
        self,
        surface: Surface,
        thread: ThreadRef,
        requester: str,
        run_id: str,
        *,
        interval: float,
        message_id: str | None = None,
        decided_calls: frozenset[str] = frozenset(),
        stop_check: Callable[[], Awaitable[str | None]] | None = None,
    ) -> None:
        self.surface = surface
        self.thread = thread
        self.requester = requester
        self.run_id = run_id
        self.interval = interval
        self.message_id = message_id
        self.decided_calls = decided_calls
        """Calls people decided on: their approval message shows them, so they get no tool-step line."""
        self.stop_requested_by: str | None = None
        self.stop_check = stop_check
        """Reads, after each tool call, whether someone asked elsewhere (another process) to stop: who, or ``None``."""
        self._segment: _Segment | None = None
        self._lock = asyncio.Lock()
        self._flusher: asyncio.Task[None] | None = None
        self._not_before = 0.0
        self._status: str | None = None
        self._status_line = True
        """Whether the surface has a status line (it said otherwise by returning ``False`` from ``set_status``)."""

    # --- the callback ------------------------------------------------------------------------------

    async def on_chunk(self, chunk: StreamingChunk) -> None:
        """The agent's streaming callback: text, tool calls as they are chosen, the tools a step runs, results."""
        if chunk.tool_call_result is not None:
            await self._tool_step(chunk)
        if chunk.content:
            await self._add_text(chunk.content)
        if any(d.get("name") for d in chunk.tool_call_deltas):
            await self.end_segment()  # the text before a tool call is kept as it is
        names = chunk.meta.get(RUNNING_TOOLS) if chunk.meta else None
        if names:
            await self.status(running(*names))

    def stop(self, actor: str) -> None:
        """Ask the run to stop once its current step has run (the tool running now finishes)."""
        if self.stop_requested_by is None:
            self.stop_requested_by = actor

    async def stop_asked(self) -> str | None:
        """Who asked that the run stop (here, or through another process's stored request), or ``None``."""
        if self.stop_requested_by is None and self.stop_check is not None:
            asked_by = await self.stop_check()
            if asked_by:
                self.stop(asked_by)
        return self.stop_requested_by

    # --- status and tool steps ---------------------------------------------------------------------

    async def status(self, status: str | None) -> None:
        """Show ``status`` (``None`` clears it); only changes reach the surface."""
        if status == self._status:
            return
        self._status = status
        try:
            if await self.surface.set_status(self.thread, status, self.message_id) is False:
                self._status_line = False  # no status line there: show that it works instead
                await self.surface.show_working(self.thread, status is not None, self.message_id)
        except Exception:  # cosmetic: the run goes on
            logger.warning("status not shown", extra={"run_id": self.run_id}, exc_info=True)

    async def _tool_step(self, chunk: StreamingChunk) -> None:
        result = chunk.tool_call_result
        assert result is not None
        await self.status(THINKING)
        origin = result.origin
        if origin.id is not None and origin.id in self.decided_calls:
            return
        step = ToolStep(self.run_id, origin.tool_name, dict(origin.arguments), result.result, result.error)
        try:
            await self.surface.show_tool_step(self.thread, step)
        except Exception:
            logger.warning("tool step not shown", extra={"run_id": self.run_id}, exc_info=True)

    # --- the streamed message ----------------------------------------------------------------------

    async def _add_text(self, text: str) -> None:
        segment = self._segment
        if segment is None or segment.finished:
            segment = self._segment = _Segment()
            # A message is opened once its text has grown for an interval: a quick answer is simply posted.
            self._not_before = max(self._not_before, asyncio.get_running_loop().time() + self.interval)
        segment.text += text
        if segment.opened and segment.ref is None:
            return  # the surface opened no stream for it (it cannot stream): the text is posted when complete
        if not segment.broken and (self._flusher is None or self._flusher.done()):
            self._flusher = asyncio.create_task(self._flush(segment), name=f"stream-{self.run_id}")

    async def _start(self) -> dict[str, Any] | None:
        try:
            return await self.surface.start_stream(self.thread, self.requester, self.run_id)
        except Exception:  # the answer is posted once at the end instead
            logger.warning(
                "could not start a stream; the answer is posted when complete",
                extra={"run_id": self.run_id},
                exc_info=True,
            )
            return None

    async def _wait_turn(self) -> None:
        """Wait until the message may be updated again (the rate cap, or a platform's Retry-After)."""
        delay = self._not_before - asyncio.get_running_loop().time()
        if delay > 0:
            await asyncio.sleep(delay)

    async def _flush(self, segment: _Segment) -> None:
        """Show the segment's new text, at most once per interval, until it is all shown or finished."""
        while not segment.finished and not segment.broken and segment.shown < len(settled(segment.text)):
            await self._wait_turn()
            async with self._lock:
                if segment.finished or segment.broken:
                    return
                if not segment.opened:
                    segment.opened, segment.ref = True, await self._start()
                if segment.ref is None:
                    return  # the surface cannot stream now: the text is posted when complete
                text = settled(segment.text)
                try:
                    await self.surface.append_stream(self.thread, segment.ref, text, segment.shown)
                except StreamRateLimited as limited:
                    self._not_before = asyncio.get_running_loop().time() + limited.retry_after
                    continue
                except Exception:
                    segment.broken = True
                    logger.warning(
                        "stream update failed; the text is delivered whole at the end",
                        extra={"run_id": self.run_id},
                        exc_info=True,
                    )
                    return
                segment.shown = len(text)
                self._not_before = asyncio.get_running_loop().time() + self.interval

    async def _finish(self, segment: _Segment, text: str) -> bool:
        """End ``segment`` showing exactly ``text``; whether it does (else the caller posts ``text``)."""
        async with self._lock:
            segment.finished = True
            if segment.ref is None:
                return False
            # A broken stream gets one try to end it whole (else its text is posted again, in one message).
            for _attempt in range(1 if segment.broken else 3):
                await self._wait_turn()
                try:
                    await self.surface.finish_stream(self.thread, segment.ref, text, segment.shown)
                except StreamRateLimited as limited:
                    self._not_before = asyncio.get_running_loop().time() + limited.retry_after
                    continue
                except Exception:
                    logger.warning(
                        "could not finish a stream; its text is posted again whole",
                        extra={"run_id": self.run_id},
                        exc_info=True,
                    )
                    return False
                segment.shown = len(text)
                self._not_before = asyncio.get_running_loop().time() + self.interval
                return True
            return False

    async def end_segment(self) -> None:
        """Finish the message of the current model call as it stands (text before a tool call, a pause)."""
        segment = self._segment
        if segment is None or segment.finished:
            return
        # Text before a tool call that was never streamed (it came quickly) is not posted on its own.
        if not await self._finish(segment, segment.text) and segment.ref is not None and segment.text.strip():
            await self._post(segment.text)

    async def deliver(self, text: str) -> bool:
        """Show ``text`` (the final answer, or a failure notice) by finishing the open stream with it.

        A failure notice is added after the text streamed so far (``text`` must then start with it, see
        :meth:`with_streamed`). ``False``: nothing is streaming, or the stream could not take it: post
        ``text`` the usual way.
        """
        segment = self._segment
        if segment is None or segment.finished:
            return False
        return await self._finish(segment, text)

    def with_streamed(self, notice: str) -> str:
        """``notice`` after the text the open stream holds, so that finishing the stream keeps that text."""
        segment = self._segment
        if segment is None or segment.finished or segment.ref is None or not segment.text.strip():
            return notice
        return f"{segment.text}\n\n{notice}"

    async def close(self, keep_status: bool = False) -> None:
        """End whatever is still open (never leave a half-finished stream) and clear the status line.

        ``keep_status``: a paused run's "waiting for approval" stays, where the surface has a status line.
        """
        await self.end_segment()
        if self._flusher is not None and not self._flusher.done():
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
        if not (keep_status and self._status_line):
            await self.status(None)

    async def _post(self, text: str) -> None:
        try:
            await self.surface.post_reply(self.thread, text)
        except Exception:
            logger.warning("could not post the text of a stream", extra={"run_id": self.run_id}, exc_info=True)

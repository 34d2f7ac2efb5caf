"""``ConsoleSurface``: the engine's output in a terminal, rendered with rich.

Everything that comes from the model, a tool or a person is untrusted: it is shown through
:class:`rich.text.Text` or :class:`rich.markdown.Markdown` (neither interprets rich markup) after
:func:`inert` has removed terminal control sequences, so it cannot restyle, clear or move the screen.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markdown import Markdown
from rich.panel import Panel
from rich.status import Status
from rich.style import Style
from rich.table import Table
from rich.text import Text

from bot.engine.justification import request_reason_lines
from bot.engine.model import APPROVED, MODIFIED, ApprovalView, Note, QuestionView, ThreadRef, ToolStep, plain_text
from bot.engine.presentation import (
    display_arguments,
    display_result,
    format_time,
    outcome_sentence,
    tool_step_line,
    truncate,
    void_vote_sentence,
)
from bot.engine.previewing import preview_sections
from bot.engine.provenance import provenance_lines
from bot.engine.roles import group_label
from bot.engine.surface import Surface
from bot.redaction import mask_text

DESCRIPTION_LIMIT = 300
VALUE_LIMIT = 500
LABEL_VALUE_LIMIT = 40
LABEL_LIMIT = 100

# C0 controls except tab and newline, DEL, and C1 controls: ESC sequences could clear the screen,
# move the cursor or fake a prompt; a carriage return could overwrite what was printed before it.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def inert(text: str) -> str:
    """``text`` without terminal control characters (tabs and newlines are kept).

    >>> inert("ok\\x1b[2J done\\r")
    'ok[2J done'
    """
    return _CONTROL.sub("", text)


def chat_markdown(text: str) -> Markdown:
    """``text`` as Markdown where a single newline breaks the line, as it does in chat apps.

    Models (and the offline demo) write line-per-item answers; plain Markdown would join those lines
    into one paragraph. Fenced code blocks are left as written.
    """
    lines, fenced = [], False
    for line in inert(text).split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and line.strip():
            line = line.rstrip() + "  "  # a Markdown hard line break
        lines.append(line)
    return Markdown("\n".join(lines))


def _rule(view: ApprovalView) -> tuple[object, ...]:
    """Who may decide a pending call, as the console last printed it."""
    return (view.approvers, view.quorum, view.four_eyes, view.void_votes)


def policy_text(view: ApprovalView) -> str:
    """Who may decide this approval, in one line (mode, approvers, quorum, four-eyes)."""
    who = ", ".join(map(group_label, view.approvers)) if view.approvers else "the requester or an admin"
    parts = [view.policy_mode, f"approvers: {who}"]
    if view.quorum > 1:
        parts.append(f"quorum {view.quorum} ({len(view.votes)} so far)")
    if view.four_eyes:
        parts.append("four-eyes: not the requester")
    return " · ".join(parts)


def approval_panel(view: ApprovalView, index: int = 1, total: int = 1) -> Panel:
    """One pending call as a panel: tool, description, arguments (masked, truncated), who, policy, expiry."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="cyan", no_wrap=True)
    table.add_column(overflow="fold")
    for argument in display_arguments(view.arguments, limit=VALUE_LIMIT):
        note = " (secret, masked)" if argument.secret else " (truncated)" if argument.truncated else ""
        table.add_row(Text(inert(argument.name)), Text(inert(argument.text)).append(note, style="dim"))
    if not view.arguments:
        table.add_row("arguments", Text("(none)", style="dim"))
    if view.is_review:  # the tool ran: what the model would see, masked and cut (all of it is stored)
        result, cut = display_result(view, limit=VALUE_LIMIT * 4)
        shown = Text(inert(result)).append(" (truncated)" if cut else "", style="dim")
        table.add_row(Text("result", style="bold"), shown)
    for line in provenance_lines(view.provenance):  # issue 31: arguments copied from untrusted text
        table.add_row(Text("untrusted", style="bold red"), Text(inert(line), style="red"))
    for line in request_reason_lines(view):  # issue 31: the reason the request gave
        table.add_row(Text("reason", style="bold"), Text(inert(line)))
    for section in preview_sections(view.preview, VALUE_LIMIT * 4):  # issue 30: what the call would do
        table.add_row(Text(section.label, style="bold yellow"), Text(inert(section.text)))
    table.add_row("requested by", Text(inert(view.requester)))
    table.add_row("policy", Text(inert(policy_text(view))))
    table.add_row("expires", Text(format_time(view.expires_at)))
    description, _ = truncate(view.tool_description.strip(), DESCRIPTION_LIMIT)
    body = Group(Text(inert(description), style="italic"), Text(""), table)
    kind = "Review" if view.is_review else "Approval"
    title = Text.assemble(
        (f"{kind} needed" if total == 1 else f"{kind} {index} of {total}", "bold yellow"),
        (" · ", "dim"),
        (inert(view.tool_name), "bold"),
    )
    subtitle = Text(f"id {view.approval_id}", style="dim")
    return Panel(
        body, title=title, title_align="left", subtitle=subtitle, subtitle_align="right", border_style="yellow"
    )


def call_label(view: ApprovalView) -> str:
    """The call in short, secrets masked: ``delete_file(path="old.log")`` (long values and lists cut)."""
    parts = []
    # An edited call is named with the arguments it ran with, not the ones the model asked for.
    arguments = view.final_arguments if view.status == MODIFIED and view.final_arguments else view.arguments
    for argument in display_arguments(arguments, limit=LABEL_VALUE_LIMIT):
        quoted = isinstance(arguments.get(argument.name), str) and not argument.secret
        parts.append(f"{argument.name}={json.dumps(argument.text, ensure_ascii=False) if quoted else argument.text}")
    shown, _ = truncate(", ".join(parts), LABEL_LIMIT)
    return f"{view.tool_name}({shown})"


def outcome_text(view: ApprovalView, index: int = 1, total: int = 1) -> Text:
    """The outcome of a decided approval as one styled line naming its call, e.g.
    ``✔ delete_file(path="old.log") (1 of 2): Approved by ana at …`` (the position only when the step has several).
    """
    good = view.status in (APPROVED, MODIFIED)
    mark, style = ("✔", "green") if good else ("✘", "red")
    position = f" ({index} of {total})" if total > 1 else ""
    return Text.assemble(
        (f"{mark} ", style), (inert(call_label(view)), "bold"), position, ": ", inert(outcome_sentence(view))
    )


def question_panel(view: QuestionView) -> Panel:
    """The question as the terminal shows it (the server's text is escaped and masked)."""
    lines: list[Any] = [Text(inert(mask_text(view.message)))]
    if view.url is not None:
        lines.append(Text.assemble("Open: ", Text(view.url, style=Style(link=view.url))))
    for item in view.fields:
        hint = f" — {item.description}" if item.description else ""
        lines.append(Text(f"• {item.title}{' (required)' if item.required else ''}{hint}", style="dim"))
    title = f"{view.source} asks (during {view.tool_name})"
    return Panel(Group(*lines), title=Text(title), title_align="left", border_style="cyan")


class ConsoleSurface(Surface):
    """The :class:`~bot.engine.surface.Surface` of ``countersign chat``: one terminal, one person.

    Approvals the engine renders are also queued, so the chat loop can ask about them
    (:meth:`take_rendered`) once the engine has returned control.
    """

    def __init__(self, console: Console, thread: ThreadRef | None = None) -> None:
        """Render on ``console`` (a rich Console over the terminal, or over a StringIO in tests).

        ``thread`` is the conversation at the terminal; output for another console thread (say, a
        recovery note after a restart) is labelled with that thread's name and never asked about here.
        """
        self.console = console
        self.thread = thread
        self._rendered: list[ApprovalView] = []
        self._shown_outcomes: dict[str, str] = {}
        self._shown_rules: dict[str, tuple[object, ...]] = {}
        """Issue 30: who may decide each pending call as last printed (a policy tightened while it waits)."""
        self._status: Status | None = None
        self._batches = 0
        self._busy = False
        self._live: Live | None = None
        self._streams = 0
        self.on_question: Callable[[QuestionView], None] | None = None
        """Asks the person a tool's question (the chat loop's :class:`~adapters.console.questions.QuestionDialog`)."""

    # --- the Surface protocol ----------------------------------------------------------------

    async def post_reply(self, thread: ThreadRef, text: str | Note) -> None:
        """Print the agent's answer as Markdown (rich markup in it stays literal text; secrets masked); a
        :class:`Note` as plain text."""
        self.console.print(Text("countersign ›", style="bold green").append(self._elsewhere(thread), style="dim"))
        if isinstance(text, Note):
            self.console.print(Text(inert(mask_text(text.plain()))))
            return
        self.console.print(chat_markdown(mask_text(text)))

    async def render_approvals(self, thread: ThreadRef, approvals: Sequence[ApprovalView]) -> dict[str, Any]:
        """Print one panel per pending call and queue them for the chat loop to ask about."""
        if self._elsewhere(thread):
            self.console.print(Text(f"Approvals are waiting{self._elsewhere(thread)}.", style="yellow"))
        else:
            self.show_approvals(approvals)
            self._rendered.extend(approvals)
        self._batches += 1
        return {"surface": "console", "batch": self._batches}

    async def update_approvals(
        self, thread: ThreadRef, message_ref: dict[str, Any], approvals: Sequence[ApprovalView]
    ) -> None:
        """Print the outcome of every approval that was decided since it was last shown."""
        for index, view in enumerate(approvals, start=1):
            if view.is_pending and self._shown_rules.get(view.approval_id, _rule(view)) != _rule(view):
                self._shown_rules[view.approval_id] = _rule(view)  # issue 30: tightened while it waits
                text = f"{view.tool_name} waits under a stricter policy now: {policy_text(view)}."
                text += "".join(f" {void_vote_sentence(view, voter)}" for voter in view.void_votes)
                self.console.print(Text(inert(text), style="yellow").append(self._elsewhere(thread), style="dim"))
            if view.is_pending or self._shown_outcomes.get(view.approval_id) == view.status:
                continue
            self._shown_outcomes[view.approval_id] = view.status
            line = outcome_text(view, index, len(approvals))
            self.console.print(line.append(self._elsewhere(thread), style="dim"))

    async def ask_question(self, thread: ThreadRef, question: QuestionView) -> dict[str, Any] | None:
        """Print a tool's question and ask it at the prompt; ``None`` (declined) for another thread's run."""
        if self.on_question is None or self._elsewhere(thread):
            return None
        self.stop_working()
        self.console.print(question_panel(question))
        self.on_question(question)
        return {"surface": "console", "question": question.question_id}

    async def update_question(self, thread: ThreadRef, ref: dict[str, Any], question: QuestionView) -> None:
        """A line once nobody answered in time or the call ended (an answer given here is confirmed by the dialog)."""
        if question.status == "withdrawn":
            self.console.print(
                Text(f"The question from {inert(question.source)} was withdrawn: its call ended.", style="yellow")
            )
        elif question.status == "expired":
            self.console.print(
                Text(f"The question from {inert(question.source)} expired; it was declined.", style="yellow")
            )

    async def tell_user(self, thread: ThreadRef, user: str, text: str | Note) -> None:
        """Print a note for the person at the terminal (there is only one)."""
        note = Text(inert(mask_text(plain_text(text))), style="italic yellow")
        self.console.print(note.append(self._elsewhere(thread), style="dim"))

    async def show_working(self, thread: ThreadRef, working: bool, message_id: str | None = None) -> None:
        """Nothing: the chat loop shows a spinner whenever it waits for the engine (see :meth:`busy`).

        A spinner started from here could also come from background work (an expiry) while the person
        is typing, and would draw over their line.
        """

    async def start_stream(self, thread: ThreadRef, requester: str, run_id: str) -> dict[str, Any] | None:
        """Start printing an answer as it arrives (redrawn live on a terminal; printed once when it ends elsewhere)."""
        self.stop_working()
        self.console.print(Text("countersign ›", style="bold green").append(self._elsewhere(thread), style="dim"))
        self._live = Live(chat_markdown(""), console=self.console, auto_refresh=False, vertical_overflow="visible")
        self._live.start()
        self._streams += 1
        return {"surface": "console", "stream": self._streams}

    async def append_stream(self, thread: ThreadRef, stream: dict[str, Any], text: str, shown: int) -> None:
        """Show the answer so far (secrets masked, control characters removed)."""
        if self._live is not None:
            self._live.update(chat_markdown(mask_text(text)), refresh=True)

    async def finish_stream(self, thread: ThreadRef, stream: dict[str, Any], text: str, shown: int) -> None:
        """Show the whole answer and leave it on screen."""
        live, self._live = self._live, None
        if live is None:
            raise RuntimeError("no answer is streaming")  # the engine then prints the answer as a reply
        live.update(chat_markdown(mask_text(text)), refresh=True)
        live.stop()

    async def set_status(self, thread: ThreadRef, status: str | None, message_id: str | None = None) -> None:
        """Name what the agent does next to the spinner, while the chat loop waits for the engine."""
        if status is None or not self._busy or self._live is not None or not self.console.is_terminal:
            return
        if self._status is None:
            self._status = self.console.status(status, spinner="dots")
            self._status.start()
        else:
            self._status.update(status)

    async def show_tool_step(self, thread: ThreadRef, step: ToolStep) -> None:
        """A dim line for a call that ran without approval (masked and shortened like approvals)."""
        line = Text(f"  ↳ {inert(tool_step_line(step))}", style="dim")
        self.console.print(line.append(self._elsewhere(thread)))

    async def show_queued(self, thread: ThreadRef, message_id: str | None = None) -> None:
        """A short note: the message waits for the answer to the previous one."""
        self.console.print(
            Text(f"(queued: I'll answer this after the current one{self._elsewhere(thread)})", style="dim")
        )

    # --- for the chat loop -------------------------------------------------------------------

    def show_approvals(self, approvals: Sequence[ApprovalView]) -> None:
        """Print the panels of ``approvals`` (also used to show a continued thread's pending calls again)."""
        pending = [view for view in approvals if view.is_pending]
        for index, view in enumerate(pending, start=1):
            self._shown_rules[view.approval_id] = _rule(view)
            self.console.print(approval_panel(view, index, len(pending)))

    def take_rendered(self) -> list[ApprovalView]:
        """The approvals rendered since the last call, in order, and forget them."""
        taken, self._rendered = self._rendered, []
        return taken

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Show a spinner while the chat loop waits for the engine (only on a real terminal)."""
        if self._status is not None or not self.console.is_terminal:
            yield
            return
        self._status = self.console.status("working…", spinner="dots")
        self._status.start()
        self._busy = True
        try:
            yield
        finally:
            self._busy = False
            self.stop_working()

    def stop_working(self) -> None:
        """Remove the spinner (and end a live answer left open), if any."""
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._status is not None:
            self._status.stop()
            self._status = None

    def _elsewhere(self, thread: ThreadRef) -> str:
        """`` (thread NAME)`` when ``thread`` is not the one at the terminal, else ``""``."""
        if self.thread is None or thread == self.thread:
            return ""
        return f" (thread {inert(thread.thread)})"

    def say(self, renderable: RenderableType) -> None:
        """Print something of the console adapter's own (prompts' notes, command answers)."""
        self.console.print(renderable)

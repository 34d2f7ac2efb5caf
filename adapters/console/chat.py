"""``countersign chat``: a terminal conversation with the agent, through the same engine as Slack and Teams.

:func:`run_chat` is registered as the entry point ``countersign.console:chat``; ``bot.cli`` finds it
there, so ``bot/`` never imports this package.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import getpass
import os
import signal
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from adapters.console.dialog import ApprovalDialog
from adapters.console.questions import QuestionDialog
from adapters.console.reader import InputFunc, LineReader, Reader, TerminalReader, stdin_is_a_terminal
from adapters.console.surface import ConsoleSurface, inert
from bot.config import DEFAULT_TOOLS, Config
from bot.demo_tools import DEFAULT_SANDBOX_NAME
from bot.engine.admin_syntax import COMMAND_WORDS
from bot.engine.engine import Engine
from bot.engine.errors import EngineError
from bot.engine.model import AdminRequest, ApprovalView, Inbound, ThreadRef
from bot.redaction import mask_text
from bot.tools import Tool, Toolset, flatten_tools

if TYPE_CHECKING:
    from bot.mcp import MCPManager

PLATFORM = "console"
WORKSPACE = "local"
CHANNEL = "console"
CHAT = "this chat"
SECOND_CTRL_C = (
    "(Still waiting for the running tool to finish. Press Ctrl-C once more to quit without waiting: "
    "its outcome is then recorded as unknown, as after a crash, and it is never run again.)"
)
THIRD_CTRL_C = "Quitting without waiting for the running tool; its outcome will be recorded as unknown."
INTERRUPTED_EXIT_CODE = 130
"""How confirmations name the console's workspace (a rule without ``#channel`` applies to every console chat)."""
# The engine's command words; /help is the console's own.
ADMIN_WORDS = tuple(word for word in COMMAND_WORDS if word != "help")
QUIT_WORDS = ("/quit", "/exit", "/q")
MAX_BANNER_ERROR = 120
"""How much of a failed MCP server's last error the banner shows (``/mcp list`` shows more)."""

CONSOLE_HELP = """\
Type a request for the assistant, e.g. "list files", "read notes.txt" or "delete old.log".
When a tool call needs approval you answer y (approve), n (reject, then optional feedback) or
m (modify: edit each parameter, Enter keeps it). Enter alone never approves.

Commands:
  /help                 this text
  /quit                 leave (so do Ctrl-D and Ctrl-C at the prompt); pending approvals wait for
                        you: continue with `countersign chat --thread NAME`
  Ctrl-C while the assistant works stops it after its current step (a running tool finishes;
                        a third Ctrl-C quits without waiting, its outcome recorded as unknown)
  /policy list          each tool's effective policy here
  /policy set <tool|*> <always|never|once|deny|review|always+review> [when …], /policy reset <tool>
  /approvers <tool> <@user|@group ...|none>, /quorum <tool> <n>, /four-eyes <tool> on|off,
  /ttl <tool> <duration>, /group set|list|delete, /access allow|revoke|list, /dm on|off
  /mcp list, /mcp reload  the MCP servers; re-read COUNTERSIGN_MCP_CONFIG (admins)
  /pending              approvals waiting for a decision
  /audit [n]            the last n audit entries
  /memory list, /memory forget <id>, /memory clear me
                        what the assistant remembers for you (and for everyone here)
  /usage [#channel] [days]  tokens the model used
Policy changes need your user id in COUNTERSIGN_ADMINS."""


def default_user() -> str:
    """The console user id: the OS user name (``console-user`` when it cannot be found)."""
    try:
        return getpass.getuser() or "console-user"
    except (KeyError, OSError):  # no passwd entry, no USER variable (some containers)
        return "console-user"


def run_chat(
    config: Config,
    *,
    thread: str = "default",
    user: str | None = None,
    input_func: InputFunc | None = None,
    console: Console | None = None,
    generator: Any = None,
    tools: Sequence[Tool | Toolset] | None = None,
) -> int:
    """Chat in the terminal until EOF, Ctrl-C or ``/quit``; returns the exit code (0).

    ``thread`` names the conversation (the same name continues it after a restart); ``user`` is the
    person's id (default: the OS user name). ``input_func``, ``console``, ``generator`` and ``tools``
    replace the terminal, the configured model and the configured tools (tests, embedding). Without
    ``input_func``, a terminal is read with prompt_toolkit (long and multi-line pastes arrive whole),
    anything else (a pipe) line by line.
    Configuration errors (``bot.config.ConfigError``) propagate to the caller.
    """
    console = console or Console()
    session = ChatSession(
        config,
        thread=thread,
        user=user or default_user(),
        reader=_reader(input_func, console),
        console=console,
    )
    try:
        return asyncio.run(session.run(generator=generator, tools=tools))
    except KeyboardInterrupt:  # a second Ctrl-C while shutting down
        console.print()
        return 0


def _reader(input_func: InputFunc | None, console: Console) -> Reader:
    if input_func in (None, builtins.input) and stdin_is_a_terminal():
        return TerminalReader()
    return LineReader(input_func or builtins.input, console)


class ChatSession:
    """One terminal conversation: the banner, the read-send-ask loop and the slash commands."""

    def __init__(self, config: Config, *, thread: str, user: str, reader: Reader, console: Console) -> None:
        """Everything but the engine, which :meth:`run` opens and closes."""
        self.config = config
        self.user = user
        self.thread = ThreadRef(PLATFORM, WORKSPACE, CHANNEL, thread)
        self.reader = reader
        self.console = console
        self.surface = ConsoleSurface(console, thread=self.thread)
        self._stopping: asyncio.Future[None] | None = None
        """The stop Ctrl-C asked for, while it is checked (a reference, so the task is not collected)."""
        self._interrupts = 0
        """Ctrl-C presses while the agent works on the current message."""

    async def run(self, *, generator: Any = None, tools: Sequence[Tool | Toolset] | None = None) -> int:
        """Open the engine, chat until the input ends, stop the engine; returns 0."""
        chosen = flatten_tools(list(tools)) if tools is not None else self.config.load_tools()
        engine = await Engine.create(self.config, generator=generator, tools=chosen)
        engine.register_surface(PLATFORM, self.surface)
        dialog = ApprovalDialog(engine, self.surface, self.reader, self.user)
        self.surface.on_question = QuestionDialog(engine, self.surface, self.reader, self.user).start
        try:
            await engine.start()
            admin = await engine.is_admin(self.user, PLATFORM)
            demo_sandbox = tools is None and self._default_tools
            self._banner(chosen, generator, admin=admin, demo_sandbox=demo_sandbox, mcp=engine.mcp)
            await self._continue_thread(engine, dialog)
            await self._loop(engine, dialog)
        except (EOFError, KeyboardInterrupt, asyncio.CancelledError):
            # Ctrl-D, or Ctrl-C (asyncio.run turns it into a cancellation of this task): leave quietly.
            self.console.print()
        finally:
            self.surface.stop_working()
            await self._say_goodbye(engine)
            await engine.stop()
        return 0

    async def _loop(self, engine: Engine, dialog: ApprovalDialog) -> None:
        while True:
            text = (await self.reader.read(f"{self.user} › ")).strip()
            if not text:
                continue
            if text.startswith("/"):
                if text.split()[0].lower() in QUIT_WORDS:
                    return
                await self._command(engine, text)
                continue
            inbound = Inbound(
                platform=PLATFORM,
                workspace=WORKSPACE,
                channel=CHANNEL,
                thread=self.thread.thread,
                user=self.user,
                text=text,
                event_id=uuid.uuid4().hex,
                user_name=self.user,
                is_direct=True,  # a terminal conversation is one person's, with the bot
            )
            with self.surface.busy(), self._ctrl_c_stops(engine):
                await engine.handle_message(inbound)
            await dialog.settle(self.surface.take_rendered())

    @contextlib.contextmanager
    def _ctrl_c_stops(self, engine: Engine) -> Iterator[None]:
        """While the agent works, Ctrl-C stops the run after its current step instead of leaving the chat."""
        loop = asyncio.get_running_loop()
        previous = signal.getsignal(signal.SIGINT)
        self._interrupts = 0
        try:
            loop.add_signal_handler(signal.SIGINT, self._stop_run, engine)
        except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no signals here
            yield
            return
        try:
            yield
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            signal.signal(signal.SIGINT, previous)  # Ctrl-C at the prompt leaves the chat again

    def _stop_run(self, engine: Engine) -> None:
        """Ctrl-C while the agent works: the first stops the run after its step, the second says what a third does,
        the third quits at once."""
        self._interrupts += 1
        if self._interrupts == 1:
            # A signal handler cannot await: whether this user may stop the run (an admin through a group, too) is
            # asked in a task of its own.
            self._stopping = asyncio.ensure_future(self._request_stop(engine))
        elif self._interrupts == 2:
            self.console.print(Text(SECOND_CTRL_C, style="yellow"))
        else:
            self._quit_without_waiting()

    def _quit_without_waiting(self) -> None:
        """End the process now, as a crash would: a running tool's outcome is recorded as unknown by the recovery
        of the next start (its ledger entry says it began and never ended), and it is never run again."""
        self.surface.stop_working()
        self.console.print(Text(THIRD_CTRL_C, style="red"))
        self.console.file.flush()
        os._exit(INTERRUPTED_EXIT_CODE)

    async def _request_stop(self, engine: Engine) -> None:
        try:
            answer = await engine.request_stop(self.thread, self.user)
        except EngineError as refused:
            answer = str(refused)
        self.console.print(Text(f"({answer} A tool that is running finishes first.)", style="yellow"))

    async def _command(self, engine: Engine, text: str) -> None:
        """``/help`` here; admin words go to the engine's admin parser; anything else is unknown."""
        command = text[1:].strip()
        word = command.split()[0].lower() if command else ""
        if word == "help":
            self.console.print(Text(CONSOLE_HELP))
            return
        if word == "admin":  # "/admin policy list" works too
            command = command[len("admin") :].strip() or "help"
        elif word not in ADMIN_WORDS:
            self.console.print(Text(f"Unknown command /{inert(word)}. Type /help for the commands.", style="yellow"))
            return
        request = AdminRequest(
            platform=PLATFORM, workspace=WORKSPACE, channel=CHANNEL, actor=self.user, text=command, workspace_name=CHAT
        )
        answer = await engine.admin(request)
        self.console.print(Text(inert(answer)))

    async def _continue_thread(self, engine: Engine, dialog: ApprovalDialog) -> None:
        """Show again the calls of this thread that still wait for this person, and ask about them."""
        # engine.start() may already have resumed a run of this thread that paused again: its panels
        # are on screen, so only the older pending calls need showing.
        just_rendered = {view.approval_id for view in self.surface.take_rendered()}
        pending = await self._pending_here(engine)
        if not pending:
            return
        self.console.print(
            Text(f"This thread has {len(pending)} tool call(s) waiting for your decision:", style="bold yellow")
        )
        self.surface.show_approvals([view for view in pending if view.approval_id not in just_rendered])
        await dialog.settle(pending)

    async def _pending_here(self, engine: Engine) -> list[ApprovalView]:
        listed = await engine.pending_for(PLATFORM, self.user, place=self.thread.place)
        pending = [v for v in listed if v.thread == self.thread]
        return sorted(pending, key=lambda v: v.created_at)

    async def _say_goodbye(self, engine: Engine) -> None:
        try:
            waiting = await self._pending_here(engine)
        except Exception:  # storage already unusable: nothing more to say
            waiting = []
        if waiting:
            self.console.print(
                Text(
                    f"{len(waiting)} tool call(s) still wait for your decision; continue with "
                    f"`countersign chat --thread {self.thread.thread}`.",
                    style="yellow",
                )
            )
        self.console.print(Text("Bye.", style="dim"))

    @property
    def _default_tools(self) -> bool:
        return tuple(self.config.tool_specs) == DEFAULT_TOOLS

    def _banner(
        self, tools: Sequence[Tool], generator: Any, *, admin: bool, demo_sandbox: bool, mcp: MCPManager | None = None
    ) -> None:
        lines = Text()
        lines.append("countersign chat", style="bold")
        lines.append(": an LLM agent whose sensitive tool calls wait for your approval.\n")
        lines.append("model     ", style="cyan").append(self._model_text(generator) + "\n")
        lines.append("tools     ", style="cyan").append(", ".join(t.name for t in tools) or "(none)")
        lines.append("  (/policy list shows which ones ask)\n", style="dim")
        if mcp is not None and mcp.statuses():
            lines.append(mcp_lines(mcp))
        if demo_sandbox:
            sandbox = Path.cwd() / DEFAULT_SANDBOX_NAME
            lines.append("sandbox   ", style="cyan").append(f"{sandbox} (the demo tools touch nothing else)\n")
        lines.append("database  ", style="cyan").append(f"{self.config.db_path.resolve()}\n")
        lines.append("thread    ", style="cyan").append(
            f"{self.thread.thread}  (continue it later with --thread {self.thread.thread})\n"
        )
        lines.append("you       ", style="cyan").append(self.user)
        if admin:
            lines.append("  (admin: you may change policies)\n")
        else:
            lines.append(f"  (not an admin: to change policies, start with COUNTERSIGN_ADMINS={self.user})\n")
        lines.append(f"{_try_line(tools)} /help for commands; Ctrl-D or /quit to leave.", style="dim")
        self.console.print(Panel(lines, border_style="blue"))

    def _model_text(self, generator: Any) -> str:
        from bot.llm import ANNOUNCEMENT, OfflineDemoChatGenerator

        if generator is not None:
            if isinstance(generator, OfflineDemoChatGenerator):
                return ANNOUNCEMENT
            return str(getattr(generator, "model", None) or type(generator).__name__)
        if not self.config.llm_configured:
            return ANNOUNCEMENT
        return f"{self.config.model} at {self.config.openai_base_url or 'api.openai.com'}"


def mcp_lines(mcp: MCPManager) -> Text:
    """The banner's lines for the MCP servers: each one's tools (``<server>__<tool>``), or why it has none."""
    offered: dict[str, list[str]] = {}
    for tool in mcp.tools():
        if tool.mcp is not None:
            offered.setdefault(tool.mcp.server, []).append(tool.name)
    lines = Text()
    for status in mcp.statuses():
        lines.append("mcp       ", style="cyan").append(f"{status.name} ({status.transport}): ")
        names = offered.get(status.name, [])
        if names:
            lines.append(", ".join(names))
        if status.status != "ready":
            error = mask_text(status.last_error or "not connected yet")
            lines.append(f"{'  ' if names else ''}{status.status}: {error[:MAX_BANNER_ERROR]}", style="yellow")
        lines.append("\n")
    return lines


def _try_line(tools: Sequence[Tool]) -> str:
    """What to type first: the demo phrases with the demo tools, else a ``call`` of a configured tool."""
    from bot.llm.offline_calls import usage

    names = {t.name for t in tools}
    if {"list_files", "delete_file"} <= names:
        return 'Try "list files" or "delete old.log".'
    if tools:
        return f'Try "{usage(tools[0])}".'
    return ""

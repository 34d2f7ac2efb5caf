"""Reading a line from the person without stopping the event loop.

Two readers with one method, :meth:`Reader.read`:

- :class:`TerminalReader`, for a real terminal: prompt_toolkit reads keys in raw mode, so a pasted
  line of any length arrives whole (``input()`` in the terminal's canonical mode silently cuts a line
  at 4,095 characters), and a multi-line paste (bracketed paste) arrives as one message.
- :class:`LineReader`, for everything else (a pipe, a test's script): ``input_func`` reads whole lines.
  The read blocks, so it happens on a thread while the engine's background work (resumes, the expiry
  sweep) keeps running. It is a daemon thread of its own rather than ``asyncio.to_thread``: after
  Ctrl-C the executor's worker would stay blocked in ``input()`` and the interpreter would wait for it
  at exit (until the person pressed Enter); a daemon thread does not hold the exit up.
"""

from __future__ import annotations

import asyncio
import builtins
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from rich.console import Console
from rich.text import Text

from bot.redaction import MASK

if TYPE_CHECKING:
    from prompt_toolkit.input import Input
    from prompt_toolkit.output import Output

InputFunc = Callable[[str], str]
"""Reads one line after showing the given prompt, like :func:`input`; raises EOFError when input ends."""


class Reader(Protocol):
    """Where the chat's lines come from."""

    async def read(self, prompt: str, *, secret: bool = False) -> str:
        """The next message (it may span lines); raises EOFError or KeyboardInterrupt when input ends."""
        ...


def stdin_is_a_terminal() -> bool:
    """Whether the chat runs in an interactive terminal (both ends), where :class:`TerminalReader` applies."""
    return sys.stdin.isatty() and sys.stdout.isatty()


class TerminalReader:
    """Reads messages with prompt_toolkit: long lines whole, a bracketed multi-line paste as one message.

    Enter sends; pasted newlines stay in the message. ``input`` and ``output`` replace the terminal
    (prompt_toolkit's ``create_pipe_input`` and ``DummyOutput`` in tests).
    """

    def __init__(self, *, input: Input | None = None, output: Output | None = None) -> None:
        """Open a prompt session on the terminal (or on the given input and output)."""
        from prompt_toolkit import PromptSession  # imported only for a terminal: it costs ~0.1 s

        self._session: Any = PromptSession(input=input, output=output)

    async def read(self, prompt: str, *, secret: bool = False) -> str:
        """The next message, typed or pasted (secrets are not echoed); raises EOFError on Ctrl-D."""
        from prompt_toolkit.formatted_text import FormattedText

        text: str = await self._session.prompt_async(FormattedText([("bold", prompt)]), is_password=secret)
        return text


class LineReader:
    """Reads lines with ``input_func`` on a daemon thread; the terminal's ``input`` goes through rich.

    With any other ``input_func`` (a test's script, a pipe) the prompt and the answer are also printed
    on the console, so its output reads as a transcript.
    """

    def __init__(self, input_func: InputFunc, console: Console) -> None:
        """``input_func``: :func:`input` for the terminal, or a scripted stand-in."""
        self._input_func = input_func
        self._console = console

    @property
    def interactive(self) -> bool:
        """Whether lines come from the terminal's own :func:`input`."""
        return self._input_func is builtins.input

    async def read(self, prompt: str, *, secret: bool = False) -> str:
        """The next line (without its newline); raises EOFError or KeyboardInterrupt when input ends."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str] = loop.create_future()

        def settle(value: str | None, error: BaseException | None) -> None:
            if future.done():  # the chat was cancelled meanwhile
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(value or "")

        def work() -> None:
            try:
                value = self._read_blocking(prompt, secret)
            except BaseException as exc:  # EOFError, KeyboardInterrupt: the chat loop ends on them
                loop.call_soon_threadsafe(settle, None, exc)
            else:
                loop.call_soon_threadsafe(settle, value, None)

        threading.Thread(target=work, name="countersign-console-input", daemon=True).start()
        return await future

    def _read_blocking(self, prompt: str, secret: bool) -> str:
        if self.interactive:
            return self._console.input(Text(prompt, style="bold"), password=secret)
        answer = self._input_func(prompt)
        shown = MASK if secret and answer else answer
        self._console.print(Text.assemble((prompt, "bold"), shown))
        return answer

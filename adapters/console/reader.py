"""Reading a line from the person without stopping the event loop.

The read blocks, so it happens on a thread while the engine's background work (resumes, the expiry
sweep) keeps running. It is a daemon thread of its own rather than ``asyncio.to_thread``: after
Ctrl-C the executor's worker would stay blocked in ``input()`` and the interpreter would wait for it at
exit (until the person pressed Enter); a daemon thread does not hold the exit up.
"""

from __future__ import annotations

import asyncio
import builtins
import threading
from collections.abc import Callable

from rich.console import Console
from rich.text import Text

from bot.redaction import MASK

InputFunc = Callable[[str], str]
"""Reads one line after showing the given prompt, like :func:`input`; raises EOFError when input ends."""


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

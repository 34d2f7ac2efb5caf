"""Test data for the console tests: a scripted keyboard and a terminal session over real objects.

``ConsoleHarness`` runs :func:`adapters.console.chat.run_chat` with a real Engine on a SQLite file in a
test's tmp folder, the demo tools over ``<tmp>/sandbox`` (each execution counted), a rich Console
writing to a StringIO, and the typed lines given — then EOF, like Ctrl-D.
"""

from __future__ import annotations

import dataclasses
import io
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from adapters.console.chat import run_chat
from bot.config import Config
from bot.demo_tools import build_demo_toolset
from bot.llm import OfflineDemoChatGenerator
from bot.tools import Tool

USER = "ana"


class ScriptedInput:
    """Stands in for :func:`input`: returns the given lines one by one, then raises EOFError (Ctrl-D).

    A line may also be an exception instance (e.g. ``KeyboardInterrupt()``) to raise at that point.
    Every prompt shown is kept in :attr:`prompts`.
    """

    def __init__(self, lines: Sequence[str | BaseException]) -> None:
        self._lines = list(lines)
        self.prompts: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, prompt: str = "") -> str:
        with self._lock:
            self.prompts.append(prompt)
            if not self._lines:
                raise EOFError
            line = self._lines.pop(0)
        if isinstance(line, BaseException):
            raise line
        return line

    @property
    def unread(self) -> int:
        """Lines never asked for (a test whose script was not fully used did not go as planned)."""
        return len(self._lines)


@dataclasses.dataclass
class ChatOutcome:
    """What one ``run_chat`` session left behind."""

    code: int
    output: str
    keyboard: ScriptedInput

    def prompts_starting(self, text: str) -> list[str]:
        """The prompts that start with ``text``."""
        return [p for p in self.keyboard.prompts if p.startswith(text)]


class ConsoleHarness:
    """Runs console sessions on one database file and one sandbox folder (so threads can be continued)."""

    def __init__(self, tmp_path: Path, *, admins: frozenset[str] = frozenset(), **config: Any) -> None:
        self.db_path = tmp_path / "cs.db"
        self.sandbox = tmp_path / "sandbox"
        self.config = Config(db_path=self.db_path, admins=admins, **config)
        self.executed: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.tools = [self._counted(t) for t in build_demo_toolset(self.sandbox)]

    def chat(
        self,
        lines: Sequence[str | BaseException],
        *,
        generator: Any = None,
        thread: str = "default",
        user: str = USER,
    ) -> ChatOutcome:
        """Run one session with the offline demo model (or ``generator``) and return its transcript."""
        keyboard = ScriptedInput(lines)
        buffer = io.StringIO()
        console = Console(file=buffer, width=120, color_system=None)
        code = run_chat(
            self.config,
            thread=thread,
            user=user,
            input_func=keyboard,
            console=console,
            generator=generator if generator is not None else OfflineDemoChatGenerator(),
            tools=self.tools,
        )
        return ChatOutcome(code=code, output=buffer.getvalue(), keyboard=keyboard)

    def _counted(self, template: Tool) -> Tool:
        """The same tool, counting its executions in :attr:`executed`."""
        function: Callable[..., Any] = template.function

        def counted(**kwargs: Any) -> Any:
            with self._lock:
                self.executed[template.name] += 1
            return function(**kwargs)

        return dataclasses.replace(template, function=counted)

"""A running tool's question (MCP elicitation) at the terminal: a panel, then one prompt per field.

The surface prints the question and hands it here; the dialog reads the answers (Enter alone leaves a field
empty, or takes its default) and passes them to the engine, which checks them: a bad value is shown with its
field and asked again. ``n`` declines. A link (URL mode) is printed as a link, never asked as a field.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.text import Text

from adapters.console.reader import Reader
from adapters.console.surface import ConsoleSurface
from bot.engine.errors import EngineError, InvalidEdit
from bot.engine.model import AnswerRequest, QuestionField, QuestionView
from bot.redaction import is_secret_key

if TYPE_CHECKING:
    from bot.engine.engine import Engine

ACCEPT_WORDS = ("y", "yes")
DECLINE_WORDS = ("n", "no")


class QuestionDialog:
    """Asks the person at the terminal each question the surface shows (see the module docstring)."""

    def __init__(self, engine: Engine, surface: ConsoleSurface, reader: Reader, user: str) -> None:
        self._engine = engine
        self._surface = surface
        self._reader = reader
        self._user = user
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, view: QuestionView) -> None:
        """Ask ``view`` now, beside the run that waits for it."""
        task = asyncio.create_task(self.ask(view), name=f"question-{view.question_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def ask(self, view: QuestionView) -> None:
        """Read the answer and pass it on; re-ask the fields the engine refuses."""
        self._surface.stop_working()
        fields: Sequence[QuestionField] = view.fields
        values: dict[str, Any] = {}
        prompt = (
            "Done? [y] accept · [n] decline: " if view.url is not None else "Answer? [y] fill it in · [n] decline: "
        )
        while True:
            choice = (await self._reader.read(prompt)).strip().lower()
            if choice in ACCEPT_WORDS + DECLINE_WORDS:
                break
        if choice in DECLINE_WORDS:
            await self._send(AnswerRequest(view.question_id, self._user, "decline"))
            return
        while True:
            for item in fields:
                values[item.name] = await self._read_field(item)
            try:
                sentence = await self._engine.answer_question(
                    AnswerRequest(view.question_id, self._user, "accept", values)
                )
            except InvalidEdit as err:
                self._surface.say(Text(str(err), style="red"))
                fields = [f for f in view.fields if f.name in err.errors] or list(view.fields)
                continue
            except EngineError as err:
                self._surface.say(Text(str(err), style="red"))
                return
            self._surface.say(Text(sentence, style="green"))
            return

    async def _read_field(self, item: QuestionField) -> Any:
        hint = {"boolean": " [y/n]", "array": " (comma-separated)"}.get(item.kind, "")
        if item.choices:
            hint = f" ({' | '.join(value for value, _ in item.choices)}){hint}"
        if item.default not in (None, ""):
            hint += f" [{item.default}]"
        raw = (await self._reader.read(f"{item.title}{hint}: ", secret=is_secret_key(item.name))).strip()
        if not raw:
            return item.default
        if item.kind == "boolean":
            return {"y": "true", "n": "false"}.get(raw.lower(), raw)
        if item.kind == "array":
            return [part.strip() for part in raw.split(",") if part.strip()]
        return raw

    async def _send(self, request: AnswerRequest) -> None:
        try:
            sentence = await self._engine.answer_question(request)
        except EngineError as err:
            self._surface.say(Text(str(err), style="red"))
            return
        self._surface.say(Text(sentence, style="yellow"))

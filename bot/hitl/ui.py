"""Confirmation UIs: each answers one question, *what did the human say about this call?*

The two console UIs share one dialog: ``y`` confirms, ``n`` rejects (then asks for optional feedback),
``m`` edits the params field by field (Enter keeps a value) and returns as soon as the edits are done,
as Haystack's do (``m`` on a call without params modifies nothing: ``{}``). Pressing Enter alone never
confirms, and input that ends (EOF, Ctrl-C) rejects. Secret-named params are masked wherever they are
shown.
"""

from __future__ import annotations

import builtins
import getpass
import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.prompt import Prompt
from rich.text import Text

from bot.hitl.dataclasses import ConfirmationUIResult
from bot.hitl.serialization import default_from_dict, default_to_dict
from bot.redaction import MASK, is_secret_key, mask_for_display, scrub
from bot.tools import InvalidToolArguments, Tool, Toolset, flatten_tools

NO_ANSWER_FEEDBACK = "no answer (input closed)"
"""The feedback of the rejection returned when input ends before the human answered."""

InputFunc = Callable[[str], str]
"""Reads one line after showing the given prompt, like :func:`input`."""

# One lock for every console UI: two calls on different threads (parallel tool calls) would otherwise
# interleave their prompts on the same terminal.
_UI_LOCK = threading.Lock()


class ConfirmationUI(Protocol):
    """Asks a human about one tool call.

    Subclass it to inherit the default serialisation.
    """

    def get_user_confirmation(
        self, tool_name: str, tool_description: str, tool_params: dict[str, Any]
    ) -> ConfirmationUIResult:
        """Show the call and return the human's answer."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """Serialise as ``{"type": ..., "init_parameters": {}}``."""
        return default_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConfirmationUI:
        """Inverse of :meth:`to_dict`."""
        return default_from_dict(cls, data)


class InvalidValue(ValueError):
    """A value typed while editing a param could not be read as the field's type."""


def parse_edited_value(raw: str, current: Any) -> Any:
    """Read the text typed for a param whose value is ``current``, keeping ``current``'s type.

    Strings are taken as typed (a quoted JSON string such as ``""`` is decoded, so a field can be
    emptied); booleans accept true/false/yes/no; numbers must parse as the current number type; lists
    and objects must be JSON of the same kind; a field with any other value takes JSON if the text is
    JSON, else the text.

    >>> parse_edited_value("3", 1), parse_edited_value('["a"]', []), parse_edited_value("x", "y")
    (3, ['a'], 'x')
    """
    text = raw.strip()
    if isinstance(current, str):
        if len(text) >= 2 and text.startswith('"') and text.endswith('"'):
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                return text
        return text
    if isinstance(current, bool):  # before int: bool is an int subclass
        lowered = text.lower()
        if lowered in ("true", "yes", "y"):
            return True
        if lowered in ("false", "no", "n"):
            return False
        raise InvalidValue("expected true or false")
    if isinstance(current, int):
        try:
            return int(text)
        except ValueError:
            raise InvalidValue("expected a whole number") from None
    if isinstance(current, float):
        try:
            return float(text)
        except ValueError:
            raise InvalidValue("expected a number") from None
    if isinstance(current, list | dict):
        kind = "a JSON list" if isinstance(current, list) else "a JSON object"
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise InvalidValue(f"expected {kind}") from None
        if not isinstance(value, type(current)):
            raise InvalidValue(f"expected {kind}")
        return value
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _read_field(tool: Tool | None, key: str, raw: str, current: Any) -> Any:
    """The value typed for ``key``: by the tool's schema when the field is in it, else by ``current``."""
    if tool is None or key not in (tool.parameters.get("properties") or {}):
        return parse_edited_value(raw, current)
    # a text field keeps the console's own reading (a quoted "" empties it); the schema then checks it
    typed = parse_edited_value(raw, current) if isinstance(current, str) else raw.strip()
    try:
        return tool.coerce_field(key, typed)
    except InvalidToolArguments as exc:
        # validation messages quote the value: one typed into a secret field is not echoed
        raise InvalidValue(scrub(exc.errors[key], {key: raw.strip()})) from None


def display_value(key: str, value: Any) -> str:
    """How a param value is shown to the human: masked if its name (or its text) says secret, JSON unless a string."""
    if is_secret_key(key):
        return MASK
    value = mask_for_display(value)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class _ConsoleDialog(ConfirmationUI, ABC):
    """The dialog both console UIs run; subclasses only say how to show text and read a line.

    With ``tools`` given, each edited field is read and checked by its tool's schema (a ``date`` field
    takes ``2026-12-01`` and re-asks on ``not-a-date``); without, by the type of the current value.
    """

    _REASK_CHOICE = "Please answer y (run it), n (reject it) or m (modify its parameters)."
    _tools: dict[str, Tool]

    def _set_tools(self, tools: Iterable[Tool | Toolset] | None) -> None:
        self._tools = {t.name: t for t in flatten_tools(tools)}

    def to_dict(self) -> dict[str, Any]:
        """Serialise as ``{"type": ..., "init_parameters": {}}``, with the tools when there are any."""
        return default_to_dict(self, **self._init_parameters())

    def _init_parameters(self) -> dict[str, Any]:
        return {"tools": [t.to_dict() for t in self._tools.values()]} if self._tools else {}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConfirmationUI:
        """Inverse of :meth:`to_dict`."""
        params = dict(data.get("init_parameters") or {})
        if params.get("tools"):
            params["tools"] = [Tool.from_dict(t) for t in params["tools"]]
        return default_from_dict(cls, {**data, "init_parameters": params})

    def get_user_confirmation(
        self, tool_name: str, tool_description: str, tool_params: dict[str, Any]
    ) -> ConfirmationUIResult:
        """Show the call, then ask until the human gives a valid answer (or input ends: reject)."""
        with _UI_LOCK:
            try:
                self._show_request(tool_name, tool_description, tool_params)
                return self._dialog(tool_name, tool_params)
            except (EOFError, KeyboardInterrupt):
                self._say("")  # the prompt line was left open
                return ConfirmationUIResult(action="reject", feedback=NO_ANSWER_FEEDBACK)

    def _dialog(self, tool_name: str, tool_params: dict[str, Any]) -> ConfirmationUIResult:
        choice = self._ask_choice()  # re-asks by itself until the answer is y, n or m
        if choice == "y":
            return ConfirmationUIResult(action="confirm")
        if choice == "n":
            return ConfirmationUIResult(action="reject", feedback=self._ask_feedback())
        # No feedback question after the edits: scripted and piped input written for Haystack stays in step.
        edits = self._edit_params(tool_params, self._tools.get(tool_name)) if tool_params else {}
        return ConfirmationUIResult(action="modify", new_tool_params=edits)

    def _edit_params(self, tool_params: dict[str, Any], tool: Tool | None = None) -> dict[str, Any]:
        """Ask for each field in turn; only fields the human typed something for are returned."""
        self._say("Type a new value for each parameter, or press Enter to keep it.")
        edited: dict[str, Any] = {}
        for key, current in tool_params.items():
            while True:
                raw = self._ask(f"{key} (current: {display_value(key, current)})", secret=is_secret_key(key))
                if not raw.strip():
                    break
                try:
                    edited[key] = _read_field(tool, key, raw, current)
                    break
                except InvalidValue as exc:
                    self._say(f"Invalid value for '{key}': {exc}. Try again, or press Enter to keep it.")
        return edited

    def _ask_feedback(self) -> str | None:
        return self._ask("Feedback for the assistant (optional, Enter to skip)").strip() or None

    # --- what the subclasses provide -------------------------------------------------------------

    @abstractmethod
    def _show_request(self, tool_name: str, tool_description: str, tool_params: dict[str, Any]) -> None:
        """Show the call that waits for a decision (secrets masked)."""

    @abstractmethod
    def _ask_choice(self) -> str:
        """Return ``"y"``, ``"n"`` or ``"m"``, re-asking on anything else (an empty line included)."""

    @abstractmethod
    def _ask(self, prompt: str, *, secret: bool = False) -> str:
        """Read one line after ``prompt``."""

    @abstractmethod
    def _say(self, text: str) -> None:
        """Show one line of text."""


class SimpleConsoleUI(_ConsoleDialog):
    """Asks on the terminal with plain :func:`input` and :func:`print`.

    >>> SimpleConsoleUI().get_user_confirmation("delete_file", "Delete a file", {"path": "a.txt"})
    """

    _CHOICES = {"y": "y", "yes": "y", "n": "n", "no": "n", "m": "m", "modify": "m"}

    def __init__(self, input_func: InputFunc | None = None, tools: Iterable[Tool | Toolset] | None = None) -> None:
        """``input_func`` replaces :func:`input` (tests inject scripted answers); ``tools`` type the edits."""
        self._input_func = input_func
        self._set_tools(tools)

    def _show_request(self, tool_name: str, tool_description: str, tool_params: dict[str, Any]) -> None:
        print("\n--- Tool Execution Request ---")
        print(f"Tool: {tool_name}")
        print(f"Description: {tool_description}")
        print("Arguments:")
        for key, value in tool_params.items():
            print(f"  {key}: {display_value(key, value)}")
        if not tool_params:
            print("  (No arguments)")
        print("-" * 30)

    def _ask_choice(self) -> str:
        while True:
            answer = self._ask("Confirm execution? (y=confirm / n=reject / m=modify): ").strip().lower()
            if answer in self._CHOICES:
                return self._CHOICES[answer]
            print(self._REASK_CHOICE)

    def _ask(self, prompt: str, *, secret: bool = False) -> str:
        prompt = prompt if prompt.endswith(" ") else f"{prompt}: "
        if self._input_func is not None:
            return self._input_func(prompt)
        return getpass.getpass(prompt) if secret else builtins.input(prompt)

    def _say(self, text: str) -> None:
        print(text)


class RichConsoleUI(_ConsoleDialog):
    """Asks on the terminal with a rich panel and rich prompts.

    >>> RichConsoleUI(console=Console(file=io.StringIO()), input_func=lambda prompt: "y")
    """

    def __init__(
        self,
        console: Console | None = None,
        input_func: InputFunc | None = None,
        tools: Iterable[Tool | Toolset] | None = None,
    ) -> None:
        """``console`` is where the request is shown; ``input_func`` replaces reading the terminal;
        ``tools`` type the edits."""
        self.console = console or Console()
        self._input_func = input_func
        self._set_tools(tools)

    def _show_request(self, tool_name: str, tool_description: str, tool_params: dict[str, Any]) -> None:
        lines = [
            f"[bold yellow]Tool:[/bold yellow] {escape(tool_name)}",
            f"[bold yellow]Description:[/bold yellow] {escape(tool_description)}",
            "\n[bold yellow]Arguments:[/bold yellow]",
        ]
        lines += [f"[cyan]{escape(k)}:[/cyan] {escape(display_value(k, v))}" for k, v in tool_params.items()]
        if not tool_params:
            lines.append("  (No arguments)")
        lines.append("\n[dim]y = run it · n = reject it · m = modify its parameters[/dim]")
        self.console.print(Panel("\n".join(lines), title="Tool Execution Request", title_align="left"))

    def _ask_choice(self) -> str:
        # No default: an empty line is not a choice, so rich re-asks instead of confirming.
        prompt = _Prompt(
            "Your choice",
            console=self.console,
            choices=["y", "n", "m"],
            case_sensitive=False,
            input_func=self._input_func,
        )
        prompt.illegal_choice_message = f"[prompt.invalid]{self._REASK_CHOICE}"
        return prompt()

    def _ask(self, prompt: str, *, secret: bool = False) -> str:
        return _Prompt(escape(prompt), console=self.console, password=secret, input_func=self._input_func)()

    def _init_parameters(self) -> dict[str, Any]:
        # Haystack's shape: a console cannot be serialised, so it is always None (a new one on load).
        return {"console": None, **super()._init_parameters()}

    def _say(self, text: str) -> None:
        self.console.print(Text(text))


class _Prompt(Prompt):
    """A rich prompt that reads through an injected function when one is given."""

    def __init__(self, prompt: str, *, input_func: InputFunc | None, **kwargs: Any) -> None:
        super().__init__(prompt, **kwargs)
        self._input_func = input_func

    def get_input(  # type: ignore[override]  # rich declares it a classmethod; we need the instance
        self, console: Console, prompt: Text | str, password: bool, stream: Any = None
    ) -> str:
        if self._input_func is None:
            return console.input(prompt, password=password, stream=stream)
        console.print(prompt, end="")
        return self._input_func(prompt.plain if isinstance(prompt, Text) else prompt)

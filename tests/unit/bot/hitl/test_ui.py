"""The console confirmation UIs: what a person at the terminal sees and what their answers amount to."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest
from rich.console import Console

from bot.hitl import ui as ui_module
from bot.hitl.dataclasses import ConfirmationUIResult
from bot.hitl.serialization import component_from_dict, component_to_dict
from bot.hitl.ui import (
    NO_ANSWER_FEEDBACK,
    InvalidValue,
    RichConsoleUI,
    SimpleConsoleUI,
    display_value,
    parse_edited_value,
)

DELETE = ("delete_file", "Delete a file in the sandbox")
SECRET = "ghp_supersecretvalue123"


@dataclass
class Keyboard:
    """Types the scripted lines, one per prompt; input ends (EOF) when the script runs out."""

    lines: list[str | BaseException]
    prompts: list[str] = field(default_factory=list)

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.lines:
            raise EOFError
        line = self.lines.pop(0)
        if isinstance(line, BaseException):
            raise line
        return line

    def choice_prompts(self) -> list[str]:
        return [p for p in self.prompts if "choice" in p.lower() or "confirm execution" in p.lower()]


@dataclass
class Terminal:
    ui: SimpleConsoleUI | RichConsoleUI
    keyboard: Keyboard
    read_output: Callable[[], str]

    def ask(self, params: dict, tool: tuple[str, str] = DELETE) -> ConfirmationUIResult:
        return self.ui.get_user_confirmation(tool[0], tool[1], params)


TerminalFactory = Callable[[Iterable[str | BaseException]], Terminal]


@pytest.fixture(params=["simple", "rich"])
def terminal(request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> TerminalFactory:
    """Builds either console UI wired to a scripted keyboard and a captured screen."""

    def build(lines: Iterable[str | BaseException]) -> Terminal:
        keyboard = Keyboard(list(lines))
        if request.param == "simple":
            return Terminal(SimpleConsoleUI(input_func=keyboard), keyboard, lambda: capsys.readouterr().out)
        screen = io.StringIO()
        console = Console(file=screen, width=120, color_system=None)
        return Terminal(RichConsoleUI(console=console, input_func=keyboard), keyboard, screen.getvalue)

    return build


# --- choosing ------------------------------------------------------------------------------------


def test_y_confirms_without_asking_anything_else(terminal: TerminalFactory) -> None:
    term = terminal(["y"])

    assert term.ask({"path": "a.txt"}) == ConfirmationUIResult(action="confirm")
    assert len(term.keyboard.prompts) == 1


def test_the_request_shows_the_tool_its_description_and_its_params(terminal: TerminalFactory) -> None:
    term = terminal(["y"])
    term.ask({"path": "reports/q3.csv", "recursive": False})

    screen = term.read_output()
    assert "delete_file" in screen
    assert "Delete a file in the sandbox" in screen
    assert "path: reports/q3.csv" in screen
    assert "recursive: false" in screen


def test_pressing_enter_alone_never_confirms_it_asks_again(terminal: TerminalFactory) -> None:
    term = terminal(["", "   ", "n", ""])

    result = term.ask({"path": "a.txt"})

    assert result == ConfirmationUIResult(action="reject", feedback=None)
    assert len(term.keyboard.choice_prompts()) == 3


def test_pressing_enter_until_input_ends_rejects(terminal: TerminalFactory) -> None:
    term = terminal(["", "", ""])

    assert term.ask({"path": "a.txt"}) == ConfirmationUIResult(action="reject", feedback=NO_ANSWER_FEEDBACK)


def test_an_unknown_answer_is_explained_and_asked_again(terminal: TerminalFactory) -> None:
    term = terminal(["maybe", "ok", "y"])

    assert term.ask({"path": "a.txt"}).action == "confirm"
    assert len(term.keyboard.choice_prompts()) == 3
    assert "Please answer y" in term.read_output()


def test_choices_are_case_insensitive(terminal: TerminalFactory) -> None:
    assert terminal(["Y"]).ask({"path": "a.txt"}).action == "confirm"


def test_the_simple_ui_also_accepts_whole_words() -> None:
    assert SimpleConsoleUI(input_func=Keyboard(["yes"])).get_user_confirmation(*DELETE, {}).action == "confirm"
    rejected = SimpleConsoleUI(input_func=Keyboard(["no", ""])).get_user_confirmation(*DELETE, {})
    assert rejected.action == "reject"


# --- rejecting -----------------------------------------------------------------------------------


def test_n_rejects_with_the_feedback_typed_next(terminal: TerminalFactory) -> None:
    term = terminal(["n", "  that file is still needed  "])

    assert term.ask({"path": "a.txt"}) == ConfirmationUIResult(action="reject", feedback="that file is still needed")


def test_n_with_no_feedback_rejects_without_feedback(terminal: TerminalFactory) -> None:
    assert terminal(["n", ""]).ask({"path": "a.txt"}) == ConfirmationUIResult(action="reject", feedback=None)


@pytest.mark.parametrize("ending", [EOFError(), KeyboardInterrupt()], ids=["eof", "ctrl-c"])
def test_input_ending_before_an_answer_rejects(terminal: TerminalFactory, ending: BaseException) -> None:
    term = terminal([ending])

    assert term.ask({"path": "a.txt"}) == ConfirmationUIResult(action="reject", feedback=NO_ANSWER_FEEDBACK)


@pytest.mark.parametrize("ending", [EOFError(), KeyboardInterrupt()], ids=["eof", "ctrl-c"])
def test_input_ending_in_the_middle_of_an_edit_rejects(terminal: TerminalFactory, ending: BaseException) -> None:
    term = terminal(["m", "b.txt", ending])

    result = term.ask({"path": "a.txt", "force": False})

    assert result == ConfirmationUIResult(action="reject", feedback=NO_ANSWER_FEEDBACK)


# --- modifying -----------------------------------------------------------------------------------


def test_m_asks_for_every_field_and_returns_only_the_edited_ones(terminal: TerminalFactory) -> None:
    term = terminal(["m", "", "archive/a.txt", ""])

    result = term.ask({"path": "a.txt", "dst": "b.txt", "force": False})

    # As in Haystack, the dialog ends with the last field: no feedback question follows.
    assert result == ConfirmationUIResult(action="modify", new_tool_params={"dst": "archive/a.txt"}, feedback=None)
    assert len(term.keyboard.prompts) == 4


def test_each_field_prompt_shows_the_current_value(terminal: TerminalFactory) -> None:
    term = terminal(["m", "", "", "", ""])
    term.ask({"path": "a.txt", "retries": 3, "tags": ["x", "y"]})

    edit_prompts = term.keyboard.prompts[1:4]
    assert "path (current: a.txt)" in edit_prompts[0]
    assert "retries (current: 3)" in edit_prompts[1]
    assert 'tags (current: ["x", "y"])' in edit_prompts[2]


def test_edited_values_keep_the_type_of_the_current_value(terminal: TerminalFactory) -> None:
    term = terminal(["m", "5", "0.25", "true", '["a", "b"]', '{"k": 1}', "[not json", ""])

    result = term.ask({"retries": 3, "ratio": 0.5, "force": False, "tags": [], "options": {}, "title": "old"})

    assert result.new_tool_params == {
        "retries": 5,
        "ratio": 0.25,
        "force": True,
        "tags": ["a", "b"],
        "options": {"k": 1},
        "title": "[not json",
    }


def test_a_value_that_does_not_fit_the_field_is_explained_and_asked_again(terminal: TerminalFactory) -> None:
    term = terminal(["m", "five", "5", ""])

    result = term.ask({"retries": 3})

    assert result.new_tool_params == {"retries": 5}
    assert "Invalid value for 'retries': expected a whole number" in term.read_output()
    assert sum("retries (current: 3)" in p for p in term.keyboard.prompts) == 2


def test_a_quoted_empty_string_empties_a_text_field(terminal: TerminalFactory) -> None:
    assert terminal(["m", '""', ""]).ask({"comment": "old"}).new_tool_params == {"comment": ""}


def test_an_edit_that_keeps_every_field_is_still_a_modify_with_no_edits(terminal: TerminalFactory) -> None:
    # The strategy turns a modify without changes into a confirm; the UI reports what was typed.
    result = terminal(["m", "", ""]).ask({"path": "a.txt"})

    assert result == ConfirmationUIResult(action="modify", new_tool_params={}, feedback=None)


def test_m_on_a_tool_without_params_is_a_modify_with_no_edits(terminal: TerminalFactory) -> None:
    term = terminal(["m"])

    result = term.ask({})

    assert result == ConfirmationUIResult(action="modify", new_tool_params={}, feedback=None)
    assert len(term.keyboard.prompts) == 1


# --- secrets -------------------------------------------------------------------------------------


def test_secret_params_are_masked_in_the_request_and_in_the_edit_prompts(terminal: TerminalFactory) -> None:
    term = terminal(["m", "", "", ""])
    term.ask({"repo": "acme/api", "github_token": SECRET, "headers": {"Authorization": SECRET}})

    seen = term.read_output() + "\n".join(term.keyboard.prompts)
    assert SECRET not in seen
    assert "acme/api" in seen
    assert "••••••" in seen


def test_an_edited_secret_reaches_the_result_unmasked(terminal: TerminalFactory) -> None:
    result = terminal(["m", "new-token-value", ""]).ask({"api_key": SECRET})

    assert result.new_tool_params == {"api_key": "new-token-value"}


def test_rich_ui_shows_markup_in_values_literally() -> None:
    screen = io.StringIO()
    ui = RichConsoleUI(console=Console(file=screen, width=120, color_system=None), input_func=Keyboard(["y"]))

    ui.get_user_confirmation("write_file", "Write [b]text[/b]", {"content": "[red]alert[/red]"})

    assert "[red]alert[/red]" in screen.getvalue()
    assert "Write [b]text[/b]" in screen.getvalue()


# --- concurrency ---------------------------------------------------------------------------------


def test_a_prompt_holds_the_lock_shared_by_every_console_ui() -> None:
    held: list[bool] = []

    def keyboard(prompt: str) -> str:
        # Another UI instance (another thread's tool call) could not start its dialog now.
        held.append(not ui_module._UI_LOCK.acquire(blocking=False))
        return "y"

    SimpleConsoleUI(input_func=keyboard).get_user_confirmation(*DELETE, {"path": "a.txt"})
    RichConsoleUI(console=Console(file=io.StringIO()), input_func=keyboard).get_user_confirmation(*DELETE, {})

    assert held == [True, True]
    assert ui_module._UI_LOCK.acquire(blocking=False)
    ui_module._UI_LOCK.release()


def test_concurrent_confirmations_ask_one_dialog_at_a_time() -> None:
    transcript: list[tuple[int, str]] = []
    start = threading.Barrier(6)

    def keyboard(prompt: str) -> str:
        me = threading.get_ident()
        transcript.append((me, prompt))
        choice_prompts = [p for t, p in transcript if t == me and "choice" in p.lower()]
        return "m" if len(choice_prompts) == 1 and "choice" in prompt.lower() else ("7" if "(current" in prompt else "")

    ui = RichConsoleUI(console=Console(file=io.StringIO()), input_func=keyboard)

    def ask(n: int) -> ConfirmationUIResult:
        start.wait()
        return ui.get_user_confirmation("scale", "Scale a deployment", {"replicas": n, "note": "x"})

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(ask, range(6)))

    assert all(r.new_tool_params == {"replicas": 7, "note": "7"} for r in results)
    # Each dialog (choice, two fields) is three consecutive prompts from one thread.
    threads = [t for t, _ in transcript]
    assert len(threads) == 18
    assert all(len(set(threads[i : i + 3])) == 1 for i in range(0, 18, 3))


# --- serialisation and value helpers -------------------------------------------------------------


@pytest.mark.parametrize("ui_class", [SimpleConsoleUI, RichConsoleUI])
def test_console_uis_serialise_without_their_console_or_keyboard(ui_class: type) -> None:
    data = component_to_dict(ui_class(input_func=Keyboard([])))

    # Haystack's shapes: RichConsoleUI names its console (None: a console cannot be serialised)
    params = {"console": None} if ui_class is RichConsoleUI else {}
    assert data == {"type": f"bot.hitl.ui.{ui_class.__name__}", "init_parameters": params}
    assert type(component_from_dict(data)) is ui_class


@pytest.mark.parametrize(
    ("raw", "current", "expected"),
    [
        ("42", 1, 42),
        ("-1.5", 2.0, -1.5),
        ("3", 2.0, 3.0),
        ("no", True, False),
        ("YES", False, True),
        ("hello world", "x", "hello world"),
        ('"quoted"', "x", "quoted"),
        ("{", "x", "{"),
        ("[1, 2]", [0], [1, 2]),
        ('{"a": null}', {}, {"a": None}),
        ("12", None, 12),
        ("plain words", None, "plain words"),
    ],
)
def test_parse_edited_value_reads_text_as_the_current_values_type(raw: str, current: object, expected: object) -> None:
    assert parse_edited_value(raw, current) == expected
    assert type(parse_edited_value(raw, current)) is type(expected)


@pytest.mark.parametrize(
    ("raw", "current"),
    [("1.5", 1), ("abc", 1.0), ("maybe", True), ("{}", []), ("[1]", {}), ("nope", [])],
)
def test_parse_edited_value_refuses_text_that_does_not_fit(raw: str, current: object) -> None:
    with pytest.raises(InvalidValue):
        parse_edited_value(raw, current)


def test_display_value_masks_secret_names_and_nested_secrets() -> None:
    assert display_value("password", "hunter2") == "••••••"
    assert display_value("config", {"user": "ana", "token": "t0k3n"}) == '{"user": "ana", "token": "••••••"}'
    assert display_value("path", "a.txt") == "a.txt"

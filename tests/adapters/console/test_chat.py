"""``countersign chat`` end to end: typed lines → real Engine on a SQLite file → demo tools → the terminal.

Each session is driven by a scripted keyboard (lines, then EOF like Ctrl-D) and rendered by rich into
a StringIO; the model is the offline demo model or a scripted one.
"""

from __future__ import annotations

import asyncio
import io

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from adapters.console.chat import ChatSession
from adapters.console.reader import TerminalReader
from bot.llm import ANNOUNCEMENT, ScriptedChatGenerator
from bot.messages import ChatMessage, ChatRole, ToolCall
from tests.fakes.console_kit import USER, ConsoleHarness

APPROVAL_PROMPT = "Run delete_file?"
REASK = "Enter alone does not approve"


def asks_to_delete(path: str) -> ChatMessage:
    return ChatMessage.from_assistant(tool_calls=[ToolCall("delete_file", {"path": path})])


def last_tool_result(messages: list[ChatMessage]) -> str:
    results = [m.tool_call_result for m in messages if m.role is ChatRole.TOOL]
    assert results, "the model was sent no tool result"
    return results[-1].result


# --- approve, reject, modify ---------------------------------------------------------------------------


def test_approving_a_delete_runs_it_once_and_prints_the_answer(harness):
    outcome = harness.chat(["delete old.log", "y"])

    assert outcome.code == 0
    assert not (harness.sandbox / "old.log").exists()
    assert harness.executed["delete_file"] == 1
    assert "Approval needed · delete_file" in outcome.output
    assert "path          old.log" in outcome.output
    assert f"Approved by {USER}" in outcome.output
    assert 'delete_file(path="old.log"): Deleted old.log.' in outcome.output
    # the answer came before the next prompt: nothing was left for the session to print after EOF
    assert outcome.output.index("Deleted old.log.") < outcome.output.index("Bye.")
    assert len(outcome.prompts_starting(f"{USER} › ")) == 2


def test_rejecting_with_feedback_keeps_the_file_and_tells_the_model(harness):
    model = ScriptedChatGenerator(
        [asks_to_delete("old.log"), lambda messages: ChatMessage.from_assistant("Understood, I kept old.log.")]
    )
    outcome = harness.chat(["delete old.log", "n", "we still need it for the audit"], generator=model)

    assert (harness.sandbox / "old.log").exists()
    assert harness.executed["delete_file"] == 0
    told = last_tool_result(model.calls[1]["messages"])
    assert "rejected" in told and "we still need it for the audit" in told
    assert f"Rejected by {USER}" in outcome.output and "Feedback: we still need it for the audit" in outcome.output
    assert "Understood, I kept old.log." in outcome.output


def test_modifying_runs_the_call_with_the_edited_path(harness):
    outcome = harness.chat(["delete old.log", "m", "notes.txt", ""])

    assert (harness.sandbox / "old.log").exists()
    assert not (harness.sandbox / "notes.txt").exists()
    assert harness.executed["delete_file"] == 1
    assert outcome.prompts_starting("  path (current: old.log)")
    assert f"Edited and approved by {USER}" in outcome.output and "path=notes.txt" in outcome.output
    assert '✔ delete_file(path="notes.txt"): Edited and approved' in outcome.output  # the arguments that ran
    assert "Deleted notes.txt." in outcome.output


def test_modify_with_nothing_changed_asks_again_instead_of_approving(harness):
    outcome = harness.chat(["delete old.log", "m", "", "n", ""])

    assert (harness.sandbox / "old.log").exists()
    assert harness.executed["delete_file"] == 0
    assert "Nothing was changed; choose again." in outcome.output
    assert len(outcome.prompts_starting(APPROVAL_PROMPT)) == 2


def test_enter_alone_and_unknown_answers_ask_again(harness):
    outcome = harness.chat(["delete old.log", "", "sure", "n", ""])

    assert (harness.sandbox / "old.log").exists()
    assert harness.executed["delete_file"] == 0
    assert len(outcome.prompts_starting(APPROVAL_PROMPT)) == 3
    assert outcome.output.count(REASK) == 2


def test_each_edited_value_is_checked_as_it_is_typed_and_a_default_is_shown_as_current(harness):
    # restart_service(service, force: bool = False): "perhaps" is not a boolean, so that field is asked again
    outcome = harness.chat(["restart nginx", "m", "", "perhaps", "true", ""])

    assert "force: must be true or false. Type it again, or press Enter to keep it." in outcome.output
    asked = outcome.keyboard.prompts
    force = [i for i, p in enumerate(asked) if p.startswith("  force (current: false, the default)")]
    note = [i for i, p in enumerate(asked) if p.startswith("Note for the assistant")]
    assert len(force) == 2 and len(note) == 1 and force[-1] < note[0]  # re-asked before the note
    assert "The edited parameters are invalid" not in outcome.output
    assert harness.executed["restart_service"] == 1
    assert "Service 'nginx' forcefully restarted" in outcome.output
    assert '✔ restart_service(service="nginx", force=true): Edited and approved' in outcome.output
    assert outcome.keyboard.unread == 0


def test_each_pending_call_of_a_step_is_asked_about_in_turn(harness):
    outcome = harness.chat(["delete old.log and delete notes.txt", "y", "n", ""])

    assert "Approval 1 of 2 · delete_file" in outcome.output and "Approval 2 of 2 · delete_file" in outcome.output
    assert outcome.prompts_starting("Run delete_file (1 of 2)?")
    assert outcome.prompts_starting("Run delete_file (2 of 2)?")
    assert not (harness.sandbox / "old.log").exists()
    assert (harness.sandbox / "notes.txt").exists()
    assert harness.executed["delete_file"] == 1


# --- ending and continuing -------------------------------------------------------------------------------


def test_eof_at_the_approval_prompt_exits_cleanly_and_leaves_the_call_pending(harness):
    outcome = harness.chat(["delete old.log"])

    assert outcome.code == 0
    assert (harness.sandbox / "old.log").exists()
    assert "1 tool call(s) still wait for your decision; continue with `countersign chat --thread default`" in (
        outcome.output
    )
    assert "Traceback" not in outcome.output


def test_ctrl_c_at_the_prompt_exits_cleanly(harness):
    outcome = harness.chat(["list files", KeyboardInterrupt()])

    assert outcome.code == 0
    assert "notes.txt" in outcome.output and "Bye." in outcome.output


def test_quit_command_ends_the_session(harness):
    outcome = harness.chat(["/quit", "list files"])

    assert outcome.code == 0
    assert outcome.keyboard.unread == 1
    assert harness.executed["list_files"] == 0


def test_a_thread_continues_across_restarts_with_its_pending_approval(harness):
    first = harness.chat(["delete old.log"], thread="ops")
    assert "still wait for your decision" in first.output

    second = harness.chat(["y"], thread="ops")

    assert "This thread has 1 tool call(s) waiting for your decision:" in second.output
    assert "Approval needed · delete_file" in second.output
    assert not (harness.sandbox / "old.log").exists()
    assert harness.executed["delete_file"] == 1
    assert "Deleted old.log." in second.output


def test_a_continued_thread_gives_the_model_its_history_and_other_threads_do_not(harness):
    harness.chat(["list files"], thread="ops")
    seen: list[list[str]] = []

    def remember(messages: list[ChatMessage]) -> ChatMessage:
        seen.append([m.text or "" for m in messages if m.role is ChatRole.USER])
        return ChatMessage.from_assistant("noted")

    harness.chat(["what did I ask before?"], thread="ops", generator=ScriptedChatGenerator([remember]))
    harness.chat(["what did I ask before?"], thread="other", generator=ScriptedChatGenerator([remember]))

    assert seen[0] == ["list files", "what did I ask before?"]
    assert seen[1] == ["what did I ask before?"]


def test_another_users_pending_call_is_not_asked_about(harness):
    harness.chat(["delete old.log"], thread="ops", user="ana")

    outcome = harness.chat([], thread="ops", user="bob")

    assert "waiting for your decision" not in outcome.output
    assert (harness.sandbox / "old.log").exists()


# --- banner, rendering, commands -----------------------------------------------------------------------


def test_the_banner_names_the_model_tools_database_thread_and_how_to_become_admin(harness):
    outcome = harness.chat([], thread="ops")

    assert ANNOUNCEMENT in outcome.output
    for name in ("list_files", "read_file", "write_file", "delete_file", "restart_service", "get_time"):
        assert name in outcome.output
    assert str(harness.db_path.resolve()) in outcome.output
    assert "thread    ops" in outcome.output
    assert f"COUNTERSIGN_ADMINS={USER}" in outcome.output


def test_model_text_cannot_inject_markup_or_terminal_control_sequences(harness):
    model = ScriptedChatGenerator([ChatMessage.from_assistant("[bold red]pwned[/] \x1b[2J\x1b[1;1Hfake prompt\r")])
    outcome = harness.chat(["hello"], generator=model)

    assert "[bold red]pwned[/]" in outcome.output
    assert "\x1b" not in outcome.output and "\r" not in outcome.output


def test_a_non_admin_cannot_change_policies_from_the_console(harness):
    outcome = harness.chat(["/policy set delete_file never"])

    assert "Only countersign admins can change policies." in outcome.output


def test_an_admin_policy_change_applies_to_the_next_request(tmp_path):
    harness = ConsoleHarness(tmp_path, admins=frozenset({USER}))
    outcome = harness.chat(["/policy set delete_file never", "delete old.log", "/audit 5"])

    assert "Rule updated" in outcome.output
    assert "Approval needed" not in outcome.output
    assert not (harness.sandbox / "old.log").exists()
    assert f"{USER} policy set" in outcome.output


def test_help_lists_the_console_and_admin_commands_and_unknown_commands_are_refused(harness):
    outcome = harness.chat(["/help", "/frobnicate"])

    assert "/policy list" in outcome.output and "/quit" in outcome.output
    assert "Unknown command /frobnicate. Type /help for the commands." in outcome.output


# --- long lines and pastes -------------------------------------------------------------------------------

LONG_LINE = "".join(f"line{n:05d} " for n in range(1_000))[:9_999] + "?"


def user_texts(model: ScriptedChatGenerator) -> list[str]:
    """The newest user message of every request the model got."""
    return [[m for m in call["messages"] if m.role is ChatRole.USER][-1].text for call in model.calls]


def test_a_ten_thousand_character_line_reaches_the_model_whole(harness):
    model = ScriptedChatGenerator([ChatMessage.from_assistant("Read it all.")])

    outcome = harness.chat([LONG_LINE], generator=model)

    assert outcome.code == 0
    assert user_texts(model) == [LONG_LINE]


def test_the_terminal_reader_sends_a_long_line_and_a_bracketed_multi_line_paste_as_one_message_each(harness):
    model = ScriptedChatGenerator([ChatMessage.from_assistant("one"), ChatMessage.from_assistant("two")])
    buffer = io.StringIO()
    with create_pipe_input() as keys:
        keys.send_text("\x1b[200~" + LONG_LINE + "\x1b[201~\r")  # pasted as one line
        keys.send_text("\x1b[200~check these:\nold.log\nnotes.txt\x1b[201~\r")  # pasted: Enter sends it all
        keys.send_text("\x04")  # Ctrl-D
        session = ChatSession(
            harness.config,
            thread="default",
            user=USER,
            reader=TerminalReader(input=keys, output=DummyOutput()),
            console=Console(file=buffer, width=120, color_system=None),
        )
        code = asyncio.run(session.run(generator=model, tools=harness.tools))

    assert code == 0
    assert user_texts(model) == [LONG_LINE, "check these:\nold.log\nnotes.txt"]
    assert "one" in buffer.getvalue() and "two" in buffer.getvalue() and "Bye." in buffer.getvalue()


async def test_the_terminal_reader_hides_a_secret_and_ends_on_ctrl_d():
    with create_pipe_input() as keys:
        reader = TerminalReader(input=keys, output=DummyOutput())
        keys.send_text("hunter2\r\x04")

        assert await reader.read("  password: ", secret=True) == "hunter2"
        with pytest.raises(EOFError):
            await reader.read("ana › ")


# --- outcomes of a step with several calls ---------------------------------------------------------------


def test_each_outcome_line_of_a_step_names_its_call(harness):
    outcome = harness.chat(["delete old.log and delete notes.txt", "y", "n", ""])

    lines = [line for line in outcome.output.splitlines() if line.startswith(("✔", "✘"))]
    assert len(lines) == 2
    assert lines[0].startswith('✔ delete_file(path="old.log") (1 of 2): Approved by ana')
    assert lines[1].startswith('✘ delete_file(path="notes.txt") (2 of 2): Rejected by ana')


def test_ctrl_c_while_the_agent_works_stops_the_run_after_the_running_tool_and_the_chat_goes_on(tmp_path):
    import os
    import signal

    from adapters.console.chat import run_chat
    from bot.config import Config
    from bot.tools import tool
    from tests.fakes.console_kit import ScriptedInput

    ran: list[str] = []

    @tool(confirmation_default="never")
    async def build_report(name: str) -> str:
        """Build a report.

        :param name: Which report.
        """
        os.kill(os.getpid(), signal.SIGINT)  # the person presses Ctrl-C while this tool runs
        await asyncio.sleep(0)
        ran.append(name)
        return f"report {name} built"

    generator = ScriptedChatGenerator(
        [
            ChatMessage.from_assistant(tool_calls=[ToolCall("build_report", {"name": "q3"})]),
            ChatMessage.from_assistant("And now the next report."),
        ]
    )
    keyboard = ScriptedInput(["build the q3 report", "/usage"])
    buffer = io.StringIO()

    code = run_chat(
        Config(db_path=tmp_path / "cs.db"),
        user=USER,
        input_func=keyboard,
        console=Console(file=buffer, width=120, color_system=None),
        generator=generator,
        tools=[build_report],
    )

    output = buffer.getvalue()
    assert code == 0
    assert ran == ["q3"]  # the tool that was running finished
    assert len(generator.calls) == 1  # and the model was not asked again
    assert "Stopping after the current step." in output
    assert "↳ build_report(name=q3) → report q3 built" in output
    assert "(Stopped.)" in output
    assert "Token usage in this chat" in output  # the chat went on after the stop


def test_the_console_is_always_listened_to_and_takes_the_team_commands(tmp_path):
    harness = ConsoleHarness(tmp_path, admins=frozenset({USER}))
    harness.config = harness.config.with_overrides(reply_mode="mention")  # a terminal is a direct conversation

    outcome = harness.chat(["/access list", f"/group set oncall @{USER}", "/group list", "delete old.log", "y"])

    assert "Everyone may ask the bot, in every channel of this workspace (no access rules)." in outcome.output
    assert f"@oncall: {USER}" in outcome.output
    assert harness.executed["delete_file"] == 1


def test_a_thread_paused_with_tools_not_configured_now_says_which_and_offers_to_reject(harness):
    harness.chat(["delete old.log"], thread="ops")
    harness.tools = [t for t in harness.tools if t.name != "delete_file"]

    outcome = harness.chat(["y", "not needed any more"], thread="ops")

    assert "delete_file is not configured here now" in outcome.output
    assert "COUNTERSIGN_TOOLS" in outcome.output
    assert outcome.prompts_starting("Reject delete_file? [y] reject · [n] leave it waiting")
    assert not outcome.prompts_starting("Run delete_file?")
    assert "this request cannot continue: it was using delete_file" in outcome.output
    assert "Approved" not in outcome.output
    assert "something went wrong" not in outcome.output
    assert (harness.sandbox / "old.log").exists()
    assert harness.executed["delete_file"] == 0
    assert "waiting for your decision" not in harness.chat([], thread="ops").output


def test_admin_confirmations_name_the_place_as_this_chat(tmp_path):
    admin = ConsoleHarness(tmp_path, admins=frozenset({USER}))

    outcome = admin.chat(["/policy set delete_file never", "/policy reset delete_file"])

    assert "Rule updated: delete_file in this chat: mode=never" in outcome.output
    assert "Rule for delete_file in this chat removed." in outcome.output
    assert "workspace:console" not in outcome.output

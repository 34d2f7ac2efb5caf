"""Three Ctrl-C presses while a tool runs: the second says what the third does, the third quits at once, and the
tool's outcome is recorded as unknown by the next start's recovery, as after a crash (it is never run again).

The chat runs in a child process (the third Ctrl-C ends the process, like a crash), on a SQLite file here.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

from adapters.console.chat import INTERRUPTED_EXIT_CODE, SECOND_CTRL_C, THIRD_CTRL_C
from bot.config import Config
from bot.engine.engine import Engine
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage
from bot.tools import tool
from tests.fakes.recording_surface import RecordingSurface

CHILD = textwrap.dedent(
    """
    import asyncio, io, os, signal, sys
    from pathlib import Path
    from rich.console import Console
    from adapters.console.chat import run_chat
    from bot.config import Config
    from bot.llm import ScriptedChatGenerator
    from bot.messages import ChatMessage, ToolCall
    from bot.tools import tool
    from tests.fakes.console_kit import ScriptedInput

    @tool(confirmation_default="never")
    async def build_report(name: str) -> str:
        '''Build a report.

        :param name: Which report.
        '''
        for _ in range(3):  # the person presses Ctrl-C three times while this tool runs
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(200):
                await asyncio.sleep(0)
        await asyncio.Event().wait()  # a tool that never finishes: only the third Ctrl-C ends this
        return "never"

    generator = ScriptedChatGenerator(
        [ChatMessage.from_assistant(tool_calls=[ToolCall("build_report", {"name": "q3"})])]
    )
    run_chat(
        Config(db_path=Path(sys.argv[1])),
        user="ana",
        input_func=ScriptedInput(["build the q3 report"]),
        console=Console(file=sys.stdout, width=200, color_system=None),
        generator=generator,
        tools=[build_report],
    )
    print("the chat returned")
    """
)


@tool(confirmation_default="never")
def build_report(name: str) -> str:
    """Build a report.

    :param name: Which report.
    """
    raise AssertionError("a call whose outcome is unknown must never run again")


def test_a_third_ctrl_c_quits_at_once_and_the_running_tool_is_recorded_as_unknown(tmp_path: Path):
    db = tmp_path / "cs.db"
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(db)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[3],
    )

    assert child.returncode == INTERRUPTED_EXIT_CODE, child.stderr
    out = " ".join(child.stdout.split())
    assert "A tool that is running finishes first." in out
    assert " ".join(SECOND_CTRL_C.split()) in out
    assert out.index("Press Ctrl-C once more") < out.index(THIRD_CTRL_C)
    assert "the chat returned" not in out

    said = asyncio.run(recovered(db))
    assert "The outcome of build_report is unknown" in said


async def recovered(db: Path) -> str:
    """What the next start's recovery tells the thread, once the dead process's lease has run out."""
    later = datetime.now(UTC) + timedelta(minutes=5)
    engine = await Engine.create(
        Config(db_path=db),
        generator=ScriptedChatGenerator([ChatMessage.from_assistant("The report may or may not exist.")]),
        tools=[build_report],
        clock=lambda: later,
    )
    surface = RecordingSurface()
    engine.register_surface("console", surface)
    try:
        await engine.start(sweep=False)
        await engine.recover()
        await asyncio.wait_for(engine.wait_idle(), 10)
    finally:
        await engine.stop()
    return " ".join(str(call) for call in surface.calls)

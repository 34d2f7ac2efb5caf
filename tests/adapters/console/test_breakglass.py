"""Break-glass in the console dialog: a ``b`` choice for the requester when the tool has it, asking for the reason;
the engine refuses it before the delay (fake clock: the dialog runs on a test engine)."""

from __future__ import annotations

import io

from rich.console import Console

from adapters.console.dialog import ApprovalDialog
from adapters.console.surface import ConsoleSurface
from bot.engine.model import AdminRequest
from tests.fakes.engine_kit import ADMIN, CHANNEL, PLATFORM, REQUESTER, WORKSPACE, asks_for, says


class Keys:
    """A :class:`~adapters.console.reader.Reader` answering from a list, keeping the prompts."""

    def __init__(self, *lines: str) -> None:
        self.lines = list(lines)
        self.prompts: list[str] = []

    async def read(self, prompt: str, *, secret: bool = False) -> str:
        self.prompts.append(prompt)
        return self.lines.pop(0)


async def paused(harnesses, glass: bool = True):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.log"), says("done")])
    await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, "approvers delete_file <@U_ONCALL>"))
    if glass:
        command = "policy set delete_file always breakglass after 5m"
        await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, command))
    [view] = await h.paused_approvals("delete a.log")
    buffer = io.StringIO()
    surface = ConsoleSurface(Console(file=buffer, width=120, color_system=None), thread=h.thread())
    return h, view, surface, buffer


async def test_b_breaks_glass_with_a_reason_after_the_delay(harnesses):
    h, view, surface, buffer = await paused(harnesses)
    h.clock.advance(minutes=5)
    keys = Keys("b", "", "b", "db is down, OPS-9")

    await ApprovalDialog(h.engine, surface, keys, REQUESTER).decide(view)
    await h.engine.wait_idle()

    assert "[b] break glass" in keys.prompts[0]
    assert keys.prompts[1].startswith("Reason for breaking glass"), "Enter alone cancels: asked again"
    assert h.tools.runs_of("delete_file") == [{"path": "a.log"}]
    assert (await h.engine.get_approval(view.approval_id)).feedback.endswith("db is down, OPS-9")


async def test_before_the_delay_the_engine_refuses_and_nothing_runs(harnesses):
    h, view, surface, buffer = await paused(harnesses)
    h.clock.advance(minutes=2)

    await ApprovalDialog(h.engine, surface, Keys("b", "urgent"), REQUESTER).decide(view)

    assert "wait 3m" in buffer.getvalue()
    assert h.tools.runs_of("delete_file") == [] and (await h.engine.get_approval(view.approval_id)).is_pending


async def test_no_b_without_break_glass(harnesses):
    h, view, surface, buffer = await paused(harnesses, glass=False)
    keys = Keys("b", "n", "")

    await ApprovalDialog(h.engine, surface, keys, REQUESTER).decide(view)

    assert "break glass" not in keys.prompts[0] and "Please answer y" in buffer.getvalue()

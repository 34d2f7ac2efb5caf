"""``ConsoleSurface``: what the person at the terminal sees for answers, approvals and outcomes."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console

from adapters.console.surface import ConsoleSurface, approval_panel, inert
from bot.engine.model import APPROVED, PENDING, REJECTED, ApprovalView, ThreadRef
from bot.redaction import MASK

HERE = ThreadRef("console", "local", "console", "ops")
ELSEWHERE = ThreadRef("console", "local", "console", "night-shift")
CREATED = datetime(2026, 11, 30, 14, 5, tzinfo=UTC)


def view(**changes) -> ApprovalView:
    fields = dict(
        approval_id="apr_1",
        run_id="run_1",
        thread=HERE,
        tool_name="deploy",
        tool_description="Deploy a service to an environment.",
        arguments={"service": "web", "api_key": "sk-live-123456"},
        parameters_schema={"type": "object", "properties": {"service": {"type": "string"}}},
        requester="ana",
        policy_mode="always",
        approvers=(),
        quorum=1,
        four_eyes=False,
        votes=(),
        created_at=CREATED,
        expires_at=CREATED + timedelta(hours=24),
    )
    fields.update(changes)
    return ApprovalView(**fields)


def render(renderable) -> str:
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


@pytest.fixture
def screen() -> tuple[ConsoleSurface, io.StringIO]:
    buffer = io.StringIO()
    return ConsoleSurface(Console(file=buffer, width=120, color_system=None), thread=HERE), buffer


def test_an_approval_panel_shows_tool_arguments_requester_policy_and_expiry():
    shown = render(approval_panel(view(approvers=("bob", "cy"), quorum=2, votes=("bob",), four_eyes=True)))

    assert "Approval needed · deploy" in shown
    assert "Deploy a service to an environment." in shown
    assert "service       web" in shown
    assert "requested by  ana" in shown
    assert "always · approvers: bob, cy · quorum 2 (1 so far) · four-eyes: not the requester" in shown
    assert "expires       2026-12-01 14:05 UTC" in shown
    assert "id apr_1" in shown


def test_secret_arguments_are_masked_in_the_approval_panel():
    shown = render(approval_panel(view()))

    assert "sk-live-123456" not in shown
    assert f"api_key       {MASK} (secret, masked)" in shown


def test_long_argument_values_are_truncated_and_say_so():
    shown = render(approval_panel(view(arguments={"service": "x" * 5000})))

    assert "x" * 5000 not in shown
    assert "(truncated)" in shown and "chars)" in shown


def test_argument_values_cannot_inject_markup_or_control_sequences():
    shown = render(approval_panel(view(arguments={"service": "[bold]web[/bold]\x1b[2J\r"})))

    assert "[bold]web[/bold]" in shown
    assert "\x1b" not in shown and "\r" not in shown


async def test_a_reply_keeps_single_line_breaks_and_literal_markup(screen):
    surface, buffer = screen
    await surface.post_reply(HERE, "Files:\nnotes.txt\nold.log [red]x[/red]")

    lines = [line.rstrip() for line in buffer.getvalue().splitlines()]
    assert lines[:4] == ["countersign ›", "Files:", "notes.txt", "old.log [red]x[/red]"]


async def test_rendered_approvals_are_queued_once_for_the_chat_loop(screen):
    surface, buffer = screen
    ref = await surface.render_approvals(HERE, [view(approval_id="a"), view(approval_id="b")])

    assert ref["surface"] == "console"
    assert "Approval 1 of 2 · deploy" in buffer.getvalue() and "Approval 2 of 2 · deploy" in buffer.getvalue()
    assert [v.approval_id for v in surface.take_rendered()] == ["a", "b"]
    assert surface.take_rendered() == []


async def test_approvals_of_another_thread_are_announced_but_not_queued(screen):
    surface, buffer = screen
    await surface.render_approvals(ELSEWHERE, [view(thread=ELSEWHERE)])

    assert "Approvals are waiting (thread night-shift)." in buffer.getvalue()
    assert surface.take_rendered() == []


async def test_each_outcome_is_printed_once(screen):
    surface, buffer = screen
    decided = CREATED + timedelta(minutes=1)
    approved = view(approval_id="a", status=APPROVED, decided_by="ana", decided_at=decided)
    waiting = view(approval_id="b", status=PENDING)
    await surface.update_approvals(HERE, {}, [approved, waiting])
    rejected = view(approval_id="b", status=REJECTED, decided_by="bob", decided_at=decided, feedback="not now")
    await surface.update_approvals(HERE, {}, [approved, rejected])

    output = buffer.getvalue()
    call = f'deploy(service="web", api_key={MASK})'
    assert output.count(f"✔ {call} (1 of 2): Approved by ana at 2026-11-30 14:06 UTC.") == 1
    assert output.count(f"✘ {call} (2 of 2): Rejected by bob at 2026-11-30 14:06 UTC. Feedback: not now") == 1


async def test_each_outcome_line_names_its_call_by_arguments_and_position(screen):
    surface, buffer = screen
    decided = CREATED + timedelta(minutes=1)
    decided_by_alice = {"status": APPROVED, "decided_by": "alice", "decided_at": decided, "tool_name": "delete_file"}
    first, second, same = (
        view(approval_id=i, arguments=a, **decided_by_alice)
        for i, a in (("a", {"path": "old.log"}), ("b", {"path": "notes.txt"}), ("c", {"path": "old.log"}))
    )

    await surface.update_approvals(HERE, {}, [first, second, same])

    lines = [line for line in buffer.getvalue().splitlines() if line.startswith("✔")]
    assert lines == [
        '✔ delete_file(path="old.log") (1 of 3): Approved by alice at 2026-11-30 14:06 UTC.',
        '✔ delete_file(path="notes.txt") (2 of 3): Approved by alice at 2026-11-30 14:06 UTC.',
        '✔ delete_file(path="old.log") (3 of 3): Approved by alice at 2026-11-30 14:06 UTC.',
    ]


async def test_a_lone_call_is_named_without_a_position_and_long_or_secret_values_are_shortened(screen):
    surface, buffer = screen
    decided = CREATED + timedelta(minutes=1)
    arguments = {"command": "deploy --token=abc123 " + "x" * 200, "api_key": "sk-live-123456"}
    await surface.update_approvals(
        HERE, {}, [view(status=APPROVED, decided_by="ana", decided_at=decided, arguments=arguments)]
    )

    [line] = [line for line in buffer.getvalue().splitlines() if line.startswith("✔")]
    assert line.startswith('✔ deploy(command="deploy --token=' + MASK)
    assert "(+" in line and f"api_key={MASK}): Approved by ana" in line
    assert "abc123" not in line and "sk-live-123456" not in line and "of 1" not in line


async def test_replies_for_another_thread_are_labelled(screen):
    surface, buffer = screen
    await surface.post_reply(ELSEWHERE, "I was restarted while working on this, so I stopped.")

    assert "countersign › (thread night-shift)" in buffer.getvalue()


def test_inert_removes_control_characters_but_keeps_tabs_and_newlines():
    assert inert("a\tb\nc\x1b[31md\x07\x9b") == "a\tb\nc[31md"

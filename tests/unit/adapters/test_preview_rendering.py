"""A call's preview on each surface (issue 30): shown masked and cut, a re-ask with both previews, cards valid."""

from __future__ import annotations

import json

from adapters.console.surface import approval_panel
from adapters.slack.blocks import approval_message
from adapters.teams.cards import approval_card
from bot.engine.previewing import stored_preview
from bot.hitl.previews import CHANGED_SINCE_APPROVED, Preview, preview_digest
from tests.fakes.slack_stack import all_text, assert_valid_message_blocks
from tests.fakes.teams_stack import assert_valid_card, texts_of
from tests.unit.adapters.console.test_surface import render
from tests.unit.adapters.console.test_surface import view as console_view
from tests.unit.adapters.slack.test_rendering import HOSTILE
from tests.unit.adapters.slack.test_rendering import approval as slack_view
from tests.unit.adapters.teams.test_cards import view as teams_view


def ok(text: str) -> Preview:
    return Preview("ok", text, preview_digest(text))


PLAN = stored_preview(ok("3 pods will restart\napi_key=sk-live-abcdefghijklmnop1234 [bold]x[/bold]"))
REASK = stored_preview(ok("7 pods will restart"), approved=ok("3 pods will restart"), reason="The preview changed.")
LONG = stored_preview(ok("+ line\n" * 2000))


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_console_shows_the_preview_masked_and_markup_literal():
    shown = render(approval_panel(console_view(preview=PLAN)))

    assert "preview" in shown and "3 pods will restart" in shown
    assert "sk-live-abcdefghijklmnop1234" not in shown, "secrets masked as in results"
    assert "[bold]x[/bold]" in shown


def test_the_console_shows_a_re_ask_with_both_previews():
    shown = flat(render(approval_panel(console_view(preview=REASK))))

    assert CHANGED_SINCE_APPROVED in shown
    assert "approved preview" in shown and "3 pods will restart" in shown
    assert "preview now" in shown and "7 pods will restart" in shown


def test_the_console_cuts_a_long_preview():
    shown = render(approval_panel(console_view(preview=LONG)))
    assert "chars)" in shown and shown.count("+ line") < 300, "cut to 2000 characters of 14000"


def test_slack_shows_the_preview_and_a_re_ask_on_valid_blocks():
    for preview in (PLAN, REASK, LONG):
        message = approval_message([slack_view(preview=preview)])
        assert_valid_message_blocks(message.blocks)
    plain = all_text(approval_message([slack_view(preview=PLAN)]).blocks)
    assert "Preview" in plain and "3 pods will restart" in plain and "sk-live-abcdefghijklmnop1234" not in plain
    again = all_text(approval_message([slack_view(preview=REASK)]).blocks)
    assert CHANGED_SINCE_APPROVED.capitalize() in again and "7 pods will restart" in again
    assert "<!channel>" not in json.dumps(approval_message([slack_view(preview=stored_preview(ok(HOSTILE)))]).blocks)


def test_teams_shows_the_preview_and_a_re_ask_on_a_valid_card():
    for preview in (PLAN, REASK, LONG):
        assert_valid_card(approval_card([teams_view(preview=preview)]))
    texts = texts_of(approval_card([teams_view(preview=REASK)]))
    assert any(CHANGED_SINCE_APPROVED in t.lower() for t in texts)
    assert "7 pods will restart" in texts and "3 pods will restart" in texts
    assert not any("sk-live-abcdefghijklmnop1234" in t for t in texts_of(approval_card([teams_view(preview=PLAN)])))


def test_no_preview_nothing_shown():
    assert "preview" not in render(approval_panel(console_view())).lower()
    assert "Preview" not in all_text(approval_message([slack_view()]).blocks)

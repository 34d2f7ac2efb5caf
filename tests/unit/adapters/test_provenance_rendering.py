"""A tainted argument's line on each surface: hostile excerpts stay inert, secrets masked, cards valid."""

from __future__ import annotations

import json

from adapters.console.surface import approval_panel
from adapters.slack.blocks import approval_message
from adapters.teams.cards import approval_card
from tests.fakes.slack_stack import all_text, assert_valid_message_blocks
from tests.fakes.teams_stack import assert_valid_card, texts_of
from tests.unit.adapters.console.test_surface import render
from tests.unit.adapters.console.test_surface import view as console_view
from tests.unit.adapters.slack.test_rendering import HOSTILE
from tests.unit.adapters.slack.test_rendering import approval as slack_view
from tests.unit.adapters.teams.test_cards import view as teams_view

PROVENANCE = {
    "tainted": [{"path": "service", "excerpt": HOSTILE + " [bold]x[/bold]\x1b[2J", "tool": "fetch_url", "step": 2}],
    "escalated": True,
}


def test_slack_escapes_the_excerpt():
    message = approval_message([slack_view(provenance=PROVENANCE)])

    assert_valid_message_blocks(message.blocks)
    shown = all_text(message.blocks)
    assert "service is from the output of `fetch_url` (step 2)" in shown and "Asked because" in shown
    text = json.dumps(message.blocks)
    assert "<!channel>" not in text and "<@U123>" not in text and "&lt;!channel&gt;" in text


def test_teams_shows_the_line_as_plain_text_on_a_valid_card():
    card = approval_card([teams_view(provenance=PROVENANCE)])

    assert_valid_card(card)
    assert any(t.startswith("⚠ service is from the output of `fetch_url` (step 2)") for t in texts_of(card))


def test_the_console_panel_keeps_markup_literal_and_drops_control_sequences():
    shown = render(approval_panel(console_view(provenance=PROVENANCE)))

    assert "from the output of `fetch_url` (step 2)" in " ".join(shown.split())
    assert "[bold]x[/bold]" in shown and "\x1b" not in shown


def test_no_provenance_no_line():
    assert "untrusted" not in all_text(approval_message([slack_view()]).blocks)
    assert not any("is from" in t for t in texts_of(approval_card([teams_view()])))

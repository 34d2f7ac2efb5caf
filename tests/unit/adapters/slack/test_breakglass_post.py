"""A post with no thread (the break-glass channel's) goes to the top level of the Slack channel."""

from __future__ import annotations

from adapters.slack.surface import thread_ts
from bot.engine.model import ThreadRef


def test_a_post_to_the_breakglass_channel_is_top_level_on_slack():
    assert thread_ts(ThreadRef("slack", "T1", "C_BREAKGLASS", "")) is None
    assert thread_ts(ThreadRef("slack", "T1", "C1", "1700000000.000100")) == "1700000000.000100"

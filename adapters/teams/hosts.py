"""What the host of one conversation can do: user-specific views, streaming, typing.

The same bot is reached from real Teams (``channelId`` ``msteams``), from the Microsoft 365 Agents
Playground (``emulator``, ``webchat``, ``directline``), from Outlook and from Copilot. They differ:

* **User-specific views** (``refresh.userIds``): only Teams asks the bot for each listed person's own
  card. The Playground logs "User specific view is not supported yet" and never asks, so a card that
  relies on them shows nobody any button. ``COUNTERSIGN_TEAMS_USER_VIEWS`` decides: ``auto`` (the
  default) uses them only where ``channelId`` is ``msteams`` and the conversation is a personal chat,
  a group chat or a channel; ``on`` everywhere; ``off`` nowhere. Without them the buttons are on the
  shared card. Clicks are checked on the server either way.
* **Streaming**: Teams streams only in personal chats (elsewhere the connector answers 405), so only
  a personal chat (or a conversation of no stated type, as in webchat) gets a stream.
* **Typing**: not sent into a channel reply chain. Real Teams shows no bot typing in channels and the
  Playground refuses it there ("Invalid conversation id … at setBotTypingStatus"), which also delays
  the card and answer that follow.

Each decision reads the stored conversation record (``conversation_record``: the SDK's
``ConversationReference`` dumped by alias).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TEAMS_CHANNEL_ID = "msteams"
USER_VIEW_CONVERSATION_TYPES = frozenset({"personal", "groupChat", "channel"})
"""Teams conversation types in which Teams refreshes cards for ``refresh.userIds``."""


def _reference(record: Mapping[str, Any] | None) -> Mapping[str, Any]:
    reference = (record or {}).get("conversation_reference")
    return reference if isinstance(reference, Mapping) else {}


def channel_id(record: Mapping[str, Any] | None) -> str | None:
    """The ``channelId`` of the stored conversation (``msteams``, ``emulator``, …), if known."""
    value = _reference(record).get("channelId")
    return value if isinstance(value, str) and value else None


def conversation_type(record: Mapping[str, Any] | None) -> str | None:
    """The stored conversation's type (``personal``, ``groupChat``, ``channel``), if stated."""
    conversation = _reference(record).get("conversation")
    value = conversation.get("conversationType") if isinstance(conversation, Mapping) else None
    return value if isinstance(value, str) and value else None


def _conversation_id(record: Mapping[str, Any] | None) -> str:
    conversation = _reference(record).get("conversation")
    value = conversation.get("id") if isinstance(conversation, Mapping) else None
    return value if isinstance(value, str) else ""


def uses_user_views(mode: str, record: Mapping[str, Any] | None) -> bool:
    """Whether approval cards in this conversation rely on user-specific views (see the module docstring)."""
    if mode == "on":
        return True
    if mode == "off":
        return False
    return channel_id(record) == TEAMS_CHANNEL_ID and conversation_type(record) in USER_VIEW_CONVERSATION_TYPES


def may_stream(record: Mapping[str, Any] | None) -> bool:
    """Whether an answer may stream here: a personal chat, or a host that states no conversation type."""
    return conversation_type(record) in (None, "personal") and not is_reply_chain(record)


def is_reply_chain(record: Mapping[str, Any] | None) -> bool:
    """Whether the conversation is a channel (or a channel's reply chain, ``…;messageid=…``)."""
    return conversation_type(record) == "channel" or ";messageid=" in _conversation_id(record)


def may_type(record: Mapping[str, Any] | None) -> bool:
    """Whether a typing indicator may be sent here: anywhere but a channel's reply chain."""
    return not is_reply_chain(record)

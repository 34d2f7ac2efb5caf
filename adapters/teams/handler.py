"""Translation of Teams activities into the engine's terms: threads, people, messages, card clicks.

Pure functions over :class:`microsoft_agents.activity.Activity`; no I/O, no rules.

* A person is identified by ``from.id`` (the ``29:…`` id Teams gives each user for this bot). Mention
  entities carry the same ids, so ``approvers <tool> @Ana`` names the same person who clicks.
* A thread is the conversation: a personal chat, a group chat, or one reply chain of a channel
  (Teams puts ``;messageid=<root>`` into the conversation id of a channel reply chain).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from microsoft_agents.activity import Activity
from pydantic import ValidationError

from adapters.teams.cards import VERB_STOP, VERBS
from adapters.teams.questions import QUESTION_VERBS
from bot.engine.model import AdminRequest, Inbound, ThreadRef

PLATFORM = "teams"
_AT_TAG = re.compile(r"<at>(.*?)</at>", re.IGNORECASE | re.DOTALL)
_CHANNEL_ID_PREFIX = "19:"


class MalformedActivity(ValueError):
    """A request body that is not a Bot Framework activity; the message names fields, never their values."""


def parse_activity(body: Any) -> Activity:
    """The activity in a request body, or :class:`MalformedActivity` saying what is wrong with it.

    The SDK's own checks (valid fields, a type, a conversation id) made up front, so that a garbled
    body gets a 400 instead of the SDK's unhandled exception; plus a sender and a recipient, which Teams
    always sends: without a sender nobody could be answered, checked as an approver or named as the
    requester of a call; without a recipient or an http(s) service URL no reply can be addressed.
    """
    if not isinstance(body, Mapping):
        raise MalformedActivity("the body is not a JSON object")
    try:
        activity = Activity.model_validate(body)
    except ValidationError as exc:
        fields = sorted({".".join(str(part) for part in error["loc"]) or "body" for error in exc.errors()})
        raise MalformedActivity("invalid or wrongly typed field(s): " + ", ".join(fields)) from None
    except Exception as exc:  # noqa: BLE001 - the SDK's validator raises bare Exceptions for some conflicts
        raise MalformedActivity(f"the activity is inconsistent ({type(exc).__name__})") from None
    if not activity.type or not activity.conversation or not activity.conversation.id:
        raise MalformedActivity("the activity has no type or no conversation id")
    if not activity.from_property or not activity.from_property.id:
        raise MalformedActivity("the activity has no sender (from.id)")
    if not activity.recipient:
        raise MalformedActivity("the activity has no recipient")
    try:
        service = urlsplit(activity.service_url or "")
    except ValueError:  # e.g. an unclosed IPv6 bracket
        raise MalformedActivity("the activity's serviceUrl is not a URL") from None
    if service.scheme not in ("http", "https") or not service.hostname:
        raise MalformedActivity("the activity has no http(s) serviceUrl to answer to")
    return activity


@dataclass(frozen=True)
class CardAction:
    """One ``Action.Execute`` click: which approval, which verb, and every value Teams sent (inputs merged)."""

    approval_id: str
    verb: str
    data: Mapping[str, Any]


def actor_of(activity: Activity) -> str:
    """The id of the person who sent ``activity``."""
    sender = activity.from_property
    return sender.id if sender and sender.id else ""


def actor_name_of(activity: Activity) -> str | None:
    """The display name of the sender, when Teams sends one."""
    sender = activity.from_property
    return sender.name if sender and sender.name else None


def place_name_of(activity: Activity) -> str | None:
    """The channel's or chat's name when the activity carries one (``channelData.channel.name``, the
    conversation's ``name``), for answers that name the place."""
    data = activity.channel_data if isinstance(activity.channel_data, dict) else {}
    channel = data.get("channel")
    name = (channel.get("name") if isinstance(channel, dict) else None) or (
        activity.conversation.name if activity.conversation else None
    )
    return name if isinstance(name, str) and name.strip() else None


def tenant_of(activity: Activity) -> str:
    """The Microsoft 365 tenant of the conversation (the engine's workspace)."""
    if activity.conversation and activity.conversation.tenant_id:
        return activity.conversation.tenant_id
    data = activity.channel_data if isinstance(activity.channel_data, dict) else {}
    tenant = data.get("tenant") or {}
    return str(tenant.get("id") or "default")


def thread_of(activity: Activity) -> ThreadRef:
    """The thread ``activity`` belongs to: channel = the conversation without its reply-chain suffix."""
    conversation_id = activity.conversation.id if activity.conversation else ""
    return ThreadRef(PLATFORM, tenant_of(activity), conversation_id.split(";", 1)[0], conversation_id)


def is_personal(activity: Activity) -> bool:
    """Whether ``activity`` comes from a one-to-one chat with the bot."""
    conversation = activity.conversation
    return bool(conversation and conversation.conversation_type == "personal")


def personal_key(tenant: str, user: str) -> str:
    """Where the personal chat of one person is stored (to tell them things privately)."""
    return f"{PLATFORM}:personal:{tenant}:{user}"


def is_from_bot_itself(activity: Activity) -> bool:
    """Whether the bot sent ``activity`` (Teams can echo the bot's own messages)."""
    sender, recipient = activity.from_property, activity.recipient
    return bool(sender and recipient and sender.id and sender.id == recipient.id)


def _mention_ids(activity: Activity) -> dict[str, str]:
    """Mention text (``<at>Ana</at>``) → the mentioned id, for everyone but the bot itself."""
    bot_id = activity.recipient.id if activity.recipient else None
    found = {}
    for mention in activity.get_mentions():
        mentioned = mention.mentioned
        if mention.text and mentioned and mentioned.id and mentioned.id != bot_id:
            found[mention.text] = mentioned.id
    return found


def mentioned_people(activity: Activity) -> dict[str, str]:
    """Id → display name of everyone ``activity`` mentions except the bot (to show approvers by name)."""
    bot_id = activity.recipient.id if activity.recipient else None
    return {
        m.mentioned.id: m.mentioned.name
        for m in activity.get_mentions()
        if m.mentioned and m.mentioned.id and m.mentioned.name and m.mentioned.id != bot_id
    }


def _without_bot_mention(activity: Activity) -> str:
    """``activity.text`` without the bot's own ``<at>…</at>`` (left untouched: the SDK's helper mutates)."""
    text = activity.text or ""
    bot_id = activity.recipient.id if activity.recipient else None
    for mention in activity.get_mentions():
        if not bot_id or not mention.mentioned or mention.mentioned.id != bot_id:
            continue
        pattern = re.escape(mention.text) if mention.text else f"<at>{re.escape(mention.mentioned.name or '')}</at>"
        text = re.sub(pattern, "", text, flags=re.IGNORECASE)
    return text.strip()


def mentions_bot(activity: Activity) -> bool:
    """Whether ``activity`` @mentions the bot itself."""
    bot_id = activity.recipient.id if activity.recipient else None
    return bool(bot_id) and any(m.mentioned and m.mentioned.id == bot_id for m in activity.get_mentions())


def message_text(activity: Activity) -> str:
    """The text a person wrote, without the bot's @mention; other mentions become ``@Name``."""
    text = _without_bot_mention(activity)
    return _AT_TAG.sub(lambda m: "@" + m.group(1).strip(), text).strip()


def admin_text(activity: Activity) -> str:
    """The text of an admin command: mentions become ids (``@29:…`` people, ``#19:…`` channels)."""
    text = _without_bot_mention(activity)
    for mention_text, mentioned_id in _mention_ids(activity).items():
        sigil = "#" if mentioned_id.startswith(_CHANNEL_ID_PREFIX) else "@"
        text = text.replace(mention_text, sigil + mentioned_id)
    return _AT_TAG.sub(lambda m: m.group(1).strip(), text).strip()


def inbound_from(activity: Activity, text: str) -> Inbound:
    """The engine's view of a message to the bot."""
    thread = thread_of(activity)
    return Inbound(
        platform=PLATFORM,
        workspace=thread.workspace,
        channel=thread.channel,
        thread=thread.thread,
        user=actor_of(activity),
        text=text,
        event_id=activity.id or "",
        message_id=activity.id,
        user_name=actor_name_of(activity),
        is_direct=is_personal(activity),
        mentioned=mentions_bot(activity),
    )


def admin_request(activity: Activity) -> AdminRequest:
    """An admin command typed to the bot."""
    thread = thread_of(activity)
    return AdminRequest(
        platform=PLATFORM,
        workspace=thread.workspace,
        channel=thread.channel,
        actor=actor_of(activity),
        text=admin_text(activity),
        private=is_personal(activity),
    )


def _execute(value: Any) -> tuple[Any, Mapping[str, Any]] | None:
    """The verb and data of an ``Action.Execute`` inside an ``adaptiveCard/action`` invoke value, else ``None``."""
    if not isinstance(value, Mapping):
        return None
    action = value.get("action")
    if not isinstance(action, Mapping) or action.get("type") != "Action.Execute":
        return None
    data = action.get("data")
    data = data if isinstance(data, Mapping) else {}
    return action.get("verb") or data.get("verb"), data


def stop_click(value: Any) -> str | None:
    """The run id of a Stop click inside an ``adaptiveCard/action`` invoke value, else ``None``."""
    execute = _execute(value)
    run_id = execute[1].get("run_id") if execute else None
    if execute is None or execute[0] != VERB_STOP or not isinstance(run_id, str) or not run_id:
        return None
    return run_id[:200]


def card_action(value: Any) -> CardAction | None:
    """The click inside an ``adaptiveCard/action`` invoke value, or ``None`` if it is not one of ours."""
    execute = _execute(value)
    if execute is None:
        return None
    verb, data = execute
    approval_id = data.get("approval_id")
    if verb not in VERBS or not isinstance(approval_id, str) or not approval_id:
        return None
    return CardAction(approval_id=approval_id, verb=verb, data=dict(data))


def question_click(value: Any) -> tuple[str, str, dict[str, Any]] | None:
    """The question id, verb and data of a click on a question's card, else ``None``."""
    execute = _execute(value)
    question_id = execute[1].get("question_id") if execute else None
    if execute is None or execute[0] not in QUESTION_VERBS or not isinstance(question_id, str) or not question_id:
        return None
    return question_id[:200], str(execute[0]), dict(execute[1])

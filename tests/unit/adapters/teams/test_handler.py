"""Translating Teams activities: threads, people, mentions, admin commands and card clicks."""

from __future__ import annotations

from microsoft_agents.activity import Activity

from adapters.teams import handler
from adapters.teams.cards import action_data


def activity(text: str = "", conversation: str = "19:ops@thread.tacv2;messageid=17", kind: str = "channel", **extra):
    body = {
        "type": "message",
        "id": "msg-1",
        "channelId": "msteams",
        "serviceUrl": "https://smba.example/teams/",
        "from": {"id": "29:1ana", "name": "Ana Lopez"},
        "recipient": {"id": "28:bot", "name": "countersign"},
        "conversation": {"id": conversation, "conversationType": kind, "tenantId": "tenant-1"},
        "text": text,
        **extra,
    }
    return Activity.model_validate(body)


def mention(person_id: str, name: str) -> dict:
    return {"type": "mention", "mentioned": {"id": person_id, "name": name}, "text": f"<at>{name}</at>"}


def test_a_channel_reply_chain_is_one_thread_of_its_channel():
    thread = handler.thread_of(activity())
    assert (thread.platform, thread.workspace, thread.channel) == ("teams", "tenant-1", "19:ops@thread.tacv2")
    assert thread.thread == "19:ops@thread.tacv2;messageid=17"


def test_the_tenant_falls_back_to_channel_data():
    message = activity(conversation="a:1chat", kind="personal", channelData={"tenant": {"id": "tenant-2"}})
    message.conversation.tenant_id = None
    assert handler.tenant_of(message) == "tenant-2"
    assert handler.is_personal(message)


def test_the_bots_mention_is_removed_and_other_mentions_become_names():
    message = activity(
        "<at>countersign</at> ask <at>Ben Okafor</at> first",
        entities=[mention("28:bot", "countersign"), mention("29:1ben", "Ben Okafor")],
    )
    assert handler.message_text(message) == "ask @Ben Okafor first"
    assert message.text.startswith("<at>countersign</at>"), "the activity itself is left untouched"


def test_admin_commands_get_ids_for_mentioned_people_and_channels():
    message = activity(
        "<at>countersign</at> approvers delete_file <at>Ben Okafor</at> <at>Ops</at>",
        entities=[mention("28:bot", "countersign"), mention("29:1ben", "Ben Okafor"), mention("19:ops@thread", "Ops")],
    )
    request = handler.admin_request(message)
    assert request.text == "approvers delete_file @29:1ben #19:ops@thread"
    assert (request.platform, request.workspace, request.actor) == ("teams", "tenant-1", "29:1ana")


def test_a_message_becomes_an_inbound_deduped_by_its_activity_id():
    inbound = handler.inbound_from(activity("hi"), "hi")
    assert (inbound.user, inbound.user_name, inbound.event_id, inbound.message_id) == (
        "29:1ana",
        "Ana Lopez",
        "msg-1",
        "msg-1",
    )
    assert inbound.thread_ref == handler.thread_of(activity())


def test_the_bots_own_activities_are_recognised():
    assert handler.is_from_bot_itself(activity(**{"from": {"id": "28:bot"}}))
    assert not handler.is_from_bot_itself(activity())


def test_only_our_card_actions_are_understood():
    ours = {"action": {"type": "Action.Execute", "verb": "reject", "data": {**action_data("ap-1", "reject"), "x": "1"}}}
    click = handler.card_action(ours)
    assert (click.approval_id, click.verb, click.data["x"]) == ("ap-1", "reject", "1")
    assert handler.card_action({"action": {"verb": "launch", "data": {"approval_id": "ap-1"}}}) is None
    assert handler.card_action({"action": {"verb": "approve", "data": {}}}) is None
    assert handler.card_action("approve") is None

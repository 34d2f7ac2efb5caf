"""End to end in Teams: messages, approval cards, clicks, proactive answers, restarts.

Real engine on a SQLite file, the real ``countersign serve`` app with the Teams plugin (the SDK's
``CloudAdapter`` behind its JWT check) on 127.0.0.1; activities are signed by a fake Bot Framework
issuer and the bot talks back to a fake Bot Connector. Every card the bot sends is validated
against the Adaptive Card 1.5 schema.
"""

from __future__ import annotations

import logging

import pytest

from adapters.teams.cards import feedback_input_id, param_input_id
from adapters.teams.surface import TeamsSurface
from bot.engine.memory import person_key
from bot.engine.model import ThreadRef
from tests.fakes.engine_kit import asks, asks_for, call, echoes_results, says
from tests.fakes.mcp_server import configured
from tests.fakes.teams_stack import (
    ADA,
    ANA,
    BEN,
    BOT_ID,
    BOT_NAME,
    CHANNEL,
    CHANNEL_THREAD,
    OUTGOING_TOKEN,
    PERSONAL_CHAT,
    TENANT,
    Person,
    TeamsStack,
    action_value,
    approval_ids,
    assert_valid_card,
    execute_actions,
    texts_of,
)


@pytest.fixture
async def open_stack(tmp_path, fakes):
    opened: list[TeamsStack] = []

    async def make(**kwargs) -> TeamsStack:
        stack = await TeamsStack.open(tmp_path, *fakes, **kwargs)
        opened.append(stack)
        return stack

    yield make
    for stack in opened:
        await stack.aclose()


async def test_approving_on_the_card_runs_the_tool_once_updates_the_card_and_posts_the_answer(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log"), echoes_results])
    assert await stack.say("delete old.log") == 202
    card_request, posted = stack.last_card()
    assert card_request.authorization == f"Bearer {OUTGOING_TOKEN}"
    assert stack.tools.executed == []
    assert approval_ids(posted) == [] and posted["refresh"]["userIds"] == [ADA.id, ANA.id]  # the status for all
    [approval_id] = approval_ids(await stack.view_as(ANA))  # the requester's own view has the buttons

    status, body = await stack.click("approve", ANA, approval_id)

    assert status == 200
    assert body["statusCode"] == 200 and body["type"] == "application/vnd.microsoft.card.adaptive"
    assert any("Approved by" in t for t in texts_of(body["value"]))
    assert approval_ids(body["value"]) == []
    assert stack.tools.executed == [("delete_file", {"path": "old.log"})]
    update = stack.connector.updates()[-1]
    assert update.activity_id == card_request.answered_id
    assert approval_ids(update.cards[0]) == [] and "refresh" not in update.cards[0]
    assert stack.connector.texts()[-1] == "results: deleted old.log"

    # a channel's reply chain gets no typing (Teams shows none there; the Playground refuses it)
    assert "typing" not in [r.activity_type for r in stack.connector.requests]


def verbs(card) -> set[str]:
    """The buttons a card shows (the refresh action is not one)."""
    return {a.get("verb") for a, _ in execute_actions(card)}


async def test_only_the_requester_and_admins_see_the_buttons_and_a_decision_updates_every_view(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log"), echoes_results])
    await stack.say("delete old.log")
    _, posted = stack.last_card()

    bystander, requester, admin = [await stack.view_as(p) for p in (BEN, ANA, ADA)]
    assert verbs(posted) == verbs(bystander) == set() and bystander == posted  # Ben is not listed: the status
    assert "Approval needed" in texts_of(bystander) and "old.log" in texts_of(bystander)
    assert verbs(requester) == {"approve", "reject", "edit"}
    assert verbs(admin) == {"approve", "reject", "edit", "approve_always"}
    assert requester["refresh"] == posted["refresh"]  # Teams keeps refreshing the deciders' views

    status, body = await stack.click("reject", ADA, typed={feedback_input_id(approval_ids(admin)[0]): "keep it"})

    assert status == 200 and verbs(body["value"]) == set()
    [update] = stack.connector.updates()
    assert verbs(update.cards[0]) == set() and "refresh" not in update.cards[0]
    for person in (BEN, ANA, ADA):  # everyone now sees the same decided card, with no buttons
        shown = await stack.view_as(person, update.cards[0])
        assert verbs(shown) == set() and "delete_file: rejected by Ada Admin; not run." in texts_of(shown)
    assert stack.tools.executed == []


async def test_admins_named_by_a_group_are_listed_for_their_own_view_and_may_decide(open_stack):
    replies = [asks_for("delete_file", path="old.log"), echoes_results]
    stack = await open_stack(replies=replies, admins=frozenset({"group:sre"}))
    await stack.engine.storage.approver_groups.set_group("sre", [BEN.id], updated_by="setup")
    await stack.say("delete old.log")
    _, posted = stack.last_card()

    assert posted["refresh"]["userIds"] == [ANA.id, BEN.id]  # the requester and the group's members
    assert verbs(await stack.view_as(ADA)) == set()  # Ada is no admin in this deployment
    status, body = await stack.click("approve", BEN)

    assert status == 200 and "Approved by Ben Okafor" in " ".join(texts_of(body["value"]))
    assert stack.tools.executed == [("delete_file", {"path": "old.log"})]


async def test_rejecting_with_feedback_never_runs_the_tool_and_tells_the_model_why(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="prod.db"), echoes_results])
    await stack.say("delete prod.db")
    [approval_id] = approval_ids(await stack.view_as(ANA))

    status, body = await stack.click(
        "reject", ANA, approval_id, typed={feedback_input_id(approval_id): "that is the production database"}
    )

    assert status == 200
    assert stack.tools.executed == []
    shown = " ".join(texts_of(body["value"]))
    assert "Rejected by Ana Lopez" in shown and "Feedback: that is the production database" in shown
    assert "Rejected by Ana Lopez" in " ".join(texts_of(stack.connector.updates()[-1].cards[0]))
    answer = stack.connector.texts()[-1]
    assert "was rejected by the user" in answer and "that is the production database" in answer


async def test_editing_runs_the_tool_with_the_changed_value_and_keeps_the_untouched_ones(open_stack):
    stack = await open_stack(replies=[asks_for("scale_service", service="web", replicas=3), echoes_results])
    await stack.say("scale web to 3")
    card = await stack.view_as(ANA)
    [approval_id] = approval_ids(card)
    inputs = {i["id"]: i for _, ins in execute_actions(card) for i in ins}
    assert inputs[param_input_id(approval_id, "replicas")]["type"] == "Input.Number"
    assert inputs[param_input_id(approval_id, "replicas")]["value"] == 3
    assert inputs[param_input_id(approval_id, "dry_run")]["type"] == "Input.Toggle"
    assert inputs[param_input_id(approval_id, "zones")]["isMultiline"] is True

    status, body = await stack.click("edit", ANA, approval_id, typed={param_input_id(approval_id, "replicas"): "5"})

    assert status == 200
    assert stack.tools.executed == [
        ("scale_service", {"service": "web", "replicas": 5, "dry_run": False, "zones": None})
    ]
    assert any("Edited and approved by Ana Lopez" in t and "replicas=5" in t for t in texts_of(body["value"]))
    assert stack.connector.texts()[-1] == "results: web scaled to 5"


async def test_an_invalid_edit_shows_the_error_by_the_field_and_decides_nothing(open_stack):
    stack = await open_stack(replies=[asks_for("scale_service", service="web", replicas=3), echoes_results])
    await stack.say("scale web to 3")
    card = await stack.view_as(ANA)
    [approval_id] = approval_ids(card)
    zones = param_input_id(approval_id, "zones")

    status, body = await stack.click("edit", ANA, approval_id, typed={zones: "eu-west-1, not json"})

    assert status == 200
    returned = body["value"]
    assert_valid_card(returned)
    items = [i for section in returned["body"] if section["type"] == "Container" for i in section["items"]]
    position = next(n for n, item in enumerate(items) if item.get("id") == zones)
    assert items[position]["value"] == "eu-west-1, not json"
    assert "zones must be JSON (a list)" in texts_of(items[position + 1])
    assert approval_ids(returned) == [approval_id]
    assert stack.tools.executed == [] and stack.connector.updates() == []
    assert (await stack.engine.get_approval(approval_id)).is_pending

    # The form came back open with the submitted values: fixing the field and saving works.
    await stack.click("edit", ANA, approval_id, typed={zones: '["eu-west-1"]'}, card=returned)
    assert stack.tools.runs_of("scale_service") == [
        {"service": "web", "replicas": 3, "dry_run": False, "zones": ["eu-west-1"]}
    ]


async def test_approve_all_runs_every_call_of_the_step_once(open_stack):
    stack = await open_stack(
        replies=[asks(call("delete_file", path="a.log"), call("delete_file", path="b.log")), echoes_results]
    )
    await stack.say("delete a.log and b.log")
    assert len(approval_ids(await stack.view_as(ANA))) == 2

    status, body = await stack.click("approve_all", ANA)

    assert status == 200 and approval_ids(body["value"]) == []
    assert sorted(args["path"] for args in stack.tools.runs_of("delete_file")) == ["a.log", "b.log"]
    assert approval_ids(stack.connector.updates()[-1].cards[0]) == []
    assert stack.connector.texts()[-1] == "results: deleted a.log | deleted b.log"


async def test_approve_all_partly_refused_says_on_the_card_which_calls_still_wait(open_stack):
    stack = await open_stack(
        replies=[asks(call("delete_file", path="a.log"), call("scale_service", service="web", replicas=3)), says("ok")]
    )
    await stack.engine.storage.policies.set_rule("global", "scale_service", updated_by=ADA.id, approvers=[BEN.id])
    await stack.say("clean up and scale web")

    status, body = await stack.click("approve_all", ANA)

    assert status == 200
    assert "Not approved" in " ".join(texts_of(body["value"]))
    assert len(approval_ids(body["value"])) == 1  # scale_service keeps its buttons for Ben
    assert stack.tools.executed == []  # the step waits for its last decision


async def test_a_retried_invoke_decides_nothing_twice_and_runs_the_tool_once(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log"), echoes_results])
    await stack.say("delete old.log")
    card = await stack.view_as(ANA)

    first = await stack.click("approve", ANA, activity_id="invoke-retried")
    again = await stack.click("approve", ANA, activity_id="invoke-retried", card=card)

    assert first[0] == again[0] == 200
    assert stack.tools.executed == [("delete_file", {"path": "old.log"})]
    retried = texts_of(again[1]["value"])
    assert retried[0] == "Approval decided", "a retry is answered with the card as it stands, no refusal"
    assert approval_ids(again[1]["value"]) == [] and "Approved by Ana Lopez" in " ".join(retried)
    assert len(stack.connector.updates()) == 1
    assert stack.connector.texts() == ["results: deleted old.log"]


async def test_a_second_click_after_the_decision_changes_nothing_and_says_who_decided(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log"), echoes_results])
    await stack.say("delete old.log")
    card = await stack.view_as(ADA)  # the admin's view, with the buttons
    await stack.click("approve", ANA)

    status, body = await stack.click("reject", ADA, card=card)

    assert status == 200
    assert texts_of(body["value"])[0] == "This approval was already approved by Ana Lopez."
    assert stack.tools.executed == [("delete_file", {"path": "old.log"})]
    assert len(stack.connector.updates()) == 1


async def test_someone_who_may_not_decide_is_told_why_and_nothing_changes(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log"), echoes_results])
    await stack.say("delete old.log")
    [approval_id] = approval_ids(await stack.view_as(ANA))
    assert approval_ids(await stack.view_as(BEN)) == []  # a bystander sees the status only

    status, body = await stack.click("approve", BEN, approval_id, card=await stack.full_card())  # forged

    assert status == 200  # only the refusal: not the card, whose outcome this person may not learn
    assert body["type"] == "application/vnd.microsoft.activity.message"
    assert body["value"] == "Only the person who asked and countersign admins can decide this call."
    assert stack.tools.executed == [] and stack.connector.updates() == []
    assert (await stack.engine.get_approval(approval_id)).is_pending


async def test_a_retried_refused_click_shows_a_bystander_the_status_and_never_the_buttons(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log"), echoes_results])
    await stack.say("delete old.log")
    forged = await stack.full_card()

    first = await stack.click("approve", BEN, card=forged, activity_id="invoke-ben")
    again = await stack.click("approve", BEN, card=forged, activity_id="invoke-ben")  # Teams retries it

    assert first[1]["value"] == "Only the person who asked and countersign admins can decide this call."
    assert again[0] == 200 and texts_of(again[1]["value"])[0] == "Approval needed"
    assert verbs(again[1]["value"]) == set()
    assert stack.tools.executed == [] and stack.connector.updates() == []


async def test_a_card_click_from_another_conversation_is_refused_with_a_message_and_nothing_runs(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log"), echoes_results])
    await stack.say("delete old.log")
    card = await stack.view_as(ANA)

    forged = stack.invoke(action_value(card, "approve"), ANA, conversation="19:elsewhere@thread.tacv2")
    status, body = await stack.post(forged)
    await stack.settle()

    assert status == 200 and body["type"] == "application/vnd.microsoft.activity.message"
    assert body["value"].startswith("This approval can't be decided from here")
    assert stack.tools.executed == [] and stack.connector.updates() == []
    assert (await stack.engine.get_approval(approval_ids(card)[0])).is_pending


async def test_a_click_after_a_restart_resumes_the_run_and_the_answer_arrives_proactively(open_stack, tmp_path):
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log")])
    await stack.say("delete old.log")
    card_request, _ = stack.last_card()
    card = await stack.view_as(ANA)

    restarted = await stack.restart(replies=[echoes_results])
    status, body = await restarted.click("approve", ANA, card=card)
    await restarted.aclose()

    assert status == 200 and approval_ids(body["value"]) == []
    assert restarted.tools.executed == [("delete_file", {"path": "old.log"})]
    update = restarted.connector.updates()[-1]
    assert update.activity_id == card_request.answered_id and update.conversation_id == CHANNEL_THREAD
    answer = restarted.connector.posted()[-1]
    assert answer.text == "results: deleted old.log"
    assert answer.conversation_id == CHANNEL_THREAD and answer.authorization == f"Bearer {OUTGOING_TOKEN}"


async def test_a_personal_chat_needs_no_mention_and_gets_its_answer_there(open_stack):
    stack = await open_stack(replies=[says("Hello Ana.")])
    await stack.say("hi", conversation=PERSONAL_CHAT, conversation_type="personal")

    [answer] = stack.connector.posted()
    assert answer.conversation_id == PERSONAL_CHAT and answer.text == "Hello Ana."
    assert stack.generator.calls[0]["messages"][-1].text == "hi"


async def test_the_bot_ignores_its_own_messages(open_stack):
    stack = await open_stack(replies=[says("never sent")])
    own = stack.message("echo", person=Person(BOT_ID, BOT_NAME))

    status, _ = await stack.post(own)
    await stack.settle()

    assert status == 202
    assert stack.connector.requests == [] and stack.generator.calls == []


# --- admin commands ------------------------------------------------------------------------------------


async def test_an_admin_changes_a_policy_by_message_and_the_answer_comes_as_a_literal_text_card(open_stack):
    stack = await open_stack()
    await stack.say("policy set delete_file never", person=ADA)

    [reply] = stack.connector.posted()
    assert "Rule updated" in texts_of(reply.cards[0])[0]
    [rule] = await stack.engine.policy_table("teams", TENANT)
    assert (rule["tool"], rule["mode"]) == ("delete_file", "never")
    assert stack.generator.calls == []


async def test_someone_who_is_not_an_admin_cannot_change_a_policy(open_stack):
    stack = await open_stack()
    await stack.say("policy set delete_file never", person=BEN)

    [reply] = stack.connector.posted()
    assert texts_of(reply.cards[0]) == ["Only countersign admins can change policies."]
    assert await stack.engine.policy_table("teams", TENANT) == []


async def test_mcp_list_for_anyone_and_mcp_reload_for_admins_by_message(open_stack, tmp_path, monkeypatch):
    stack = await open_stack(mcp_servers=configured(tmp_path / "log"))
    monkeypatch.delenv("COUNTERSIGN_MCP_CONFIG", raising=False)
    await stack.say("mcp list", person=BEN)
    await stack.say("mcp reload", person=BEN)

    listing, refusal = stack.connector.posted()
    assert texts_of(listing.cards[0]) == ["MCP servers:\n  t (stdio): ready, 10 tools"]
    assert texts_of(refusal.cards[0]) == ["Only countersign admins can reload the MCP servers."]
    assert stack.engine.mcp is not None and stack.engine.mcp.degraded() == []


async def test_anyone_can_ask_for_help_and_pending_approvals(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log")])
    await stack.say("delete old.log")
    await stack.say("help", person=BEN)
    await stack.say("pending", person=BEN)

    help_card, pending_card = (r.cards[0] for r in stack.connector.posted()[-2:])
    help_texts = texts_of(help_card)
    assert help_texts[0] == "countersign admin commands:" and help_texts[-1] == f"Your Teams user id: {BEN.id}"
    # stacked, not in columns: each command alone, its meaning in the next block (readable at 320 px)
    assert "pending" in help_texts and "approvals waiting for a decision" in help_texts
    assert "delete_file asked by Ana Lopez" in texts_of(pending_card)[0]  # the name, not 29:1ana-requester


async def test_memory_list_in_a_channel_keeps_a_persons_own_memories_for_a_direct_message(open_stack):
    stack = await open_stack()
    await stack.engine.storage.memories.add_memories(
        ["my pager pin is in the vault"], user_id=person_key("teams", TENANT, ANA.id)
    )

    await stack.say("memory list")
    await stack.say("memory list", conversation=PERSONAL_CHAT, conversation_type="personal")

    in_channel, in_private = (texts_of(r.cards[0])[0] for r in stack.connector.posted()[-2:])
    assert "pager pin" not in in_channel
    assert "Your memories: listed only in a direct message with me." in in_channel
    assert "my pager pin is in the vault" in in_private


async def test_approvers_can_be_named_by_mentioning_them(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log"), echoes_results])
    await stack.say(f"approvers delete_file <at>{BEN.name}</at>", person=ADA, mentions=[BEN])
    [rule] = await stack.engine.policy_table("teams", TENANT)
    assert list(rule["approvers"]) == [BEN.id]

    await stack.say("delete old.log")
    _, card = stack.last_card()
    assert "approvers: Ben Okafor" in " ".join(texts_of(card))  # by name, not 29:…
    assert approval_ids(await stack.view_as(ANA)) == []  # the requester is not an approver here
    refused = await stack.click("approve", ANA, card=await stack.full_card())
    approved = await stack.click("approve", BEN)

    assert refused[1]["value"] == "You are not one of the approvers for this tool."
    assert "Approved by Ben Okafor" in " ".join(texts_of(approved[1]["value"]))
    assert stack.tools.executed == [("delete_file", {"path": "old.log"})]


# --- untrusted text ------------------------------------------------------------------------------------


HOSTILE = "<at>Ben Okafor</at> [reset your password](https://evil.example/login) <a href='https://evil.example'>x</a>"


async def test_model_text_can_neither_mention_anyone_nor_forge_a_link(open_stack):
    stack = await open_stack(replies=[says(f"**Done.** {HOSTILE}")])
    await stack.say("hello")

    [answer] = stack.connector.posted()
    assert "entities" not in answer.body
    assert "<at>" not in answer.text and "<a " not in answer.text and "](" not in answer.text
    assert "**Done.**" in answer.text
    assert "reset your password (https://evil.example/login)" in answer.text


async def test_hostile_arguments_and_feedback_stay_plain_text_on_the_card(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path=HOSTILE), echoes_results])
    await stack.say("delete that")
    [approval_id] = approval_ids(await stack.view_as(ANA))
    await stack.click("reject", ANA, approval_id, typed={feedback_input_id(approval_id): HOSTILE})

    for sent in stack.connector.all_cards():
        assert "msteams" not in sent
        assert not any(HOSTILE in block for block in markdown_texts(sent))
    assert any(HOSTILE in run for run in texts_of(stack.connector.updates()[-1].cards[0]))


def markdown_texts(card) -> list[str]:
    """Texts Adaptive Cards render as Markdown (TextBlocks and Fact values), unlike TextRuns."""
    found = []

    def visit(node) -> None:
        if isinstance(node, list):
            for item in node:
                visit(item)
        elif isinstance(node, dict):
            if node.get("type") == "TextBlock":
                found.append(node.get("text", ""))
            if node.get("type") == "FactSet":
                found.extend(f"{f['title']} {f['value']}" for f in node.get("facts", []))
            for value in node.values():
                visit(value)

    visit(card)
    return found


# --- anonymous mode ------------------------------------------------------------------------------------


async def test_explicit_anonymous_mode_works_without_tokens_and_sends_none(open_stack, caplog):
    with caplog.at_level(logging.WARNING, logger="adapters.teams.plugin"):
        stack = await open_stack(replies=[asks_for("delete_file", path="old.log"), echoes_results], anonymous=True)
    assert any("ANONYMOUS MODE" in r.getMessage() for r in caplog.records)

    status, _ = await stack.post(stack.message("delete old.log"), token=None)
    await stack.settle()
    request, _ = stack.last_card()
    value = action_value(await stack.view_as(ANA, token=None), "approve")
    status_click, _ = await stack.post(stack.invoke(value, card_activity_id=request.answered_id), token=None)
    await stack.settle()

    assert status == 202 and status_click == 200
    assert stack.tools.executed == [("delete_file", {"path": "old.log"})]
    assert {r.authorization for r in stack.connector.requests} == {None}


# --- stale clicks --------------------------------------------------------------------------------------


async def test_a_click_on_a_superseded_card_changes_nothing_and_says_so(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log"), says("Okay, I won't.")])
    await stack.say("delete old.log")
    card = await stack.view_as(ANA)
    await stack.say("never mind")

    status, body = await stack.click("approve", ANA, card=card)

    assert status == 200
    assert texts_of(body["value"])[0] == "This approval was superseded; the call was not run."
    assert "Superseded by a newer message; the call was not run." in texts_of(stack.connector.updates()[-1].cards[0])
    assert stack.tools.executed == []


async def test_a_click_after_expiry_changes_nothing_and_the_card_already_says_it_expired(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log"), echoes_results])
    await stack.say("delete old.log")
    card = await stack.view_as(ANA)
    stack.clock.advance(days=2)
    assert await stack.engine.sweep_expired() == 1
    await stack.settle()
    assert any(t.startswith("Expired without a decision") for t in texts_of(stack.connector.updates()[-1].cards[0]))
    assert approval_ids(await stack.view_as(ANA)) == []

    status, body = await stack.click("approve", ANA, card=card)  # on the card as it was before

    assert status == 200
    assert texts_of(body["value"])[0] == "This approval expired without a decision; the call was not run."
    assert stack.tools.executed == []


# --- the surface's other outputs -----------------------------------------------------------------------


async def test_telling_someone_privately_uses_their_personal_chat_when_there_is_one(open_stack):
    stack = await open_stack(replies=[says("Hi."), says("Hi again.")])
    await stack.say("hello")
    channel = thread_of_last_answer(stack)
    surface = stack.plugin.surface

    await surface.tell_user(channel, ANA.id, "Only <at>you</at> should see [this](https://evil.example).")
    in_thread = stack.connector.posted()[-1]
    await stack.say("hi", conversation=PERSONAL_CHAT, conversation_type="personal")
    await surface.tell_user(channel, ANA.id, "Psst.")
    privately = stack.connector.posted()[-1]

    assert in_thread.conversation_id == CHANNEL_THREAD and "entities" not in in_thread.body
    assert "<at>" not in in_thread.text and "](" not in in_thread.text
    assert privately.conversation_id == PERSONAL_CHAT and privately.text == "Psst."


async def test_the_typing_indicator_repeats_until_the_bot_stops_working(open_stack):
    stack = await open_stack(replies=[says("Hi."), says("Hi again.")])
    await stack.say("hello", conversation=PERSONAL_CHAT, conversation_type="personal")
    thread = ThreadRef("teams", TENANT, PERSONAL_CHAT, PERSONAL_CHAT)  # typing runs in chats, not channel threads
    surface = TeamsSurface(stack.plugin.adapter, stack.engine, typing_interval=0.01)
    before = len(stack.connector.typing())

    await surface.show_working(thread, True)
    await stack.connector.wait_for(lambda r: r.activity_type == "typing", count=before + 3)
    assert surface.working_in == [thread.key]  # the SDK's TypingIndicator runs in a turn held open
    await surface.show_working(thread, False)

    assert surface.working_in == []
    await stack.say("hello again")  # in the channel
    channel_thread = ThreadRef("teams", TENANT, CHANNEL, CHANNEL_THREAD)
    assert await stack.engine.load_conversation(channel_thread.key) is not None
    sent = len(stack.connector.typing())
    await surface.show_working(channel_thread, True)  # a channel's reply chain: no typing at all
    assert surface.working_in == [] and len(stack.connector.typing()) == sent


def thread_of_last_answer(stack: TeamsStack) -> ThreadRef:
    return ThreadRef("teams", TENANT, CHANNEL, stack.connector.posted()[-1].conversation_id)


async def test_with_a_quorum_each_click_counts_and_the_tool_runs_when_enough_approved(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log"), echoes_results])
    await stack.say("quorum delete_file 2", person=ADA)
    await stack.say("delete old.log")

    first = await stack.click("approve", ANA)
    edit = await stack.click("edit", ADA, typed={param_input_id(approval_ids(first[1]["value"])[0], "path"): "x.log"})
    second = await stack.click("approve", ADA)

    assert "(1/2 approvals)" in " ".join(texts_of(first[1]["value"]))
    assert texts_of(edit[1]["value"])[0].startswith("Nothing was decided: this call needs several approvals")
    assert "Approved by Ada Admin" in " ".join(texts_of(second[1]["value"]))
    assert stack.tools.executed == [("delete_file", {"path": "old.log"})]


# --- decided cards keep the call ------------------------------------------------------------------------


def argument_line(card, name: str) -> list[str]:
    """The texts of the argument line ``name: …`` of a card (the name first)."""
    for block in rich_text_blocks(card):
        inlines = block.get("inlines") or []
        if inlines and inlines[0].get("text") == f"{name}: ":
            return [i["text"] for i in inlines]
    raise AssertionError(f"no argument line for {name!r}")


def rich_text_blocks(node):
    if isinstance(node, list):
        for item in node:
            yield from rich_text_blocks(item)
    elif isinstance(node, dict):
        if node.get("type") == "RichTextBlock":
            yield node
        for value in node.values():
            yield from rich_text_blocks(value)


async def test_after_an_edit_every_card_keeps_the_call_as_it_ran_with_the_change_marked(open_stack):
    stack = await open_stack(replies=[asks_for("scale_service", service="web", replicas=3), echoes_results])
    await stack.say("scale web to 3")
    card_request, _ = stack.last_card()
    [approval_id] = approval_ids(await stack.view_as(ANA))
    card = await stack.view_as(ADA)

    _, answered = await stack.click("edit", ANA, approval_id, typed={param_input_id(approval_id, "replicas"): "5"})
    assert stack.connector.texts()[-1] == "results: web scaled to 5", "the run has finished"
    _, later = await stack.click("approve", ADA, card=card)  # an approver's click on the old card, after the run
    update = stack.connector.updates()[-1]

    assert update.activity_id == card_request.answered_id
    for shown in (answered["value"], update.cards[0], later["value"]):
        texts = texts_of(shown)
        assert "scale_service" in texts and "Scale a service." in texts
        assert "scale_service: edited and approved by Ana Lopez." in texts
        assert argument_line(shown, "replicas") == ["replicas: ", "5", "  (edited; was 3)"]
        assert argument_line(shown, "service") == ["service: ", "web"]
        assert any(t.startswith("Edited and approved by Ana Lopez at ") and "replicas=5" in t for t in texts)
        assert approval_ids(shown) == []
    assert texts_of(later["value"])[0] == "This approval was already modified by Ana Lopez."


async def test_after_a_rejection_the_card_keeps_the_call_who_rejected_it_and_why(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="prod.db"), echoes_results])
    await stack.say("delete prod.db")
    [approval_id] = approval_ids(await stack.view_as(ANA))

    await stack.click("reject", ANA, approval_id, typed={feedback_input_id(approval_id): "production!"})

    texts = texts_of(stack.connector.updates()[-1].cards[0])
    assert "delete_file: rejected by Ana Lopez; not run." in texts
    assert "Arguments (the call was not run):" in texts
    assert any(t.startswith("Rejected by Ana Lopez at ") and t.endswith("Feedback: production!") for t in texts)

"""Memory in the engine: remember (own: no question; channel: asked first), recall across threads, commands."""

from __future__ import annotations

import pytest

from bot.engine.model import AdminRequest, DecisionRequest
from tests.fakes.engine_kit import (
    ADMIN,
    CHANNEL,
    OTHER,
    PLATFORM,
    REQUESTER,
    WORKSPACE,
    asks_for,
    recalls,
    says,
    sent_to_llm,
)


async def command(h, text: str, actor: str = REQUESTER, channel: str = CHANNEL) -> str:
    return await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, channel, actor, text))


async def test_a_fact_remembered_in_one_thread_answers_in_another_of_the_same_channel(harnesses):
    h = await harnesses.open(
        replies=[
            asks_for("remember", fact="checkout deploys need two approvers", for_channel=True),
            says("Noted."),
            recalls,
        ]
    )
    [approval] = await h.paused_approvals("remember for the channel: checkout deploys need two approvers")
    assert approval.tool_name == "remember"  # a channel's shared memory is asked about first
    await h.engine.decide(DecisionRequest(approval.approval_id, REQUESTER, "confirm", place=approval.thread.place))
    await h.engine.wait_idle()

    other_thread = "1700000099.000100"
    await h.say("how many approvers do checkout deploys need?", thread=other_thread, user=OTHER)

    [answer] = h.surface.replies_in(h.thread(other_thread))
    assert answer.startswith("- checkout deploys need two approvers")
    assert answer.endswith("(from channel memory: checkout deploys need two approvers)")
    memory_message = sent_to_llm(h.generator)[1]
    assert memory_message.text == "Relevant memories:\n- checkout deploys need two approvers"
    # The memory message is never part of the thread's history.
    assert all(not (m.text or "").startswith("Relevant memories:") for m in await h.history(h.thread(other_thread)))
    assert [a.action for a in await h.audit("memory add")] == ["memory add"]


async def test_saving_to_ones_own_memory_asks_nobody_and_stays_private(harnesses):
    h = await harnesses.open(
        replies=[
            asks_for("remember", fact="my staging cluster is eu-2"),
            says("Noted."),
            recalls,
            recalls,
        ]
    )
    await h.say("remember my staging cluster is eu-2")
    assert h.surface.renders == []
    await h.say("which staging cluster?", thread="1700000002.000100", user=OTHER)
    await h.say("which staging cluster?", thread="1700000003.000100")

    assert h.surface.replies_in(h.thread("1700000002.000100")) == ["I don't know."]
    mine = h.surface.replies_in(h.thread("1700000003.000100"))
    assert mine == ["- my staging cluster is eu-2\n(from your memory: my staging cluster is eu-2)"]


async def test_notes_can_be_turned_off(harnesses):
    h = await harnesses.open(replies=[recalls], memory_notes=False)
    await h.engine.storage.memories.add_memories(["nginx logs live in /var/log/nginx"], user_id=f"slack:T1:{REQUESTER}")
    await h.say("where are nginx logs?")
    assert h.surface.replies_in(h.thread()) == ["- nginx logs live in /var/log/nginx"]


async def test_a_deny_policy_blocks_remember(harnesses):
    h = await harnesses.open(replies=[asks_for("remember", fact="x is y"), says("Could not save.")])
    await command(h, "policy set remember deny", actor=ADMIN)
    await h.say("remember x is y")
    assert await h.engine.storage.memories.count_memories() == 0


async def test_memory_list_forget_and_clear_manage_ones_own_memories(harnesses):
    h = await harnesses.open(replies=[recalls])
    memories = h.engine.storage.memories
    [mine, other] = await memories.add_memories(
        ["deploy window is 10:00", "billing is Ana's"], user_id=f"slack:T1:{REQUESTER}"
    )
    [theirs] = await memories.add_memories(["OTHER's secret plan"], user_id=f"slack:T1:{OTHER}")
    [shared] = await memories.add_memories(
        ["freeze on Fridays"], metadata={"channel": f"slack:T1:{CHANNEL}", "workspace": "slack:T1"}
    )

    listing = await command(h, "memory list")
    assert f"  {mine}  deploy window is 10:00" in listing and f"  {shared}  freeze on Fridays" in listing
    assert "secret plan" not in listing

    assert await command(h, f"memory forget {theirs}") == (
        f"No memory {theirs} of yours. A channel's shared memories are forgotten by admins."
    )
    assert (await command(h, f"memory forget {shared}")).startswith("No memory")
    assert await command(h, f"memory forget {mine}") == f"Forgotten: {mine}."
    await h.say("when is the deploy window?")
    assert h.surface.replies_in(h.thread()) == ["I don't know."]

    assert await command(h, "memory clear me") == "Forgot 1 of your memories."
    assert await memories.count_memories(user_id=f"slack:T1:{REQUESTER}") == 0
    assert await memories.count_memories() == 2
    assert [a.subject for a in await h.audit("memory forget")] == [mine]
    assert [a.action for a in await h.audit("memory clear")] == ["memory clear"]


async def test_only_admins_manage_a_channels_shared_memories(harnesses):
    h = await harnesses.open()
    memories = h.engine.storage.memories
    [shared] = await memories.add_memories(
        ["freeze on Fridays"], metadata={"channel": f"slack:T1:{CHANNEL}", "workspace": "slack:T1"}
    )
    assert await command(h, f"memory clear #{CHANNEL}") == f"Only admins manage #{CHANNEL}'s shared memories."
    assert [a.actor for a in await h.audit("memory change refused")] == [REQUESTER]
    assert await memories.count_memories() == 1
    assert f"  {shared}  freeze on Fridays" in await command(h, f"memory list #{CHANNEL}", actor=OTHER)

    assert await command(h, f"memory forget {shared}", actor=ADMIN) == f"Forgotten: {shared}."
    await memories.add_memories(
        ["freeze on Fridays"], metadata={"channel": f"slack:T1:{CHANNEL}", "workspace": "slack:T1"}
    )
    assert await command(h, f"memory clear #{CHANNEL}", actor=ADMIN) == f"Forgot 1 memories of #{CHANNEL}."
    assert await memories.count_memories() == 0


@pytest.mark.parametrize(
    "text", ["memory", "memory forget", "memory forget a'b", "memory clear everyone", "memory list #a #b"]
)
async def test_a_malformed_memory_command_gets_the_usage(harnesses, text):
    h = await harnesses.open()
    reply = await command(h, text)
    words = text.split()
    assert "\nusage: memory " in reply  # that command's usage line, not every command's
    if len(words) > 1:
        assert f"usage: memory {words[1]}" in reply
    else:
        assert "memory list [#channel]" in reply and "memory clear me|#channel" in reply
    assert "policy set" not in reply

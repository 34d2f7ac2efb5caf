"""The agent and a chat-message store: incremental writes, pauses, and no dangling tool calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.agent import Agent
from bot.agent.agent import MISSING_RESULT
from bot.hitl import BreakpointConfirmationStrategy, HITLBreakpointException
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ChatRole
from storage import SQLiteChatMessageStore
from tests.fakes.agent_kit import InMemoryChatMessageStore, ToolBox, approve, asks, call, dangling_free, says

THREAD = {"chat_history_id": "slack:T1:C1:170.1"}
HISTORY_ID = THREAD["chat_history_id"]


def pausing_agent(box: ToolBox, gen: ScriptedChatGenerator, store: object) -> Agent:
    return Agent(
        gen,
        tools=[box.make("delete"), box.make("lookup")],
        system_prompt="You are careful.",
        confirmation_strategies={"delete": BreakpointConfirmationStrategy()},
        chat_message_store=store,
    )


async def test_new_messages_are_written_to_the_store_as_the_run_goes() -> None:
    store = InMemoryChatMessageStore()
    box = ToolBox()
    gen = ScriptedChatGenerator([asks(call("lookup", "c1", target="disk")), says("Disk is fine.")])
    agent = Agent(gen, tools=[box.make("lookup")], system_prompt="Be brief.", chat_message_store=store)

    result = await agent.run_async([ChatMessage.from_user("check the disk")], chat_message_store_kwargs=THREAD)

    stored = store.histories[HISTORY_ID]
    assert [m.role for m in stored] == [ChatRole.USER, ChatRole.ASSISTANT, ChatRole.TOOL, ChatRole.ASSISTANT]
    assert [m.id for m in stored] == [m.id for m in result["messages"] if m.role != ChatRole.SYSTEM]
    # One write per stage, so a crash loses at most the stage in flight.
    assert [len(batch) for batch in store.batches] == [1, 1, 1, 1]


async def test_the_stored_history_is_sent_to_the_llm_before_the_new_message() -> None:
    store = InMemoryChatMessageStore()
    earlier = [ChatMessage.from_user("hi"), ChatMessage.from_assistant("hello")]
    store.write_messages(HISTORY_ID, earlier)
    gen = ScriptedChatGenerator([says("again")])

    await Agent(gen, chat_message_store=store).run_async(
        [ChatMessage.from_user("me again")], chat_message_store_kwargs=THREAD
    )

    assert [m.text for m in gen.calls[0]["messages"]] == ["hi", "hello", "me again"]


async def test_last_k_limits_the_history_retrieved() -> None:
    store = InMemoryChatMessageStore()
    store.write_messages(HISTORY_ID, [ChatMessage.from_user(f"m{i}") for i in range(6)])
    gen = ScriptedChatGenerator([says("ok")])

    await Agent(gen, chat_message_store=store).run_async(
        [ChatMessage.from_user("now")], chat_message_store_kwargs={**THREAD, "last_k": 2}
    )

    assert [m.text for m in gen.calls[0]["messages"]] == ["m4", "m5", "now"]


async def test_on_pause_the_paused_step_lives_in_the_snapshot_not_in_the_store() -> None:
    store = InMemoryChatMessageStore()
    box = ToolBox()
    gen = ScriptedChatGenerator([asks(call("delete", "c1", target="a.log"), call("lookup", "c2", target="disk"))])
    agent = pausing_agent(box, gen, store)
    request = ChatMessage.from_user("delete a.log")

    with pytest.raises(HITLBreakpointException) as info:
        await agent.run_async([request], chat_message_store_kwargs=THREAD)

    stored_ids = [m.id for m in store.histories[HISTORY_ID]]
    assert stored_ids == [request.id]
    assert info.value.snapshot.step_message.id not in stored_ids
    assert info.value.snapshot.history_id == HISTORY_ID
    assert dangling_free(store.histories[HISTORY_ID])


async def test_after_resuming_the_stored_history_has_no_dangling_tool_call() -> None:
    store = InMemoryChatMessageStore()
    box = ToolBox()
    gen = ScriptedChatGenerator([asks(call("delete", "c1", target="a.log"), call("lookup", "c2", target="disk"))])
    with pytest.raises(HITLBreakpointException) as info:
        await pausing_agent(box, gen, store).run_async(
            [ChatMessage.from_user("delete a.log")], chat_message_store_kwargs=THREAD
        )
    snapshot = info.value.snapshot

    # Resumed by a fresh agent that knows the thread only through the snapshot.
    resumed = pausing_agent(ToolBox(), ScriptedChatGenerator([says("Deleted.")]), store)
    result = await resumed.run_async([], snapshot=snapshot, tool_execution_decisions=[approve(call("delete", "c1"))])

    stored = store.histories[HISTORY_ID]
    assert dangling_free(stored)
    assert [m.role for m in stored] == [
        ChatRole.USER,
        ChatRole.ASSISTANT,
        ChatRole.TOOL,
        ChatRole.TOOL,
        ChatRole.ASSISTANT,
    ]
    assert stored[1].id == snapshot.step_message.id
    assert stored[-1].id == result["last_message"].id


async def test_dangling_calls_in_the_retrieved_history_are_closed_before_the_llm_sees_them() -> None:
    store = InMemoryChatMessageStore()
    crashed = ChatMessage.from_assistant(
        tool_calls=[call("delete", "c-old", target="x"), call("lookup", "c-old2", target="y")]
    )
    answered = ChatMessage.from_tool("disk ok", origin=call("lookup", "c-old2", target="y"))
    store.write_messages(HISTORY_ID, [ChatMessage.from_user("delete x"), crashed, answered])
    gen = ScriptedChatGenerator([says("What would you like?")])
    agent = Agent(gen, tools=[ToolBox().make("delete"), ToolBox().make("lookup")], chat_message_store=store)

    await agent.run_async([ChatMessage.from_user("hello?")], chat_message_store_kwargs=THREAD)

    sent = gen.calls[0]["messages"]
    assert dangling_free(sent)
    shape = [(m.role, m.tool_call_result and (m.tool_call_result.origin.id, m.tool_call_result.error)) for m in sent]
    assert shape == [
        (ChatRole.USER, None),
        (ChatRole.ASSISTANT, None),
        (ChatRole.TOOL, ("c-old2", False)),
        (ChatRole.TOOL, ("c-old", True)),
        (ChatRole.USER, None),
    ]
    assert sent[3].tool_call_result.result == MISSING_RESULT


async def test_a_pause_and_resume_against_the_sqlite_store_leaves_a_complete_history(tmp_path: Path) -> None:
    store = SQLiteChatMessageStore(str(tmp_path / "countersign.db"), last_k=50)
    box = ToolBox()
    try:
        gen = ScriptedChatGenerator([asks(call("delete", "c1", target="a.log"), call("lookup", "c2", target="disk"))])
        with pytest.raises(HITLBreakpointException) as info:
            await pausing_agent(box, gen, store).run_async(
                [ChatMessage.from_user("delete a.log")], chat_message_store_kwargs=THREAD
            )
        assert [m.role for m in store.retrieve_messages(HISTORY_ID)] == [ChatRole.USER]

        resumed = pausing_agent(box, ScriptedChatGenerator([says("Deleted.")]), store)
        await resumed.run_async(
            [], snapshot=info.value.snapshot, tool_execution_decisions=[approve(call("delete", "c1"))]
        )

        stored = store.retrieve_messages(HISTORY_ID)
        assert dangling_free(stored)
        assert [m.role for m in stored] == [
            ChatRole.USER,
            ChatRole.ASSISTANT,
            ChatRole.TOOL,
            ChatRole.TOOL,
            ChatRole.ASSISTANT,
        ]
        assert sorted(box.names()) == ["delete", "lookup"]
    finally:
        store.close()

"""The agent and a memory store: one "Relevant memories:" message after the system prompt, never in history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.agent import Agent
from bot.hitl import BreakpointConfirmationStrategy, HITLBreakpointException
from bot.llm import ScriptedChatGenerator
from bot.memory import FilterError, SQLiteMemoryStore
from bot.messages import ChatMessage, ChatRole
from storage import SQLiteChatMessageStore
from tests.fakes.agent_kit import ToolBox, approve, asks, call, says

THREAD = {"chat_history_id": "slack:T1:C1:170.1"}
C1 = {"field": "meta.channel", "operator": "==", "value": "C1"}


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "countersign.db"


@pytest.fixture
def memories(db_path: Path) -> SQLiteMemoryStore:
    store = SQLiteMemoryStore(db_path)
    store.add_memories(["our staging cluster is eu-2", "Ana owns the billing service"], user_id="U_ANA")
    store.add_memories(["Bob's staging cluster is us-1"], user_id="U_BOB")
    store.add_memories(["checkout deploys need two approvers"], metadata={"channel": "C1"})
    yield store
    store.close()


def sent(gen: ScriptedChatGenerator, call_index: int = 0) -> list[ChatMessage]:
    return gen.calls[call_index]["messages"]


async def test_matching_memories_reach_the_model_right_after_the_system_prompt(memories, db_path) -> None:
    gen = ScriptedChatGenerator([says("eu-2")])
    history = SQLiteChatMessageStore(db_path)
    agent = Agent(gen, system_prompt="Be brief.", memory_store=memories, chat_message_store=history)

    result = await agent.run_async(
        [ChatMessage.from_user("which staging cluster do we use?")],
        memory_store_kwargs={"user_id": "U_ANA"},
        chat_message_store_kwargs=THREAD,
    )

    messages = sent(gen)
    assert [m.role for m in messages] == [ChatRole.SYSTEM, ChatRole.SYSTEM, ChatRole.USER]
    assert messages[0].text == "Be brief."
    assert messages[1].text == "Relevant memories:\n- our staging cluster is eu-2"
    assert "us-1" not in messages[1].text  # Bob's memory is Bob's
    # Never in the thread's history, so never counted by last_k either.
    stored = history.retrieve_messages(THREAD["chat_history_id"], last_k=1)
    assert [m.text for m in stored] == ["eu-2"]
    assert [m.role for m in history.retrieve_messages(THREAD["chat_history_id"])] == [ChatRole.USER, ChatRole.ASSISTANT]
    [shown] = result["messages"][1].meta["memories"]
    assert shown["id"] == memories.search_memories("staging", user_id="U_ANA")[0].id
    assert shown["text"] == "our staging cluster is eu-2" and shown["user_id"] == "U_ANA"
    history.close()


async def test_without_a_system_prompt_the_memories_come_first(memories) -> None:
    gen = ScriptedChatGenerator([says("ok")])
    await Agent(gen, memory_store=memories).run_async(
        [ChatMessage.from_user("who owns billing?")], memory_store_kwargs={"user_id": "U_ANA"}
    )
    assert sent(gen)[0].text.startswith("Relevant memories:\n- Ana owns the billing service")


async def test_no_match_sends_no_memory_message(memories) -> None:
    gen = ScriptedChatGenerator([says("no idea")])
    await Agent(gen, system_prompt="Be brief.", memory_store=memories).run_async(
        [ChatMessage.from_user("what is the kubernetes quota?")], memory_store_kwargs={"user_id": "U_ANA"}
    )
    assert [m.role for m in sent(gen)] == [ChatRole.SYSTEM, ChatRole.USER]


async def test_search_criteria_query_filters_top_k_and_metadata(memories) -> None:
    gen = ScriptedChatGenerator([says("two")])
    await Agent(gen, memory_store=memories).run_async(
        [ChatMessage.from_user("hello")],
        memory_store_kwargs={
            "search_criteria": {
                "query": "approvers for checkout deploys",
                "filters": {"field": "meta.channel", "operator": "==", "value": "C1"},
                "top_k": 1,
                "include_memory_metadata": True,
            }
        },
    )
    text = sent(gen)[0].text
    assert text.startswith("Relevant memories:\n- checkout deploys need two approvers (metadata: {")
    assert '"channel":"C1"' in text and text.count("\n- ") == 1


async def test_metadata_stays_out_of_the_message_unless_asked(memories) -> None:
    gen = ScriptedChatGenerator([says("two")])
    await Agent(gen, memory_store=memories).run_async(
        [ChatMessage.from_user("approvers for checkout deploys")],
        memory_store_kwargs={"search_criteria": {"filters": C1}},
    )
    assert sent(gen)[0].text == "Relevant memories:\n- checkout deploys need two approvers"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"user": "U_ANA"},
        {"search_criteria": {"top": 3}},
        {"search_criteria": {"top_k": 0}},
        {"search_criteria": {"filters": {"field": "meta.channel", "operator": "like", "value": "C"}}},
    ],
)
async def test_bad_memory_store_kwargs_are_refused_before_the_model_is_called(memories, kwargs) -> None:
    gen = ScriptedChatGenerator([says("never")])
    with pytest.raises(ValueError):
        await Agent(gen, memory_store=memories).run_async([ChatMessage.from_user("hi")], memory_store_kwargs=kwargs)
    assert gen.calls == []


def test_a_malformed_filter_is_a_filter_error(memories) -> None:
    with pytest.raises(FilterError):
        memories.search_memories("x", filters={"operator": "AND"})


async def test_a_paused_run_resumes_with_the_same_memories_and_searches_no_more(memories) -> None:
    box = ToolBox()
    gen = ScriptedChatGenerator([asks(call("deploy", "c1", target="eu-2")), says("Deployed.")])
    agent = Agent(
        gen,
        tools=[box.make("deploy")],
        system_prompt="Be brief.",
        memory_store=memories,
        confirmation_strategies={"deploy": BreakpointConfirmationStrategy()},
    )
    with pytest.raises(HITLBreakpointException) as paused:
        await agent.run_async(
            [ChatMessage.from_user("deploy to our staging cluster")], memory_store_kwargs={"user_id": "U_ANA"}
        )
    memories.delete_memories(user_id="U_ANA")  # the resumed run keeps what it was shown

    decision = approve(paused.value.pending_tool_calls[0])
    await agent.run_async([], snapshot=paused.value.snapshot, tool_execution_decisions=[decision])

    resumed = sent(gen, 1)
    assert resumed[1].text == "Relevant memories:\n- our staging cluster is eu-2"
    assert [m.text for m in resumed].count(resumed[1].text) == 1


def test_the_sync_twin_uses_the_memories_too(memories) -> None:
    gen = ScriptedChatGenerator([says("Ana")])
    Agent(gen, memory_store=memories).run(
        [ChatMessage.from_user("who owns billing")], memory_store_kwargs={"user_id": "U_ANA"}
    )
    assert "Ana owns the billing service" in sent(gen)[0].text


async def test_the_agent_with_its_memory_store_survives_to_dict_and_json(memories, db_path) -> None:
    agent = Agent(ScriptedChatGenerator([says("eu-2")]), memory_store=memories)
    data = json.loads(json.dumps(agent.to_dict()))
    assert data["init_parameters"]["memory_store"] == {
        "type": "storage.memories.SQLiteMemoryStore",
        "init_parameters": {"path_or_db": str(db_path)},
    }
    rebuilt = Agent.from_dict(data)
    await rebuilt.run_async([ChatMessage.from_user("staging cluster?")], memory_store_kwargs={"user_id": "U_ANA"})
    assert "eu-2" in sent(rebuilt.chat_generator)[0].text
    rebuilt.memory_store.close()

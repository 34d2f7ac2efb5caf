"""Chat history on both backends: idempotent writes, last_k windows that never split a tool call."""

from __future__ import annotations

import asyncio
import json

import pytest

from bot.agent.agent import _call_store
from bot.messages import ChatMessage, ChatRole, ToolCall, new_id
from storage import CorruptRecord
from tests.fakes.storage_data import THREAD, tool_exchange

OTHER_THREAD = "slack:T1:C2:1700000001.000200"


def conversation(n: int) -> list[ChatMessage]:
    """``n`` alternating user/assistant text messages."""
    return [
        ChatMessage.from_user(f"question {i}") if i % 2 == 0 else ChatMessage.from_assistant(f"answer {i}")
        for i in range(n)
    ]


def texts(messages: list[ChatMessage]) -> list[str | None]:
    return [m.text if m.text is not None else m.role.value for m in messages]


async def test_write_returns_how_many_messages_were_new(storage):
    first = conversation(3)
    assert await storage.messages.write_messages(THREAD, first) == 3
    assert await storage.messages.write_messages(THREAD, first) == 0
    assert await storage.messages.write_messages(THREAD, [*first, ChatMessage.from_user("more")]) == 1
    assert await storage.messages.count_messages(THREAD) == 4


async def test_rewriting_a_message_keeps_its_place_and_content(storage):
    question = ChatMessage.from_user("original")
    await storage.messages.write_messages(THREAD, [question])
    clone = ChatMessage.from_dict({**question.to_dict(), "text": "edited"})  # same id, other text
    await storage.messages.write_messages(THREAD, [clone, ChatMessage.from_assistant("reply")])
    assert texts(await storage.messages.retrieve_messages(THREAD)) == ["original", "reply"]


async def test_messages_round_trip_oldest_first_with_their_ids(storage):
    messages = [ChatMessage.from_user("déployer «prod» \u0000 please"), *tool_exchange(("deploy", {"env": "prod"}))]
    await storage.messages.write_messages(THREAD, messages)
    assert [m.to_dict() for m in await storage.messages.retrieve_messages(THREAD)] == [m.to_dict() for m in messages]


async def test_last_k_returns_the_newest_messages_and_defaults_to_the_store_setting(storage):
    await storage.messages.write_messages(THREAD, conversation(14))
    assert texts(await storage.messages.retrieve_messages(THREAD, last_k=2)) == ["question 12", "answer 13"]
    assert len(await storage.messages.retrieve_messages(THREAD)) == 10
    assert len(await storage.messages.retrieve_messages(THREAD, last_k=50)) == 14


async def test_a_window_starting_on_a_tool_result_reaches_back_to_the_call(storage):
    await storage.messages.write_messages(THREAD, [*conversation(2), ChatMessage.from_user("delete a.txt")])
    await storage.messages.write_messages(THREAD, tool_exchange(("delete_file", {"path": "a.txt"})))
    window = await storage.messages.retrieve_messages(THREAD, last_k=1)
    assert [m.role for m in window] == [ChatRole.ASSISTANT, ChatRole.TOOL]
    assert window[1].tool_call_result.origin.id == window[0].tool_calls[0].id


async def test_a_parallel_call_keeps_all_its_results_whatever_k_cuts(storage):
    await storage.messages.write_messages(THREAD, [ChatMessage.from_user("check both")])
    exchange = tool_exchange(("disk_usage", {"host": "a"}), ("disk_usage_b", {"host": "b"}), ("uptime", {}))
    await storage.messages.write_messages(THREAD, exchange)
    for k in (1, 2, 3):
        window = await storage.messages.retrieve_messages(THREAD, last_k=k)
        assert [m.id for m in window] == [m.id for m in exchange], f"k={k}"
    assert len(await storage.messages.retrieve_messages(THREAD, last_k=4)) == 4
    assert texts(await storage.messages.retrieve_messages(THREAD, last_k=5))[0] == "check both"


async def test_a_window_ending_after_the_results_does_not_reach_back(storage):
    await storage.messages.write_messages(
        THREAD, [*tool_exchange(("uptime", {})), ChatMessage.from_assistant("all good")]
    )
    assert texts(await storage.messages.retrieve_messages(THREAD, last_k=1)) == ["all good"]


async def test_tool_results_with_no_call_before_them_are_left_out(storage):
    orphans = tool_exchange(("uptime", {}))[1:]
    await storage.messages.write_messages(THREAD, [*orphans, ChatMessage.from_user("hello")])
    assert texts(await storage.messages.retrieve_messages(THREAD, last_k=2)) == ["hello"]


async def test_system_messages_are_not_stored(storage):
    written = await storage.messages.write_messages(
        THREAD, [ChatMessage.from_system("You are careful."), *conversation(2)]
    )
    assert written == 2
    assert all(not m.is_from(ChatRole.SYSTEM) for m in await storage.messages.retrieve_messages(THREAD))


async def test_last_k_must_be_a_positive_integer(storage):
    for k in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="last_k"):
            await storage.messages.retrieve_messages(THREAD, last_k=k)


async def test_threads_are_isolated_and_delete_clears_one(storage):
    shared = ChatMessage.from_user("cross-posted")
    await storage.messages.write_messages(THREAD, [*conversation(2), shared])
    assert await storage.messages.write_messages(OTHER_THREAD, [shared]) == 1
    assert await storage.messages.delete_messages(THREAD) == 3
    assert await storage.messages.retrieve_messages(THREAD) == []
    assert texts(await storage.messages.retrieve_messages(OTHER_THREAD)) == ["cross-posted"]


async def test_concurrent_writers_to_one_thread_lose_nothing_and_duplicate_nothing(storage):
    batches = [conversation(3) for _ in range(8)]
    written = await asyncio.gather(
        *(storage.messages.write_messages(THREAD, batch) for batch in batches),
        *(storage.messages.write_messages(THREAD, batch) for batch in batches),  # every batch delivered twice
    )
    assert sum(written) == 24
    stored = await storage.messages.retrieve_messages(THREAD, last_k=100)
    assert sorted(m.id for m in stored) == sorted(m.id for batch in batches for m in batch)
    for batch in batches:  # each writer's messages stay in its order
        positions = [next(i for i, m in enumerate(stored) if m.id == own.id) for own in batch]
        assert positions == sorted(positions)


async def test_a_corrupt_stored_message_names_its_thread(backend):
    await backend.storage.messages.write_messages(THREAD, conversation(1))
    await backend.execute("""UPDATE messages SET data = '{"role": 7}'""")
    with pytest.raises(CorruptRecord, match=THREAD) as caught:
        await backend.storage.messages.retrieve_messages(THREAD)
    assert caught.value.kind == "message"


async def test_the_agents_chat_store_is_awaited_directly(storage):
    await _call_store(storage.messages.write_messages, THREAD, conversation(2))
    assert texts(await _call_store(storage.messages.retrieve_messages, THREAD, last_k=1)) == ["answer 1"]


async def test_a_message_stored_by_the_standard_library_encoder_still_reads(backend):
    # A row as written before orjson: spaces after separators and \u escapes.
    [message] = conversation(1)
    await backend.storage.messages.write_messages(THREAD, [message])
    old = json.dumps({**message.to_dict(), "text": "«prod»", "meta": {"id": message.id, "n": {"a": [1]}}})
    await backend.execute(f"UPDATE messages SET data = '{old}'")

    [read] = await backend.storage.messages.retrieve_messages(THREAD)

    assert (read.id, read.role, read.text) == (message.id, ChatRole.USER, "«prod»")
    assert read.meta == {"id": message.id, "n": {"a": [1]}}


async def test_changing_a_read_or_written_message_never_changes_the_stored_history(storage):
    question = ChatMessage.from_user("restart api", meta={"labels": ["prod"]})
    await storage.messages.write_messages(THREAD, [question])
    question.meta["labels"].append("written-then-changed")

    [read] = await storage.messages.retrieve_messages(THREAD)
    read.meta["labels"].append("read-then-changed")
    read.text = "edited"

    [again] = await storage.messages.retrieve_messages(THREAD)
    assert (again.text, again.meta["labels"]) == ("restart api", ["prod"])


def unusual_messages() -> list[ChatMessage]:
    """Messages whose every field is away from its default somewhere: ids of every shape, meta in every order."""
    call = ToolCall(tool_name="restart", arguments={"service": "api", "grace": [1, 2.5, None]}, id=None)
    return [
        ChatMessage.from_user("", meta={"id": "CALLER-CHOSEN id", "channel": "C1"}),  # id first, not hex
        ChatMessage.from_user("upper", meta={"id": "0123456789ABCDEF0123456789ABCDEF"}),  # hex, not lowercase
        ChatMessage.from_user("spaced", meta={"id": "01234567 89abcdef 01234567 89abcd"}),
        ChatMessage.from_assistant("both", tool_calls=[call], meta={"usage": {"total_tokens": 7}}),  # id last
        ChatMessage.from_tool("boom", origin=call, error=True, meta={"a": 1, "id": new_id(), "z": 2}),  # id between
        ChatMessage(role=ChatRole.ASSISTANT, text=None, meta={"id": 42}),  # not a string
    ]


async def test_every_kind_of_message_reads_back_exactly_as_it_was_written(storage):
    messages = unusual_messages()
    assert await storage.messages.write_messages(THREAD, messages) == len(messages)

    read = await storage.messages.retrieve_messages(THREAD, last_k=50)

    assert [m.to_dict() for m in read] == [m.to_dict() for m in messages]
    assert [list(m.meta) for m in read] == [list(m.meta) for m in messages]  # key order too
    assert [type(m.role) for m in read] == [ChatRole] * len(messages)
    # ids of every shape still make writes idempotent
    assert await storage.messages.write_messages(THREAD, messages) == 0
    assert await storage.messages.write_messages(THREAD, [ChatMessage.from_dict(m.to_dict()) for m in read]) == 0
    # and find a message for up_to, whatever its id's shape
    for position in (0, 1, 4):
        window = await storage.messages.retrieve_messages(THREAD, last_k=50, up_to=messages[position].id)
        assert [m.id for m in window] == [m.id for m in messages[: position + 1]]


async def test_a_writer_that_saw_a_thread_before_it_was_deleted_writes_into_the_thread_as_it_is_now(backend):
    storage, other = backend.storage, await backend.open_another()  # two processes on one database
    await storage.messages.write_messages(THREAD, conversation(2))  # storage has seen THREAD
    assert await other.messages.delete_messages(THREAD) == 2
    await other.messages.write_messages(OTHER_THREAD, [ChatMessage.from_user("meanwhile, elsewhere")])

    assert await storage.messages.write_messages(THREAD, [ChatMessage.from_user("after the delete")]) == 1

    assert texts(await other.messages.retrieve_messages(THREAD)) == ["after the delete"]
    assert texts(await other.messages.retrieve_messages(OTHER_THREAD)) == ["meanwhile, elsewhere"]


async def test_up_to_reads_the_window_as_it_was_when_that_message_was_the_newest(storage):
    earlier = conversation(6)
    await storage.messages.write_messages(THREAD, earlier)
    await storage.messages.write_messages(THREAD, [ChatMessage.from_user("written later")])
    await storage.messages.write_messages(OTHER_THREAD, conversation(2))
    window = await storage.messages.retrieve_messages(THREAD, last_k=3, up_to=earlier[4].id)
    assert [m.id for m in window] == [m.id for m in earlier[2:5]]
    assert [m.to_dict() for m in window] == [m.to_dict() for m in earlier[2:5]]
    assert texts(await storage.messages.retrieve_messages(THREAD, last_k=50, up_to=earlier[-1].id)) == texts(earlier)


async def test_up_to_a_message_the_thread_does_not_have_reads_nothing(storage):
    await storage.messages.write_messages(THREAD, conversation(4))
    elsewhere = conversation(1)
    await storage.messages.write_messages(OTHER_THREAD, elsewhere)
    assert await storage.messages.retrieve_messages(THREAD, last_k=5, up_to=elsewhere[0].id) == []
    assert await storage.messages.retrieve_messages(THREAD, last_k=5, up_to="no-such-message") == []


async def test_up_to_keeps_a_tool_call_with_its_results(storage):
    await storage.messages.write_messages(THREAD, [ChatMessage.from_user("check both")])
    exchange = tool_exchange(("disk_usage", {"host": "a"}), ("uptime", {}))
    await storage.messages.write_messages(THREAD, [*exchange, ChatMessage.from_user("later")])
    window = await storage.messages.retrieve_messages(THREAD, last_k=1, up_to=exchange[-1].id)
    assert [m.id for m in window] == [m.id for m in exchange]

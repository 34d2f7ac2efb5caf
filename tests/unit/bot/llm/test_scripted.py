"""ScriptedChatGenerator: replays prepared replies and records what it was sent."""

from __future__ import annotations

import pytest

from bot.llm import ChatGenerator, LLMError, ScriptedChatGenerator, StreamingChunk, chat_generator_from_dict
from bot.messages import ChatMessage, ToolCall
from bot.tools import tool


@tool
def delete_file(path: str) -> str:
    """Delete a file.

    :param path: File to delete.
    """
    return f"deleted {path}"


def test_replies_come_back_in_order() -> None:
    gen = ScriptedChatGenerator([ChatMessage.from_assistant("first"), ChatMessage.from_assistant("second")])

    texts = [gen.run([ChatMessage.from_user("hi")])["replies"][0].text for _ in range(2)]

    assert texts == ["first", "second"]
    assert gen.remaining == 0
    assert isinstance(gen, ChatGenerator)


def test_every_call_is_recorded_with_copies_of_messages_tool_names_and_generation_kwargs() -> None:
    gen = ScriptedChatGenerator([ChatMessage.from_assistant("ok")])
    question = ChatMessage.from_user("delete old.log")

    gen.run([question], tools=[delete_file], generation_kwargs={"temperature": 0})
    question.text = "changed afterwards"

    [call] = gen.calls
    assert [m.text for m in call["messages"]] == ["delete old.log"]
    assert call["messages"][0].id == question.id
    assert call["tools"] == ["delete_file"]
    assert call["generation_kwargs"] == {"temperature": 0}


def test_replaying_the_same_object_twice_gives_fresh_ids() -> None:
    reply = ChatMessage.from_assistant("same")
    gen = ScriptedChatGenerator([reply, reply])

    first = gen.run([])["replies"][0]
    second = gen.run([])["replies"][0]

    assert len({first.id, second.id, reply.id}) == 3
    assert first.text == second.text == "same"
    assert "finish_reason" not in reply.meta  # the scripted object itself is left untouched


def test_meta_gets_finish_reason_and_zero_usage_unless_already_set() -> None:
    call = ToolCall(tool_name="delete_file", arguments={"path": "a"}, id="call_1")
    gen = ScriptedChatGenerator(
        [
            ChatMessage.from_assistant(tool_calls=[call]),
            ChatMessage.from_assistant("done"),
            ChatMessage.from_assistant("cut", meta={"finish_reason": "length", "usage": {"total_tokens": 9}}),
        ]
    )

    replies = [gen.run([])["replies"][0] for _ in range(3)]

    assert [r.meta["finish_reason"] for r in replies] == ["tool_calls", "stop", "length"]
    assert replies[0].meta["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert replies[2].meta["usage"] == {"total_tokens": 9}
    assert replies[0].tool_calls == [call]


def test_tool_calls_without_an_id_get_one() -> None:
    gen = ScriptedChatGenerator([ChatMessage.from_assistant(tool_calls=[ToolCall("delete_file", {"path": "a"})])])

    [reply] = gen.run([])["replies"]

    assert reply.tool_calls[0].id


def test_a_callable_reply_is_built_from_the_messages() -> None:
    call = ToolCall(tool_name="delete_file", arguments={"path": "a"}, id="call_1")
    gen = ScriptedChatGenerator(
        [lambda messages: ChatMessage.from_assistant(f"Result: {messages[-1].tool_call_result.result}")]
    )

    [reply] = gen.run([ChatMessage.from_tool("deleted a", origin=call)])["replies"]

    assert reply.text == "Result: deleted a"


def test_running_out_of_replies_raises_llm_error() -> None:
    gen = ScriptedChatGenerator([ChatMessage.from_assistant("only one")])
    gen.run([])

    with pytest.raises(LLMError, match="^ScriptedChatGenerator has no more replies$"):
        gen.run([])


def test_an_exception_in_the_script_is_raised_by_the_call_that_reaches_it() -> None:
    gen = ScriptedChatGenerator([LLMError("model down"), ChatMessage.from_assistant("back")])

    with pytest.raises(LLMError, match="model down"):
        gen.run([])
    assert gen.run([])["replies"][0].text == "back"


async def test_run_async_and_an_async_streaming_callback_get_the_text_as_one_chunk() -> None:
    gen = ScriptedChatGenerator([ChatMessage.from_assistant("streamed answer")])
    chunks: list[StreamingChunk] = []

    async def on_chunk(chunk: StreamingChunk) -> None:
        chunks.append(chunk)

    [reply] = (await gen.run_async([], streaming_callback=on_chunk))["replies"]

    assert [c.content for c in chunks] == ["streamed answer"]
    assert chunks[0].finish_reason == "stop"
    assert reply.text == "streamed answer"


async def test_sync_run_with_a_streaming_callback_works_inside_a_running_loop() -> None:
    gen = ScriptedChatGenerator([ChatMessage.from_assistant("hello")])
    chunks: list[StreamingChunk] = []

    [reply] = gen.run([], streaming_callback=chunks.append)["replies"]

    assert reply.text == "hello"
    assert [c.content for c in chunks] == ["hello"]


def test_to_dict_round_trips_message_replies() -> None:
    gen = ScriptedChatGenerator([ChatMessage.from_assistant("a"), ChatMessage.from_assistant("b")])

    restored = chat_generator_from_dict(gen.to_dict())

    assert isinstance(restored, ScriptedChatGenerator)
    assert [restored.run([])["replies"][0].text for _ in range(2)] == ["a", "b"]


def test_to_dict_refuses_callable_replies_clearly() -> None:
    gen = ScriptedChatGenerator([lambda messages: ChatMessage.from_assistant("x")])

    with pytest.raises(TypeError, match="only serialise ChatMessage replies"):
        gen.to_dict()


def test_a_callable_reply_cannot_change_the_conversation_it_was_sent() -> None:
    def meddling(messages: list[ChatMessage]) -> str:
        messages[0].text = "rewritten"
        messages[0].meta["id"] = "stolen"
        messages[0].meta["extra"] = True
        messages[1].tool_calls.clear()
        messages.clear()
        return "ok"

    gen = ScriptedChatGenerator([meddling])
    question = ChatMessage.from_user("delete old.log")
    step = ChatMessage.from_assistant(tool_calls=[ToolCall("delete_file", {"path": "old.log"}, id="c1")])
    conversation = [question, step]

    gen.run(conversation)

    assert conversation == [question, step]
    assert (question.text, question.meta) == ("delete old.log", {"id": question.id})
    assert [c.id for c in step.tool_calls] == ["c1"]


def test_a_replayed_reply_object_comes_back_as_independent_copies() -> None:
    scripted = ChatMessage.from_assistant(
        tool_calls=[ToolCall("delete_file", {"path": "a.txt", "options": {"force": False}})], meta={"tags": ["x"]}
    )
    gen = ScriptedChatGenerator([scripted, scripted])

    first = gen.run([ChatMessage.from_user("go")])["replies"][0]
    first.meta["tags"].append("changed")
    first.tool_calls[0].arguments["options"]["force"] = True
    second = gen.run([ChatMessage.from_user("go")])["replies"][0]

    assert first.id != second.id != scripted.id
    assert second.meta["tags"] == scripted.meta["tags"] == ["x"]
    original = {"path": "a.txt", "options": {"force": False}}
    assert second.tool_calls[0].arguments == scripted.tool_calls[0].arguments == original

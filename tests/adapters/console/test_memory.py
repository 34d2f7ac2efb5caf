"""Memory in ``countersign chat``: a fact remembered in one thread answers in another; privacy; forget."""

from __future__ import annotations

import re

from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ToolCall
from tests.fakes.engine_kit import recalls


def remembers(fact: str, *, for_channel: bool = False) -> ChatMessage:
    return ChatMessage.from_assistant(tool_calls=[ToolCall("remember", {"fact": fact, "for_channel": for_channel})])


def test_a_channel_fact_remembered_in_one_thread_answers_in_another(harness):
    teach = ScriptedChatGenerator(
        [
            remembers("checkout deploys need two approvers", for_channel=True),
            ChatMessage.from_assistant("Noted for everyone."),
        ]
    )
    taught = harness.chat(
        ["remember for everyone: checkout deploys need two approvers", "y"], thread="ops", user="ana", generator=teach
    )
    assert "Run remember?" in taught.output  # a channel's shared memory is asked about first
    assert "Noted for everyone." in taught.output

    asked = harness.chat(
        ["how many approvers for checkout deploys?"],
        thread="release",
        user="bob",
        generator=ScriptedChatGenerator([recalls]),
    )

    # The answer (rendered as a bullet) and the note after it.
    assert asked.output.count("checkout deploys need two approvers") == 2
    assert "(from channel memory: checkout deploys need two approvers)" in asked.output


def test_a_persons_memory_is_never_used_for_another_and_forget_works(harness):
    teach = ScriptedChatGenerator([remembers("my staging cluster is eu-2"), ChatMessage.from_assistant("Noted.")])
    taught = harness.chat(["remember my staging cluster is eu-2"], thread="a", user="ana", generator=teach)
    assert "Run remember?" not in taught.output  # one's own memory: never asked

    bob = harness.chat(["which staging cluster?"], thread="b", user="bob", generator=ScriptedChatGenerator([recalls]))
    assert "I don't know." in bob.output and "eu-2" not in bob.output

    listed = harness.chat(["/memory list"], thread="c", user="ana")
    [memory_id] = re.findall(r"([0-9a-f]{16})  my staging cluster is eu-2", listed.output)
    ana = harness.chat(
        ["which staging cluster?", f"/memory forget {memory_id}", "which staging cluster?"],
        thread="c",
        user="ana",
        generator=ScriptedChatGenerator([recalls, recalls]),
    )

    assert "my staging cluster is eu-2" in ana.output[: ana.output.index("Forgotten")]
    assert f"Forgotten: {memory_id}." in ana.output
    assert ana.output.rindex("I don't know.") > ana.output.index(f"Forgotten: {memory_id}.")

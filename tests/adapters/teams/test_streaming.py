"""Teams live answers end to end: the Agents SDK's StreamingResponse and TypingIndicator over real HTTP to
the fake Bot Connector, the real openai client streaming from the fake model."""

from __future__ import annotations

import pytest

from bot.llm import OpenAIChatGenerator
from tests.fakes.bot_connector import FakeBotConnector, FakeBotFrameworkIssuer, trust_issuer
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.teams_stack import PERSONAL_CHAT, TeamsStack

ANSWER = "Everything is fine: " + " ".join(f"service{i} ok," for i in range(20)) + " nothing to do."


@pytest.fixture
async def stack(tmp_path, monkeypatch):
    async with FakeBotConnector() as connector, FakeBotFrameworkIssuer() as issuer, FakeOpenAIServer() as llm:
        trust_issuer(monkeypatch, issuer)
        llm.piece_delay = 0.05  # the model writes for longer than one update interval
        generator = OpenAIChatGenerator(api_key="test", api_base_url=llm.base_url, max_retries=0)
        opened = await TeamsStack.open(tmp_path, connector, issuer, generator=generator, stream_update_seconds=0.05)
        opened.llm = llm
        try:
            yield opened
        finally:
            await opened.aclose()


def texts(requests) -> list[str]:
    return [r.text or "" for r in requests]


async def test_an_answer_streams_informative_then_text_then_one_final_message_equal_to_it(stack):
    stack.llm.enqueue_text(ANSWER)

    await stack.say("how is everything?", conversation=PERSONAL_CHAT, conversation_type="personal")

    streamed = stack.connector.streamed()
    kinds = [r.stream_type for r in streamed]
    assert kinds[0] == "informative" and kinds[-1] == "final" and "streaming" in kinds
    final = streamed[-1]
    assert final.activity_type == "message" and final.text == ANSWER
    assert all(ANSWER.startswith(t) for t in texts(r for r in streamed if r.stream_type == "streaming"))
    ai_label = [e for e in final.body.get("entities") or [] if e.get("type") == "https://schema.org/Message"]
    assert ai_label and "AIGeneratedContent" in str(ai_label)
    assert stack.connector.typing()  # the SDK's typing indicator ran before the answer
    assert [r.text for r in stack.connector.posted() if r.stream_type is None and r.text] == []  # not posted twice


async def test_text_before_a_paused_call_ends_its_stream_and_the_card_follows(stack):
    stack.llm.enqueue_tool_calls([("delete_file", {"path": "old.log"})], text="I will delete old.log for you now.")
    stack.llm.enqueue_text("Deleted old.log, the disk has room again.")

    await stack.say("delete old.log", conversation=PERSONAL_CHAT, conversation_type="personal")
    card_request, _ = stack.last_card()
    finals = [r for r in stack.connector.streamed() if r.stream_type == "final"]

    assert [f.text for f in finals] == ["I will delete old.log for you now."]
    assert stack.connector.requests.index(finals[0]) < stack.connector.requests.index(card_request)


async def test_stream_updates_are_spaced_and_a_429_waits_for_its_retry_after(stack):
    stack.llm.enqueue_text(ANSWER)
    stack.connector.answer_status(lambda r: r.stream_type == "streaming", 429, {"Retry-After": "1"})

    await stack.say("how is everything?", conversation=PERSONAL_CHAT, conversation_type="personal")

    requests = [r for r in stack.connector.requests if r.stream_type in ("streaming", "final")]
    refused = requests[0]  # answered 429
    assert requests[1].at - refused.at >= 0.99
    gaps = [b.at - a.at for a, b in zip(requests, requests[1:], strict=False)]
    assert min(gaps) >= 0.05
    assert requests[-1].stream_type == "final" and requests[-1].text == ANSWER


async def test_the_stop_card_ends_the_run_after_the_running_tool(tmp_path, monkeypatch):
    import asyncio

    from tests.fakes.engine_kit import RecordingTools
    from tests.fakes.streaming_kit import BlockingBackup
    from tests.fakes.teams_stack import ANA, BEN, action_value

    job = BlockingBackup()

    class Tools(RecordingTools):
        def standard(self):
            return [*super().standard(), job.tool]

    async with FakeBotConnector() as connector, FakeBotFrameworkIssuer() as issuer, FakeOpenAIServer() as llm:
        trust_issuer(monkeypatch, issuer)
        llm.piece_delay = 0.05
        llm.enqueue_tool_calls([("backup", {"target": "orders"})], text="Backing up orders first, then the rest.")
        llm.enqueue_text("never asked")
        generator = OpenAIChatGenerator(api_key="test", api_base_url=llm.base_url, max_retries=0)
        stack = await TeamsStack.open(
            tmp_path, connector, issuer, generator=generator, tools=Tools(), stream_update_seconds=0.05
        )
        try:
            said = asyncio.create_task(
                stack.say("back everything up", conversation=PERSONAL_CHAT, conversation_type="personal")
            )
            await asyncio.wait_for(job.started.wait(), 10)
            working = "Working on your request."
            [card] = [c for r in connector.posted() for c in r.cards if c["body"][0]["text"] == working]
            stop = action_value(card, "stop")
            refused = await stack.post(stack.invoke(stop, person=BEN, conversation=PERSONAL_CHAT))
            stopping = await stack.post(stack.invoke(stop, person=ANA, conversation=PERSONAL_CHAT))
            job.release.set()
            await said
            [run] = await stack.engine.storage.runs.list_by_status("stopped")
        finally:
            await stack.aclose()

    assert refused == (
        200,
        {
            "statusCode": 200,
            "type": "application/vnd.microsoft.activity.message",
            "value": "Only the person who asked, or an admin, can stop this.",
        },
    )
    assert stopping[1]["value"] == "Stopping after the current step."
    assert run.requester == ANA.id and len(llm.requests) == 1
    assert connector.texts()[-1] == "(Stopped.)"
    assert any("Done." in str(u.cards) for u in connector.updates())  # the Stop button is gone


@pytest.mark.parametrize(("conversation", "kind"), [("19:group-chat@thread.v2", "groupChat"), (None, "channel")])
async def test_outside_personal_chats_nothing_streams_the_answer_is_one_message_and_no_error_is_logged(
    stack, caplog, conversation, kind
):
    stack.llm.enqueue_text(ANSWER)
    where = {"conversation": conversation} if conversation else {}  # None: the channel's reply chain
    with caplog.at_level("WARNING"):
        await stack.say("how is everything?", conversation_type=kind, **where)
        await stack.settle()

    assert stack.connector.streamed() == []  # Teams answers 405 to streams there
    assert [r.text for r in stack.connector.posted() if r.text] == [ANSWER]
    # asyncio's own records can come from an earlier test's client collected now; the bot's and the SDK's count.
    assert [r for r in caplog.records if r.levelname == "ERROR" and r.name != "asyncio"] == []
    typed = bool(stack.connector.typing())
    assert typed is (kind == "groupChat")  # typing in a group chat, none in a channel's reply chain

"""Previews and Respond in Slack (issue 30): the card shows the preview; "Respond" opens a modal with one text input
whose text the model gets instead of running the tool.

Real Bolt AsyncApp over HTTP, the real Engine, the fake Slack Web API and a fake OpenAI endpoint.
"""

# ruff: noqa: F811 - fixtures imported from test_approvals

from __future__ import annotations

import json
from pathlib import Path

from bot.llm import OpenAIChatGenerator
from bot.tools import tool
from tests.adapters.slack.test_admin import command as admin_command
from tests.adapters.slack.test_approvals import ADMIN, ALICE, CHANNEL, ask  # noqa: F401
from tests.fakes.clock import Clock
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.slack_requests import form, text_input
from tests.fakes.slack_stack import SlackStack, all_text, assert_valid_message_blocks, assert_valid_view, button_values


async def test_respond_opens_a_modal_and_the_typed_answer_replaces_the_run(
    tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer, clock: Clock
) -> None:
    ran: list[str] = []

    def plan(service: str) -> str:
        return f"3 pods of {service} will restart"

    @tool(preview=plan, respondable=True)
    def restart_service(service: str) -> str:
        """Restart a service.

        :param service: The service.
        """
        ran.append(service)
        return "restarted"

    generator = OpenAIChatGenerator(api_key="test", api_base_url=openai.base_url, max_retries=0)
    stack = await SlackStack.start(
        db_path=tmp_path / "cs.db",
        slack=slack,
        generator=generator,
        tools=[restart_service],
        admins={ADMIN},
        clock=clock,
    )
    try:
        openai.enqueue_tool_calls([("restart_service", {"service": "web"})])
        openai.enqueue_text("Noted.")
        mention_ts, approval = await ask(stack, slack, "restart web")
        blocks = approval.args["blocks"]
        assert "Preview" in all_text(blocks) and "3 pods of web will restart" in all_text(blocks)
        [approval_id] = button_values(blocks, "cs_respond")

        await stack.requests.click(
            "cs_respond",
            approval_id,
            user=ALICE,
            channel=CHANNEL,
            message_ts=approval.response["ts"],
            thread_ts=mention_ts,
        )
        [opened] = await slack.wait_for("views.open")
        modal = opened.args["view"]
        assert modal["callback_id"] == "cs_respond_modal"
        assert json.loads(modal["private_metadata"]) == {"approval_id": approval_id, "place": f"slack:{CHANNEL}"}

        reply = await stack.requests.submit(
            modal, form("feedback", cs_feedback=text_input("the ticket is INC-4411")), user=ALICE
        )
        assert reply.status == 200 and reply.text == ""
        await stack.settle()

        assert ran == []
        assert "instead of running the tool: the ticket is INC-4411" in all_text(
            slack.calls_to("chat.update")[-1].args["blocks"]
        )
        sent = json.dumps(openai.requests[-1]["messages"])
        assert "the ticket is INC-4411" in sent
    finally:
        await stack.stop()


async def test_no_respond_button_on_a_tool_that_is_not_respondable(
    tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer, clock: Clock
) -> None:
    @tool
    def restart_service(service: str) -> str:
        """Restart a service.

        :param service: The service.
        """
        return "restarted"

    generator = OpenAIChatGenerator(api_key="test", api_base_url=openai.base_url, max_retries=0)
    stack = await SlackStack.start(
        db_path=tmp_path / "cs.db",
        slack=slack,
        generator=generator,
        tools=[restart_service],
        admins={ADMIN},
        clock=clock,
    )
    try:
        openai.enqueue_tool_calls([("restart_service", {"service": "web"})])
        _, approval = await ask(stack, slack, "restart web")
        assert button_values(approval.args["blocks"], "cs_respond") == []
        assert button_values(approval.args["blocks"], "cs_approve")
    finally:
        await stack.stop()


async def test_a_policy_tightened_while_a_call_waits_re_renders_the_card_and_deny_closes_it(
    tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer, clock: Clock
) -> None:
    """Issue 30 through the slash command: new approvers re-render the waiting card (Alice's vote no longer counts,
    shown as such), then ``deny`` closes it with a sentence on the card and in the thread; the tool never runs."""
    ran: list[str] = []

    @tool
    def restart_service(service: str) -> str:
        """Restart a service.

        :param service: The service.
        """
        ran.append(service)
        return "restarted"

    generator = OpenAIChatGenerator(api_key="test", api_base_url=openai.base_url, max_retries=0)
    stack = await SlackStack.start(
        db_path=tmp_path / "cs.db",
        slack=slack,
        generator=generator,
        tools=[restart_service],
        admins={ADMIN},
        clock=clock,
    )

    async def command(text: str) -> str:
        return await admin_command(stack, slack, text, ADMIN)

    try:
        await command(f"approvers restart_service <@{ALICE}> <@{ADMIN}> <@U0BEN>")
        await command("quorum restart_service 2")
        openai.enqueue_tool_calls([("restart_service", {"service": "web"})])
        openai.enqueue_text("Not restarted.")
        mention_ts, approval = await ask(stack, slack, "restart web")
        [approval_id] = button_values(approval.args["blocks"], "cs_approve")
        await stack.requests.click(
            "cs_approve",
            approval_id,
            user=ALICE,
            channel=CHANNEL,
            message_ts=approval.response["ts"],
            thread_ts=mention_ts,
        )
        await stack.settle()

        answer = await command(f"approvers restart_service <@{ADMIN}> <@U0BEN>")
        assert "1 earlier approval(s) no longer count" in answer
        card = all_text(slack.calls_to("chat.update")[-1].args["blocks"])
        assert f"<@{ALICE}>'s approval no longer counts: approvers are now" in card and "(0/2 approvals)" in card

        answer = await command("policy set restart_service deny")
        assert "1 pending approval(s) closed (denied)" in answer
        sentence = "An admin set restart_service to deny while this call waited, so it was closed without running."
        assert sentence in all_text(slack.calls_to("chat.update")[-1].args["blocks"])
        posted = [c.args.get("text") or "" for c in slack.calls_to("chat.postMessage")]
        assert any(sentence in text for text in posted), "said in the thread"
        assert ran == []
    finally:
        await stack.stop()


async def test_show_more_opens_a_modal_with_the_whole_preview_the_message_cut(
    tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer, clock: Clock
) -> None:
    def plan(service: str) -> str:
        return "\n".join(f"pod {service}-{n} <will> restart" for n in range(300)) + "\nend of plan"

    @tool(preview=plan)
    def restart_service(service: str) -> str:
        """Restart a service.

        :param service: The service.
        """
        return "restarted"

    generator = OpenAIChatGenerator(api_key="test", api_base_url=openai.base_url, max_retries=0)
    stack = await SlackStack.start(
        db_path=tmp_path / "cs.db",
        slack=slack,
        generator=generator,
        tools=[restart_service],
        admins={ADMIN},
        clock=clock,
    )
    try:
        openai.enqueue_tool_calls([("restart_service", {"service": "web"})])
        mention_ts, approval = await ask(stack, slack, "restart web")
        blocks = approval.args["blocks"]
        assert_valid_message_blocks(blocks)
        assert "pod web-1 &lt;will&gt; restart" in all_text(blocks) and "pod web-200" not in all_text(blocks)
        [approval_id] = button_values(blocks, "cs_preview")

        await stack.requests.click(
            "cs_preview",
            approval_id,
            user=ALICE,
            channel=CHANNEL,
            message_ts=approval.response["ts"],
            thread_ts=mention_ts,
        )
        [opened] = await slack.wait_for("views.open")
        modal = opened.args["view"]
        assert_valid_view(modal)
        assert modal["callback_id"] == "cs_preview_modal" and "submit" not in modal
        shown = all_text(modal["blocks"])
        assert "pod web-200 &lt;will&gt; restart" in shown and "<will>" not in shown
        assert "(+" in shown, "cut at the bigger limit, saying how much is left"

        await stack.requests.click(
            "cs_preview",
            approval_id,
            user="U0MALLORY",
            channel=CHANNEL,
            message_ts=approval.response["ts"],
            thread_ts=mention_ts,
        )
        await stack.settle()
        assert len(slack.calls_to("views.open")) == 1, "only the people who may decide open it"
    finally:
        await stack.stop()

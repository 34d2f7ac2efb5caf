"""Rules that look at the arguments: ``policy set … when …`` and ``@tool(needs_approval=callable)``."""

from __future__ import annotations

import pytest

from bot.engine.conditions import parse_condition
from bot.engine.errors import CommandError
from bot.engine.model import AdminRequest
from bot.tools import tool
from tests.fakes.engine_kit import ADMIN, CHANNEL, PLATFORM, REQUESTER, WORKSPACE, asks_for, says

NOT_AN_ADMIN = "Only countersign admins can change policies."


async def command(h, text: str, actor: str = ADMIN, channel: str = CHANNEL) -> str:
    return await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, channel, actor, text))


def restart_tool(calls: list[dict]):
    @tool
    def restart_service(service: str, env: str, replicas: int = 1) -> str:
        """Restart a service.

        :param service: The service.
        :param env: The environment.
        :param replicas: How many replicas.
        """
        calls.append({"service": service, "env": env, "replicas": replicas})
        return f"restarted {service} in {env}"

    return restart_service


async def paused(h, text: str) -> bool:
    """Send a message; whether it paused for approval."""
    before = len(h.surface.renders)
    await h.say(text, thread=f"t-{text}")
    return len(h.surface.renders) > before


async def test_a_prod_call_asks_and_a_staging_call_runs(harnesses):
    calls: list[dict] = []
    h = await harnesses.open(
        extra_tools=[restart_tool(calls)],
        replies=[
            asks_for("restart_service", service="api", env="prod"),
            asks_for("restart_service", service="api", env="staging"),
            says("Restarted in staging."),
        ],
    )
    await command(h, "policy set restart_service never")
    reply = await command(h, "policy set restart_service always when env=prod")
    assert reply == "Rule updated: restart_service when env=prod in this workspace: mode=always"

    assert await paused(h, "restart api in prod")
    assert not await paused(h, "restart api in staging")
    assert calls == [{"service": "api", "env": "staging", "replicas": 1}]
    assert [r.approvals[0].policy_mode for r in h.surface.renders] == ["always"]


async def test_in_lists_numbers_and_the_most_specific_matching_rule_wins(harnesses):
    calls: list[dict] = []
    replies = [
        asks_for("restart_service", service="a", env="staging", replicas=3),
        says("ok"),
        asks_for("restart_service", service="b", env="staging", replicas=20),
        asks_for("restart_service", service="c", env="dev", replicas=20),
    ]
    h = await harnesses.open(extra_tools=[restart_tool(calls)], replies=replies)
    await command(h, "policy set restart_service never when env in prod,staging")  # one clause
    await command(h, "policy set restart_service always when env in staging,prod and replicas>10")  # two: wins

    assert not await paused(h, "small staging restart")
    assert await paused(h, "big staging restart")
    assert await paused(h, "dev restart")  # no rule matches: the default, always
    assert [c["service"] for c in calls] == ["a"]


async def test_a_channel_rule_beats_a_conditional_workspace_rule(harnesses):
    calls: list[dict] = []
    h = await harnesses.open(
        extra_tools=[restart_tool(calls)],
        replies=[asks_for("restart_service", service="api", env="prod"), says("done")],
    )
    await command(h, "policy set restart_service always when env=prod")
    await command(h, "policy set restart_service never #C1")
    assert not await paused(h, "restart api in prod")
    assert calls == [{"service": "api", "env": "prod", "replicas": 1}]


async def test_a_condition_on_a_field_the_tool_lacks_is_refused_when_set(harnesses):
    h = await harnesses.open(extra_tools=[restart_tool([])])
    reply = await command(h, "policy set restart_service always when region=eu")
    assert reply.startswith("restart_service has no argument 'region'")
    assert "A condition looks at one tool's arguments" in await command(h, "policy set * always when env=prod")
    assert await h.engine.storage.conditions.rules() == []


async def test_policy_list_shows_conditions_and_reset_removes_one(harnesses):
    h = await harnesses.open(extra_tools=[restart_tool([])])
    await command(h, "policy set restart_service always when env = prod #C_OPS")
    listing = await command(h, "policy list", actor=REQUESTER)
    assert "restart_service when env=prod @ channel:slack:T1:C_OPS: mode=always" in listing

    answer = await command(h, "policy reset restart_service #C_OPS when env=prod")
    assert answer == "Rule for restart_service when env=prod in #C_OPS removed."
    assert await h.engine.storage.conditions.rules() == []
    actions = [(e.action, e.details["fields"].get("condition")) for e in reversed(await h.audit())]
    assert actions == [("policy set", "env=prod"), ("policy reset", "env=prod")]


async def test_a_conditional_change_by_someone_who_is_not_an_admin_is_refused_and_audited(harnesses):
    h = await harnesses.open(extra_tools=[restart_tool([])])
    text = "policy set restart_service never when env=dev"
    assert await command(h, text, actor=REQUESTER) == NOT_AN_ADMIN
    assert await h.engine.storage.conditions.rules() == []
    [audited] = await h.audit()
    assert (audited.actor, audited.action) == (REQUESTER, "policy change refused")


@pytest.mark.parametrize(
    ("text", "problem"),
    [("env", "is not a condition"), ("replicas>many", "not a number"), ("", "1 to 8 clauses")],
)
def test_conditions_that_cannot_be_read_are_refused_with_the_reason(text, problem):
    with pytest.raises(CommandError, match=problem):
        parse_condition(text)


# ---------------------------------------------------------------------- needs_approval


def judged_tool(judge, calls: list[dict]):
    @tool(needs_approval=judge)
    def deploy(env: str) -> str:
        """Deploy.

        :param env: Where.
        """
        calls.append({"env": env})
        return f"deployed to {env}"

    return deploy


async def test_needs_approval_decides_from_the_arguments_after_the_admins_rules(harnesses):
    calls: list[dict] = []
    h = await harnesses.open(
        extra_tools=[judged_tool(lambda args: args["env"] == "prod", calls)],
        replies=[
            asks_for("deploy", env="prod"),
            asks_for("deploy", env="dev"),
            says("ok"),
            asks_for("deploy", env="dev"),
        ],
    )
    assert await paused(h, "deploy prod")
    assert not await paused(h, "deploy dev")
    await command(h, "policy set deploy always when env=dev")  # the admins' rule comes first
    assert await paused(h, "deploy dev again")
    assert calls == [{"env": "dev"}]


async def test_an_error_in_needs_approval_means_ask(harnesses):
    def broken(arguments):
        raise RuntimeError("boom")

    calls: list[dict] = []
    h = await harnesses.open(extra_tools=[judged_tool(broken, calls)], replies=[asks_for("deploy", env="dev")])
    assert await paused(h, "deploy dev")
    assert calls == []

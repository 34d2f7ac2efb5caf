"""Team settings on both backends: named approver groups, access rules, the direct-message switch."""

from __future__ import annotations

from datetime import UTC

from tests.fakes.storage_data import NOW

CHANNEL_SCOPE = "channel:slack:T1:C1"
WORKSPACE_SCOPE = "workspace:slack:T1"


async def test_a_group_is_created_replaced_listed_and_deleted_by_its_case_insensitive_name(storage):
    assert await storage.approver_groups.get("oncall") is None
    created = await storage.approver_groups.set_group("@OnCall", ["U1", "U2", "U1"], updated_by="U_ADMIN", now=NOW)
    assert (created.name, created.members, created.updated_by) == ("oncall", ("U1", "U2"), "U_ADMIN")
    assert created.updated_at == NOW and created.updated_at.tzinfo == UTC
    assert await storage.approver_groups.get("ONCALL") == created

    await storage.approver_groups.set_group("oncall", ["U3"], updated_by="U_ADMIN2", now=NOW)
    await storage.approver_groups.set_group("dba", ["U4"], updated_by="U_ADMIN", now=NOW)
    assert [(g.name, g.members) for g in await storage.approver_groups.list_groups()] == [
        ("dba", ("U4",)),
        ("oncall", ("U3",)),
    ]

    assert await storage.approver_groups.delete_group("oncall") is True
    assert await storage.approver_groups.delete_group("oncall") is False
    assert [g.name for g in await storage.approver_groups.list_groups()] == ["dba"]


async def test_access_rules_are_allowed_listed_by_scope_and_revoked(storage):
    assert await storage.access.rules() == []
    rule = await storage.access.allow(CHANNEL_SCOPE, "U1", updated_by="U_ADMIN", now=NOW)
    assert (rule.scope, rule.principal, rule.updated_by, rule.updated_at) == (CHANNEL_SCOPE, "U1", "U_ADMIN", NOW)
    await storage.access.allow(CHANNEL_SCOPE, "U1", updated_by="U_ADMIN", now=NOW)  # twice: one rule
    await storage.access.allow(CHANNEL_SCOPE, "group:oncall", updated_by="U_ADMIN", now=NOW)
    await storage.access.allow(WORKSPACE_SCOPE, "everyone", updated_by="U_ADMIN", now=NOW)

    assert [r.principal for r in await storage.access.rules([CHANNEL_SCOPE])] == ["U1", "group:oncall"]
    assert [(r.scope, r.principal) for r in await storage.access.rules()] == [
        (CHANNEL_SCOPE, "U1"),
        (CHANNEL_SCOPE, "group:oncall"),
        (WORKSPACE_SCOPE, "everyone"),
    ]
    assert await storage.access.rules([]) == []

    assert await storage.access.revoke(CHANNEL_SCOPE, "U1") is True
    assert await storage.access.revoke(CHANNEL_SCOPE, "U1") is False
    assert [r.principal for r in await storage.access.rules([CHANNEL_SCOPE])] == ["group:oncall"]


async def test_direct_messages_are_allowed_until_turned_off_per_workspace(storage):
    assert await storage.access.direct_messages_allowed(WORKSPACE_SCOPE) is True
    await storage.access.set_direct_messages(WORKSPACE_SCOPE, False, updated_by="U_ADMIN", now=NOW)
    assert await storage.access.direct_messages_allowed(WORKSPACE_SCOPE) is False
    assert await storage.access.direct_messages_allowed("workspace:slack:T2") is True
    await storage.access.set_direct_messages(WORKSPACE_SCOPE, True, updated_by="U_ADMIN", now=NOW)
    assert await storage.access.direct_messages_allowed(WORKSPACE_SCOPE) is True


async def test_conditional_rules_are_set_replaced_listed_by_scope_and_tool_and_reset(storage):
    rule = await storage.conditions.set_rule("global", "deploy", "env=prod", "always", updated_by="U_ADMIN", now=NOW)
    assert (rule.scope, rule.tool_name, rule.condition, rule.mode, rule.updated_at) == (
        "global",
        "deploy",
        "env=prod",
        "always",
        NOW,
    )
    await storage.conditions.set_rule("global", "deploy", "env=prod", "deny", updated_by="U_ADMIN", now=NOW)
    await storage.conditions.set_rule(CHANNEL_SCOPE, "deploy", "replicas>10", "always", updated_by="U_ADMIN", now=NOW)
    await storage.conditions.set_rule("global", "scale", "env=dev", "never", updated_by="U_ADMIN", now=NOW)

    assert [(r.condition, r.mode) for r in await storage.conditions.rules(["global"], "deploy")] == [
        ("env=prod", "deny")
    ]
    assert [(r.scope, r.tool_name) for r in await storage.conditions.rules()] == [
        (CHANNEL_SCOPE, "deploy"),
        ("global", "deploy"),
        ("global", "scale"),
    ]
    assert [r.tool_name for r in await storage.conditions.rules(tool_name="scale")] == ["scale"]
    assert await storage.conditions.rules([]) == []

    assert await storage.conditions.reset_rule("global", "deploy", "env=prod") is True
    assert await storage.conditions.reset_rule("global", "deploy", "env=prod") is False
    assert await storage.conditions.rules(["global"], "deploy") == []

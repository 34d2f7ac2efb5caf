"""Policies on both backends: channel > workspace > global, name > group > *, field-by-field inheritance."""

from __future__ import annotations

import pytest

from storage import Batch, Handle, scope_channel, scope_global, scope_workspace, stores
from tests.fakes.storage_data import NOW

CHANNEL = scope_channel("slack", "T1", "C1")
WORKSPACE = scope_workspace("slack", "T1")
GLOBAL = scope_global()
WHERE = {"platform": "slack", "workspace": "T1", "channel": "C1"}


@pytest.fixture
async def policies(storage):
    await storage.policies.define_group("destructive", ["delete_file", "drop_table"])
    return storage.policies


async def test_nothing_set_leaves_every_field_to_the_engine(policies):
    rule = await policies.resolve("delete_file", **WHERE)
    assert (rule.mode, rule.approvers, rule.quorum, rule.four_eyes, rule.ttl_seconds) == (None,) * 5
    assert rule.sources == {}


async def test_channel_beats_workspace_beats_global(policies):
    await policies.set_rule(GLOBAL, "delete_file", updated_by="U_ADMIN", mode="never")
    await policies.set_rule(WORKSPACE, "*", updated_by="U_ADMIN", quorum=2)
    assert (await policies.resolve("delete_file", **WHERE)).mode == "never"
    await policies.set_rule(WORKSPACE, "delete_file", updated_by="U_ADMIN", mode="once")
    assert (await policies.resolve("delete_file", **WHERE)).mode == "once"
    # a broad channel rule beats a precise workspace one: scope first, then tool key
    await policies.set_rule(CHANNEL, "*", updated_by="U_ADMIN", mode="always")
    assert (await policies.resolve("delete_file", **WHERE)).mode == "always"
    await policies.set_rule(CHANNEL, "delete_file", updated_by="U_ADMIN", mode="deny")
    rule = await policies.resolve("delete_file", **WHERE)
    assert (rule.mode, rule.sources["mode"], rule.sources["quorum"]) == (
        "deny",
        (CHANNEL, "delete_file"),
        (WORKSPACE, "*"),
    )


async def test_within_a_scope_a_name_beats_a_group_beats_any_and_groups_by_name(policies):
    await policies.define_group("cleanup", ["delete_file"])
    await policies.set_rule(WORKSPACE, "*", updated_by="U_ADMIN", mode="never")
    await policies.set_rule(WORKSPACE, "destructive", updated_by="U_ADMIN", mode="once", quorum=3)
    await policies.set_rule(WORKSPACE, "cleanup", updated_by="U_ADMIN", quorum=2)
    rule = await policies.resolve("delete_file", **WHERE)
    assert (rule.mode, rule.sources["mode"]) == ("once", (WORKSPACE, "destructive"))
    assert (rule.quorum, rule.sources["quorum"]) == (2, (WORKSPACE, "cleanup"))  # "cleanup" sorts first
    await policies.set_rule(WORKSPACE, "delete_file", updated_by="U_ADMIN", mode="deny")
    assert (await policies.resolve("delete_file", **WHERE)).mode == "deny"
    assert (await policies.resolve("list_files", **WHERE)).mode == "never"  # not in a group: only "*"


async def test_each_field_is_inherited_from_the_most_specific_rule_that_sets_it(policies):
    await policies.set_rule(GLOBAL, "*", updated_by="U_ADMIN", mode="always", quorum=1, ttl_seconds=3600)
    await policies.set_rule(WORKSPACE, "destructive", updated_by="U_ADMIN", approvers=["U_BOB", "U_CAROL"], quorum=2)
    await policies.set_rule(CHANNEL, "delete_file", updated_by="U_ADMIN", four_eyes=True)
    rule = await policies.resolve("delete_file", **WHERE)
    assert (rule.mode, rule.approvers, rule.quorum, rule.four_eyes, rule.ttl_seconds) == (
        "always",
        ("U_BOB", "U_CAROL"),
        2,
        True,
        3600,
    )
    assert rule.sources == {
        "mode": (GLOBAL, "*"),
        "ttl_seconds": (GLOBAL, "*"),
        "approvers": (WORKSPACE, "destructive"),
        "quorum": (WORKSPACE, "destructive"),
        "four_eyes": (CHANNEL, "delete_file"),
    }


async def test_another_channel_does_not_see_a_channel_rule_and_empty_approvers_are_set(policies):
    await policies.set_rule(CHANNEL, "delete_file", updated_by="U_ADMIN", mode="never")
    assert (await policies.resolve("delete_file", platform="slack", workspace="T1", channel="C2")).mode is None
    assert (await policies.resolve("delete_file", platform="teams", workspace="T1", channel="C1")).mode is None
    await policies.set_rule(GLOBAL, "*", updated_by="U_ADMIN", approvers=["U_BOB"])
    await policies.set_rule(CHANNEL, "*", updated_by="U_ADMIN", approvers=[])
    assert (await policies.resolve("delete_file", **WHERE)).approvers == ()


async def test_set_rule_changes_only_the_given_fields_and_reset_inherits_again(policies):
    await policies.set_rule(CHANNEL, "delete_file", updated_by="U_ADMIN", mode="always", quorum=2, four_eyes=False)
    rule = await policies.set_rule(CHANNEL, "delete_file", updated_by="U_ROOT", ttl_seconds=600)
    assert (rule.mode, rule.quorum, rule.four_eyes, rule.ttl_seconds, rule.updated_by) == (
        "always",
        2,
        False,
        600,
        "U_ROOT",
    )
    rule = await policies.set_rule(CHANNEL, "delete_file", updated_by="U_ROOT", quorum=None)
    assert (rule.mode, rule.quorum) == ("always", None)
    assert await policies.get_rule(CHANNEL, "delete_file") == rule
    assert await policies.reset_rule(CHANNEL, "delete_file")
    assert not await policies.reset_rule(CHANNEL, "delete_file")
    assert await policies.get_rule(CHANNEL, "delete_file") is None


async def test_rules_are_listed_by_scope_and_tool_key(policies):
    await policies.set_rule(GLOBAL, "*", updated_by="U_ADMIN", mode="always")
    await policies.set_rule(CHANNEL, "deploy", updated_by="U_ADMIN", mode="once")
    await policies.set_rule(CHANNEL, "Backup", updated_by="U_ADMIN", mode="never")
    await policies.set_rule(CHANNEL, "backup", updated_by="U_ADMIN", mode="never")
    assert [(r.scope, r.tool_key) for r in await policies.list_rules()] == [
        (CHANNEL, "Backup"),
        (CHANNEL, "backup"),
        (CHANNEL, "deploy"),
        (GLOBAL, "*"),
    ]
    assert [r.tool_key for r in await policies.list_rules(CHANNEL)] == ["Backup", "backup", "deploy"]


INVALID_FIELDS = [
    {"mode": "sometimes"},
    {"quorum": 0},
    {"quorum": True},
    {"ttl_seconds": -5},
    {"four_eyes": "yes"},
    {"approvers": "U_BOB"},
    {"colour": "red"},
    {},
]


async def test_invalid_rules_and_scopes_are_refused(policies):
    for fields in INVALID_FIELDS:
        with pytest.raises(ValueError):
            await policies.set_rule(GLOBAL, "*", updated_by="U_ADMIN", **fields)
    with pytest.raises(ValueError, match="scope"):
        await policies.set_rule("C1", "*", updated_by="U_ADMIN", mode="never")
    assert await policies.list_rules() == []


async def test_groups_are_defined_replaced_and_deleted(policies):
    assert await policies.groups() == {"destructive": ["delete_file", "drop_table"]}
    await policies.define_group("destructive", ["rm_rf", "rm_rf"])
    await policies.define_group("readonly", ["list_files", "cat"])
    assert await policies.groups() == {"destructive": ["rm_rf"], "readonly": ["cat", "list_files"]}
    await policies.define_group("readonly", [])
    assert await policies.groups() == {"destructive": ["rm_rf"]}
    with pytest.raises(ValueError):
        await policies.define_group("*", ["x"])


async def test_ask_once_remembers_exact_arguments_per_scope_until_revoked(policies):
    await policies.remember_confirmation(CHANNEL, "deploy", "digest-prod", "U_BOB")
    await policies.remember_confirmation(CHANNEL, "deploy", "digest-prod", "U_CAROL")  # again: still one
    await policies.remember_confirmation(CHANNEL, "deploy", "d2", "U_BOB")
    await policies.remember_confirmation(CHANNEL, "backup", "d3", "U_BOB")
    assert await policies.is_confirmed(CHANNEL, "deploy", "digest-prod")
    assert not await policies.is_confirmed(CHANNEL, "deploy", "digest-staging")
    assert not await policies.is_confirmed(scope_channel("slack", "T1", "C2"), "deploy", "digest-prod")
    assert await policies.revoke_confirmations(CHANNEL, "deploy") == 2
    assert not await policies.is_confirmed(CHANNEL, "deploy", "digest-prod")
    assert await policies.is_confirmed(CHANNEL, "backup", "d3")
    assert await policies.revoke_confirmations(CHANNEL) == 1


async def test_a_policy_view_is_the_resolved_rule_and_the_tools_conditional_rules_of_the_channels_scopes(
    storage, policies
):
    await policies.set_rule(GLOBAL, "*", updated_by="U_ADMIN", mode="always", ttl_seconds=3600)
    await policies.set_rule(WORKSPACE, "destructive", updated_by="U_ADMIN", approvers=["U_BOB"], quorum=2)
    for scope, condition in [(GLOBAL, "env=prod"), (CHANNEL, "replicas>10"), (WORKSPACE, "env in dev,qa")]:
        await storage.conditions.set_rule(scope, "delete_file", condition, "never", updated_by="U_ADMIN", now=NOW)
    await storage.conditions.set_rule(CHANNEL, "drop_table", "env=prod", "deny", updated_by="U_ADMIN", now=NOW)
    await storage.conditions.set_rule(
        scope_channel("slack", "T1", "C2"), "delete_file", "env=qa", "deny", updated_by="U_ADMIN", now=NOW
    )
    view = await policies.view("delete_file", **WHERE)
    assert view.rule == await policies.resolve("delete_file", **WHERE)
    assert (view.rule.mode, view.rule.approvers, view.rule.quorum) == ("always", ("U_BOB",), 2)
    # Only this tool, only this channel's three scopes; in the order conditions.rules lists them.
    assert view.conditions == tuple(await storage.conditions.rules([CHANNEL, WORKSPACE, GLOBAL], "delete_file"))
    assert [(c.scope, c.condition, c.mode) for c in view.conditions] == [
        (CHANNEL, "replicas>10", "never"),
        (GLOBAL, "env=prod", "never"),
        (WORKSPACE, "env in dev,qa", "never"),
    ]
    assert view.conditions[0].updated_by == "U_ADMIN" and view.conditions[0].updated_at == NOW
    # Read afresh each time: a rule changed since the last view is in the next one.
    await policies.set_rule(CHANNEL, "delete_file", updated_by="U_ADMIN", mode="deny")
    await storage.conditions.reset_rule(GLOBAL, "delete_file", "env=prod")
    again = await policies.view("delete_file", **WHERE)
    assert again.rule.mode == "deny" and "env=prod" not in [c.condition for c in again.conditions]
    nothing = await policies.view("list_files", **WHERE)
    assert (nothing.rule.mode, nothing.rule.quorum, nothing.conditions) == ("always", None, ())


OTHER_CHANNELS = [
    {"platform": "slack", "workspace": "T1", "channel": "C2"},
    {"platform": "slack", "workspace": "T2", "channel": "C1"},
]
TOOLS = ["delete_file", "drop_table", "list_files", "deploy"]


async def _rules_everywhere(storage, policies) -> None:
    """Rules of every kind: the three scopes, names, a group, ``*``, conditional rules, and other channels' rules."""
    await policies.define_group("readonly", ["list_files"])
    await policies.set_rule(GLOBAL, "*", updated_by="U_ADMIN", mode="always", ttl_seconds=3600)
    await policies.set_rule(GLOBAL, "readonly", updated_by="U_ADMIN", mode="never")
    await policies.set_rule(WORKSPACE, "destructive", updated_by="U_ADMIN", approvers=["U_BOB"], quorum=2)
    await policies.set_rule(WORKSPACE, "deploy", updated_by="U_ADMIN", mode="once")
    await policies.set_rule(CHANNEL, "drop_table", updated_by="U_ADMIN", mode="deny")
    await policies.set_rule(CHANNEL, "*", updated_by="U_ADMIN", four_eyes=True)
    await policies.set_rule(scope_channel("slack", "T1", "C2"), "delete_file", updated_by="U_ADMIN", mode="never")
    await policies.set_rule(scope_workspace("slack", "T2"), "*", updated_by="U_ADMIN", quorum=3)
    for scope, tool_name, condition, mode in [
        (GLOBAL, "delete_file", "env=prod", "deny"),
        (CHANNEL, "delete_file", "replicas>10", "never"),
        (WORKSPACE, "deploy", "env in dev,qa", "never"),
        (scope_channel("slack", "T1", "C2"), "deploy", "x=1", "deny"),
    ]:
        await storage.conditions.set_rule(scope, tool_name, condition, mode, updated_by="U_ADMIN", now=NOW)


async def test_the_views_of_several_tools_are_each_tools_view_in_every_channel(storage, policies):
    await _rules_everywhere(storage, policies)

    for where in [WHERE, *OTHER_CHANNELS]:
        views = await policies.views([*TOOLS, "unknown_tool", "deploy"], **where)
        assert list(views) == [*TOOLS, "unknown_tool"]  # each name once, in order
        for name in [*TOOLS, "unknown_tool"]:
            assert views[name] == await policies.view(name, **where), (name, where)
    views = await policies.views(TOOLS, **WHERE)
    assert (views["drop_table"].rule.mode, views["list_files"].rule.mode, views["delete_file"].rule.quorum) == (
        "deny",
        "never",
        2,
    )
    assert [c.condition for c in views["delete_file"].conditions] == ["replicas>10", "env=prod"]
    with pytest.raises(KeyError):
        views["not_asked_for"]
    assert dict(await policies.views([], **WHERE)) == {}


async def test_a_view_is_unchanged_until_a_rule_that_decides_it_changes(storage, policies):
    await _rules_everywhere(storage, policies)
    view = (await policies.views(["delete_file"], **WHERE))["delete_file"]
    assert await policies.unchanged("delete_file", view, **WHERE)
    # Rules that do not apply here change nothing: another channel's, another tool's, a field a nearer rule sets.
    await policies.set_rule(scope_channel("slack", "T1", "C2"), "delete_file", updated_by="U_ADMIN", mode="deny")
    await policies.set_rule(CHANNEL, "list_files", updated_by="U_ADMIN", mode="deny")
    await policies.set_rule(GLOBAL, "destructive", updated_by="U_ADMIN", quorum=5)
    assert await policies.unchanged("delete_file", view, **WHERE)
    assert not await policies.unchanged("delete_file", view, platform="slack", workspace="T1", channel="C2")

    changes = [
        lambda: policies.set_rule(CHANNEL, "delete_file", updated_by="U_ADMIN", mode="deny"),
        lambda: policies.set_rule(GLOBAL, "*", updated_by="U_ADMIN", ttl_seconds=60),
        lambda: policies.set_rule(WORKSPACE, "destructive", updated_by="U_ADMIN", approvers=["U_CAROL"]),
        lambda: policies.define_group("destructive", ["drop_table"]),  # delete_file leaves the group
        lambda: storage.conditions.set_rule(WORKSPACE, "delete_file", "env=qa", "deny", updated_by="U_ADMIN", now=NOW),
        lambda: storage.conditions.reset_rule(GLOBAL, "delete_file", "env=prod"),
    ]
    for change in changes:
        await change()
        assert not await policies.unchanged("delete_file", view, **WHERE)
        view = await policies.view("delete_file", **WHERE)
        assert await policies.unchanged("delete_file", view, **WHERE)


async def test_a_batch_whose_view_changed_stores_nothing(storage, policies):
    view = await policies.view("delete_file", **WHERE)

    def recording(event: str) -> tuple[Batch, Handle[bool]]:
        batch = Batch()
        check = batch.require(stores.policies.unchanged, "delete_file", view, **WHERE)
        batch.write(stores.events.first_time, event)
        return batch, check

    assert (await storage.batches.apply(recording("paused-with-view")[0])).applied
    await policies.set_rule(CHANNEL, "delete_file", updated_by="U_ADMIN", mode="deny")
    batch, check = recording("after-the-change")
    outcome = await storage.batches.apply(batch)

    assert not outcome.applied and outcome.refused_by is check
    assert await storage.events.first_time("after-the-change")  # nothing of the refused batch was stored

"""Policies: precedence (channel > workspace > global; name > group > *), inheritance, ask-once memory."""

from __future__ import annotations

import pytest

from storage import open_storage, scope_channel, scope_global, scope_workspace

CHANNEL = scope_channel("slack", "T1", "C1")
WORKSPACE = scope_workspace("slack", "T1")
GLOBAL = scope_global()
WHERE = {"platform": "slack", "workspace": "T1", "channel": "C1"}


@pytest.fixture
def policies(tmp_path):
    storage = open_storage(tmp_path / "countersign.db")
    storage.policies.define_group("destructive", ["delete_file", "drop_table"])
    yield storage.policies
    storage.close()


def test_scope_helpers_spell_the_scopes():
    assert (GLOBAL, WORKSPACE, CHANNEL) == ("global", "workspace:slack:T1", "channel:slack:T1:C1")


def test_nothing_set_leaves_every_field_to_the_engine(policies):
    rule = policies.resolve("delete_file", **WHERE)
    assert (rule.mode, rule.approvers, rule.quorum, rule.four_eyes, rule.ttl_seconds) == (None,) * 5
    assert rule.sources == {}


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        (
            [(GLOBAL, "delete_file", "never"), (WORKSPACE, "delete_file", "once"), (CHANNEL, "delete_file", "deny")],
            "deny",
        ),
        ([(GLOBAL, "delete_file", "never"), (WORKSPACE, "delete_file", "once")], "once"),
        ([(GLOBAL, "*", "always"), (WORKSPACE, "*", "never")], "never"),
        # a broad channel rule beats a precise global one: scope first, then tool key
        ([(GLOBAL, "delete_file", "never"), (CHANNEL, "*", "always")], "always"),
    ],
)
def test_channel_beats_workspace_beats_global(policies, rules, expected):
    for scope, key, mode in rules:
        policies.set_rule(scope, key, updated_by="U_ADMIN", mode=mode)
    assert policies.resolve("delete_file", **WHERE).mode == expected


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (["*", "destructive", "delete_file"], "delete_file"),
        (["*", "destructive"], "destructive"),
        (["*"], "*"),
    ],
)
def test_within_a_scope_a_name_beats_a_group_beats_any(policies, keys, expected):
    modes = {"delete_file": "deny", "destructive": "once", "*": "never"}
    for key in keys:
        policies.set_rule(WORKSPACE, key, updated_by="U_ADMIN", mode=modes[key])
    rule = policies.resolve("delete_file", **WHERE)
    assert (rule.mode, rule.sources["mode"]) == (modes[expected], (WORKSPACE, expected))


def test_groups_only_apply_to_their_members(policies):
    policies.set_rule(GLOBAL, "destructive", updated_by="U_ADMIN", mode="always")
    assert policies.resolve("drop_table", **WHERE).mode == "always"
    assert policies.resolve("list_files", **WHERE).mode is None


def test_each_field_is_inherited_from_the_most_specific_rule_that_sets_it(policies):
    policies.set_rule(GLOBAL, "*", updated_by="U_ADMIN", mode="always", quorum=1, ttl_seconds=3600)
    policies.set_rule(WORKSPACE, "destructive", updated_by="U_ADMIN", approvers=["U_BOB", "U_CAROL"], quorum=2)
    policies.set_rule(CHANNEL, "delete_file", updated_by="U_ADMIN", four_eyes=True)
    rule = policies.resolve("delete_file", **WHERE)
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


def test_another_channel_does_not_see_a_channel_rule(policies):
    policies.set_rule(CHANNEL, "delete_file", updated_by="U_ADMIN", mode="never")
    assert policies.resolve("delete_file", platform="slack", workspace="T1", channel="C2").mode is None
    assert policies.resolve("delete_file", platform="teams", workspace="T1", channel="C1").mode is None


def test_an_empty_approver_list_is_set_not_inherited(policies):
    policies.set_rule(GLOBAL, "*", updated_by="U_ADMIN", approvers=["U_BOB"])
    policies.set_rule(CHANNEL, "*", updated_by="U_ADMIN", approvers=[])
    assert policies.resolve("delete_file", **WHERE).approvers == ()


def test_set_rule_changes_only_the_given_fields(policies):
    policies.set_rule(CHANNEL, "delete_file", updated_by="U_ADMIN", mode="always", quorum=2)
    rule = policies.set_rule(CHANNEL, "delete_file", updated_by="U_ROOT", ttl_seconds=600)
    assert (rule.mode, rule.quorum, rule.ttl_seconds, rule.updated_by) == ("always", 2, 600, "U_ROOT")
    rule = policies.set_rule(CHANNEL, "delete_file", updated_by="U_ROOT", quorum=None)
    assert (rule.mode, rule.quorum) == ("always", None)
    assert policies.get_rule(CHANNEL, "delete_file") == rule


def test_resetting_a_rule_makes_everything_inherit_again(policies):
    policies.set_rule(GLOBAL, "*", updated_by="U_ADMIN", mode="always")
    policies.set_rule(CHANNEL, "delete_file", updated_by="U_ADMIN", mode="never")
    assert policies.reset_rule(CHANNEL, "delete_file")
    assert not policies.reset_rule(CHANNEL, "delete_file")
    assert policies.resolve("delete_file", **WHERE).mode == "always"
    assert policies.get_rule(CHANNEL, "delete_file") is None


def test_rules_are_listed_by_scope(policies):
    policies.set_rule(GLOBAL, "*", updated_by="U_ADMIN", mode="always")
    policies.set_rule(CHANNEL, "deploy", updated_by="U_ADMIN", mode="once")
    policies.set_rule(CHANNEL, "backup", updated_by="U_ADMIN", mode="never")
    assert [(r.scope, r.tool_key) for r in policies.list_rules()] == [
        (CHANNEL, "backup"),
        (CHANNEL, "deploy"),
        (GLOBAL, "*"),
    ]
    assert [r.tool_key for r in policies.list_rules(CHANNEL)] == ["backup", "deploy"]


@pytest.mark.parametrize(
    "fields",
    [
        {"mode": "sometimes"},
        {"quorum": 0},
        {"quorum": True},
        {"ttl_seconds": -5},
        {"four_eyes": "yes"},
        {"approvers": "U_BOB"},
        {"colour": "red"},
        {},
    ],
)
def test_invalid_rule_fields_are_refused(policies, fields):
    with pytest.raises(ValueError):
        policies.set_rule(GLOBAL, "*", updated_by="U_ADMIN", **fields)
    assert policies.list_rules() == []


def test_invalid_scopes_are_refused(policies):
    with pytest.raises(ValueError, match="scope"):
        policies.set_rule("C1", "*", updated_by="U_ADMIN", mode="never")


def test_groups_are_defined_replaced_and_deleted(policies):
    assert policies.groups() == {"destructive": ["delete_file", "drop_table"]}
    policies.define_group("destructive", ["rm_rf"])
    policies.define_group("readonly", ["list_files", "cat"])
    assert policies.groups() == {"destructive": ["rm_rf"], "readonly": ["cat", "list_files"]}
    policies.define_group("readonly", [])
    assert policies.groups() == {"destructive": ["rm_rf"]}


def test_ask_once_remembers_exact_arguments_per_scope(policies):
    policies.remember_confirmation(CHANNEL, "deploy", "digest-prod", "U_BOB")
    assert policies.is_confirmed(CHANNEL, "deploy", "digest-prod")
    assert not policies.is_confirmed(CHANNEL, "deploy", "digest-staging")
    assert not policies.is_confirmed(scope_channel("slack", "T1", "C2"), "deploy", "digest-prod")


def test_confirmations_are_revocable(policies):
    policies.remember_confirmation(CHANNEL, "deploy", "d1", "U_BOB")
    policies.remember_confirmation(CHANNEL, "deploy", "d2", "U_BOB")
    policies.remember_confirmation(CHANNEL, "backup", "d3", "U_BOB")
    assert policies.revoke_confirmations(CHANNEL, "deploy") == 2
    assert not policies.is_confirmed(CHANNEL, "deploy", "d1")
    assert policies.is_confirmed(CHANNEL, "backup", "d3")
    assert policies.revoke_confirmations(CHANNEL) == 1

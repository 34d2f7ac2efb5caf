"""Edited parameters: coerced by schema, merged over the originals, validated, secrets kept out of errors."""

from __future__ import annotations

import json
from typing import Literal

import pytest

from bot.engine.errors import InvalidEdit
from bot.engine.params import CLEARED, merge_edit
from bot.hitl.serialization import component_from_dict, component_to_dict
from bot.hitl.ui import SimpleConsoleUI
from bot.tools import tool
from tests.fakes.typed_tools import schedule_change


@tool
def scale_service(service: str, replicas: int, dry_run: bool = False, labels: dict | None = None) -> str:
    """Scale a service.

    :param service: Unit name.
    :param replicas: How many.
    """
    return f"{service}={replicas}"


@tool
def login(api_token: Literal["abc", "def"], user: str) -> str:
    """Log in."""
    return user


def test_form_strings_are_coerced_by_the_schema_and_merged_over_the_originals():
    merged = merge_edit(
        scale_service,
        {"service": "web", "replicas": 2},
        {"replicas": "5", "dry_run": "true", "labels": '{"team": "ops"}'},
    )
    assert merged == {"service": "web", "replicas": 5, "dry_run": True, "labels": {"team": "ops"}}


def test_a_cleared_required_field_is_refused_and_a_cleared_optional_one_takes_its_default_or_goes():
    with pytest.raises(InvalidEdit) as refused:
        merge_edit(scale_service, {"service": "nginx", "replicas": 2}, {"service": CLEARED, "dry_run": "true"})
    assert set(refused.value.errors) == {"service"} and "required" in refused.value.errors["service"]

    original = {"service": "web", "replicas": 2, "dry_run": True, "labels": {"team": "ops"}}
    merged = merge_edit(scale_service, original, {"dry_run": CLEARED, "labels": CLEARED})
    assert merged["dry_run"] is False  # the schema's default
    assert merged.get("labels") is None  # default None (or removed): never the old value


def test_a_value_of_the_wrong_type_is_refused_by_field():
    with pytest.raises(InvalidEdit) as refused:
        merge_edit(scale_service, {"service": "web", "replicas": 2}, {"replicas": "many"})
    assert set(refused.value.errors) == {"replicas"}


def test_an_unknown_parameter_is_refused():
    with pytest.raises(InvalidEdit) as refused:
        merge_edit(scale_service, {"service": "web", "replicas": 2}, {"force": "yes"})
    assert "force" in refused.value.errors


def test_an_invalid_secret_value_is_not_echoed_in_the_error():
    with pytest.raises(InvalidEdit) as refused:
        merge_edit(login, {"api_token": "abc", "user": "ana"}, {"api_token": "hunter2-secret"})
    assert "hunter2-secret" not in str(refused.value)
    assert "hunter2-secret" not in refused.value.errors["api_token"]


# --- rich types: dates, enums, dataclasses, models ----------------------------------------------------

SCHEDULED = {
    "change": {"title": "Upgrade", "window": {"start": "2026-12-01T22:00:00Z"}},
    "owner": {"name": "Ana", "email": "ana@example.com"},
    "on": "2026-11-30",
}


def test_a_form_date_is_accepted_and_stays_json_in_the_merged_params():
    merged = merge_edit(schedule_change, SCHEDULED, {"on": " 2026-12-01 ", "severity": "high"})

    assert merged["on"] == "2026-12-01"
    assert merged["severity"] == "high"
    assert json.loads(json.dumps(merged)) == merged  # storable and digestible as it is


def test_a_form_value_that_is_no_date_gets_a_per_field_error():
    with pytest.raises(InvalidEdit) as refused:
        merge_edit(schedule_change, SCHEDULED, {"on": "not-a-date"})

    assert set(refused.value.errors) == {"on"}
    assert "date" in refused.value.errors["on"]


def test_an_enum_edit_outside_its_values_is_refused():
    with pytest.raises(InvalidEdit) as refused:
        merge_edit(schedule_change, SCHEDULED, {"severity": "apocalyptic"})

    assert set(refused.value.errors) == {"severity"}


def test_a_model_field_is_edited_as_json_and_checked_inside():
    merged = merge_edit(
        schedule_change, SCHEDULED, {"change": '{"title": "Rollback", "window": {"start": "2026-12-02T01:00:00Z"}}'}
    )
    assert merged["change"]["title"] == "Rollback"

    with pytest.raises(InvalidEdit) as refused:
        merge_edit(schedule_change, SCHEDULED, {"change": '{"title": "Rollback", "window": {"start": "soon"}}'})
    assert set(refused.value.errors) == {"change"}
    assert "window.start" in refused.value.errors["change"]


# --- the console UI's per-field edit, typed by the tool's schema ---------------------------------------


class Keys:
    """Answers the console UI's prompts from a list, recording every prompt."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.answers.pop(0)


def test_the_console_ui_re_asks_a_field_until_it_is_a_date(capsys):
    # m; change and owner kept (Enter); on: a bad value, then a good one; the dialog ends there
    keys = Keys(["m", "", "", "not-a-date", "2026-12-01"])
    ui = SimpleConsoleUI(input_func=keys, tools=[schedule_change])

    answer = ui.get_user_confirmation("schedule_change", "Schedule a change.", SCHEDULED)

    assert answer.action == "modify"
    assert answer.new_tool_params == {"on": "2026-12-01"}
    assert "Invalid value for 'on'" in capsys.readouterr().out
    assert keys.answers == []


def test_the_console_ui_reads_a_model_field_as_json_and_refuses_a_bad_inner_date(capsys):
    bad = '{"title": "Rollback", "window": {"start": "soon"}}'
    good = '{"title": "Rollback", "window": {"start": "2026-12-02T01:00:00Z"}}'
    keys = Keys(["m", bad, good, "", ""])
    ui = SimpleConsoleUI(input_func=keys, tools=[schedule_change])

    answer = ui.get_user_confirmation("schedule_change", "Schedule a change.", SCHEDULED)

    assert answer.new_tool_params == {"change": json.loads(good)}
    assert "window.start" in capsys.readouterr().out
    assert keys.answers == []


def test_the_console_ui_keeps_its_tools_through_serialisation():
    ui = SimpleConsoleUI(tools=[schedule_change])

    rebuilt = component_from_dict(component_to_dict(ui))

    assert isinstance(rebuilt, SimpleConsoleUI)
    assert component_to_dict(rebuilt) == component_to_dict(ui)
    assert component_to_dict(SimpleConsoleUI())["init_parameters"] == {}


def test_the_console_ui_with_tools_still_empties_a_text_field_with_quotes():
    keys = Keys(["m", '""', ""])
    ui = SimpleConsoleUI(input_func=keys, tools=[scale_service])

    answer = ui.get_user_confirmation("scale_service", "Scale a service.", {"service": "web"})

    assert answer.new_tool_params == {"service": ""}

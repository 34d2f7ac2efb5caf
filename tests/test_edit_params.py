"""Edited parameters: coerced by schema, merged over the originals, validated, secrets kept out of errors."""

from __future__ import annotations

from typing import Literal

import pytest

from bot.engine.errors import InvalidEdit
from bot.engine.params import merge_edit
from bot.tools import tool


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

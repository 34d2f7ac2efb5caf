"""The @tool decorator, Tool, Toolset and the helpers the agent relies on."""

from __future__ import annotations

import asyncio
import enum
import json
import threading
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Annotated, Any, Literal, Optional

import pytest

from bot.tools import (
    InvalidToolArguments,
    Tool,
    Toolset,
    flatten_tools,
    import_attribute,
    parse_docstring,
    tool,
    tools_fingerprint,
)
from tests.fakes.typed_tools import RECEIVED, Change, Label, Window, book_window, plant_tree, schedule_change
from tests.fakes.typed_tools import Severity as RichSeverity


class Severity(enum.Enum):
    LOW = "low"
    HIGH = "high"


@tool
def restart_service(service: str, force: bool = False, timeout: float = 30.0, retries: int = 2) -> str:
    """Restart a systemd service.

    :param service: Unit name, e.g. nginx.
    :param force: Kill the process if it does not stop.
    :param timeout: Seconds to wait for the unit to stop.
        After that, the restart fails.
    :returns: The new status.
    """
    return f"{service} restarted (force={force})"


@tool
async def fetch_logs(service: str, lines: int = 50) -> str:
    """Fetch recent log lines of a service.

    Args:
        service: Unit name.
        lines (int): How many lines to return,
            counted from the end.

    Returns:
        The log lines.
    """
    await asyncio.sleep(0)
    return f"{lines} lines of {service}"


def schema_of(fn: Any) -> dict[str, Any]:
    return tool(fn).parameters


# --- schema from type hints ----------------------------------------------------------------------


def test_scalar_hints_become_json_types_and_params_without_defaults_are_required() -> None:
    def f(name: str, count: int, ratio: float, enabled: bool) -> None:
        """Scalars."""

    assert schema_of(f) == {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "enabled": {"type": "boolean"},
        },
        "required": ["name", "count", "ratio", "enabled"],
    }


def test_defaults_are_recorded_and_make_a_param_optional() -> None:
    def f(path: str, limit: int = 10, tags: list[str] | None = None, mode: str = "fast") -> None:
        """Defaults."""

    schema = schema_of(f)

    assert schema["required"] == ["path"]
    assert schema["properties"]["limit"] == {"type": "integer", "default": 10}
    assert schema["properties"]["mode"] == {"type": "string", "default": "fast"}
    assert schema["properties"]["tags"]["default"] is None


def test_a_function_without_required_params_has_no_required_list() -> None:
    def f(verbose: bool = False) -> None:
        """Nothing required."""

    assert "required" not in schema_of(f)


def test_lists_and_dicts_become_arrays_and_objects() -> None:
    def f(names: list[str], matrix: list[list[int]], anything: list, labels: dict[str, int], config: dict) -> None:
        """Containers."""

    props = schema_of(f)["properties"]

    assert props["names"] == {"type": "array", "items": {"type": "string"}}
    assert props["matrix"] == {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}
    assert props["anything"] == {"type": "array"}
    assert props["labels"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert props["config"] == {"type": "object"}


def test_optional_allows_null() -> None:
    def f(limit: Optional[int], offset: int | None = None) -> None:  # noqa: UP045 - both spellings on purpose
        """Optional."""

    props = schema_of(f)["properties"]

    assert props["limit"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert props["offset"] == {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}


def test_literal_becomes_an_enum_of_its_values() -> None:
    def f(level: Literal["debug", "info"], code: Literal[1, 2, 3]) -> None:
        """Literals."""

    props = schema_of(f)["properties"]

    assert props["level"] == {"enum": ["debug", "info"], "type": "string"}
    assert props["code"] == {"enum": [1, 2, 3], "type": "integer"}


def test_an_enum_becomes_its_values_and_an_enum_default_its_value() -> None:
    def f(severity: Severity = Severity.LOW) -> None:
        """Enums."""

    assert schema_of(f)["properties"]["severity"] == {"enum": ["low", "high"], "type": "string", "default": "low"}


def test_annotated_strings_describe_the_param() -> None:
    def f(service: Annotated[str, "The systemd unit to restart"], count: Annotated[int, "How many"] = 1) -> None:
        """Annotated."""

    props = schema_of(f)["properties"]

    assert props["service"] == {"type": "string", "description": "The systemd unit to restart"}
    assert props["count"] == {"type": "integer", "description": "How many", "default": 1}


def test_an_unannotated_param_accepts_anything() -> None:
    def f(value) -> None:  # noqa: ANN001
        """Untyped."""

    assert schema_of(f)["properties"]["value"] == {}


def test_var_args_and_kwargs_are_not_params() -> None:
    def f(path: str, *args: str, **kwargs: Any) -> None:
        """Varargs."""

    assert list(schema_of(f)["properties"]) == ["path"]


def test_an_unsupported_type_is_refused_when_the_tool_is_built() -> None:
    def f(when: threading.Event) -> None:
        """Unsupported."""

    with pytest.raises(TypeError, match="Unsupported parameter type"):
        tool(f)


def test_params_read_from_state_are_hidden_from_the_llm() -> None:
    def f(path: str, user_id: str) -> None:
        """State input."""

    built = tool(inputs_from_state={"current_user": "user_id"})(f)

    assert list(built.parameters["properties"]) == ["path"]
    assert built.parameters["required"] == ["path"]
    assert built.inputs_from_state == {"current_user": "user_id"}


# --- descriptions from docstrings ----------------------------------------------------------------


def test_rest_docstrings_describe_the_tool_and_each_param() -> None:
    props = restart_service.parameters["properties"]

    assert restart_service.description == "Restart a systemd service."
    assert props["service"]["description"] == "Unit name, e.g. nginx."
    assert props["force"]["description"] == "Kill the process if it does not stop."
    assert props["timeout"]["description"] == "Seconds to wait for the unit to stop. After that, the restart fails."
    assert "description" not in props["retries"]


def test_google_docstrings_describe_the_tool_and_each_param() -> None:
    props = fetch_logs.parameters["properties"]

    assert fetch_logs.description == "Fetch recent log lines of a service."
    assert props["service"]["description"] == "Unit name."
    assert props["lines"]["description"] == "How many lines to return, counted from the end."


def test_a_multi_line_summary_is_joined_into_one_description() -> None:
    summary, params = parse_docstring("Delete a file\nin the sandbox.\n\n:param path: Relative path.")

    assert summary == "Delete a file in the sandbox."
    assert params == {"path": "Relative path."}


def test_typed_rest_params_are_read_and_type_lines_do_not_leak_into_the_description() -> None:
    summary, params = parse_docstring(
        "Copy files.\n\n"
        ":param list[str] sources: Paths to copy.\n"
        ":type sources: list\n"
        ":param dict[str, int] limits: Per-path limits.\n"
        ":param str dst: Target folder.\n"
    )

    assert summary == "Copy files."
    assert params == {"sources": "Paths to copy.", "limits": "Per-path limits.", "dst": "Target folder."}


def test_a_function_without_docstring_is_described_by_its_name() -> None:
    def purge_cache(region: str) -> None:
        return None

    built = tool(purge_cache)

    assert built.description == "purge_cache"
    assert "description" not in built.parameters["properties"]["region"]


def test_name_and_description_can_be_overridden() -> None:
    def f(x: int) -> int:
        """Original description."""
        return x

    built = tool(name="double_check", description="Check twice.")(f)

    assert (built.name, built.description) == ("double_check", "Check twice.")
    assert built.tool_spec == {
        "type": "function",
        "function": {"name": "double_check", "description": "Check twice.", "parameters": built.parameters},
    }


def test_the_decorator_works_with_empty_parentheses() -> None:
    @tool()
    def ping() -> str:
        """Ping."""
        return "pong"

    assert isinstance(ping, Tool)
    assert ping.invoke() == "pong"


# --- invoking ------------------------------------------------------------------------------------


def test_a_sync_tool_is_invoked_with_keyword_arguments() -> None:
    assert restart_service.is_async is False
    assert restart_service.invoke(service="nginx", force=True) == "nginx restarted (force=True)"


def test_an_async_tool_can_be_invoked_from_sync_code() -> None:
    assert fetch_logs.is_async is True
    assert fetch_logs.invoke(service="nginx", lines=5) == "5 lines of nginx"


async def test_an_async_tool_can_be_invoked_from_sync_code_inside_a_running_loop() -> None:
    assert fetch_logs.invoke(service="nginx") == "50 lines of nginx"


async def test_invoke_async_awaits_an_async_tool() -> None:
    assert await fetch_logs.invoke_async(service="redis", lines=1) == "1 lines of redis"


async def test_invoke_async_runs_a_sync_tool_off_the_event_loop_thread() -> None:
    def where() -> int:
        """Which thread runs me."""
        return threading.get_ident()

    assert await tool(where).invoke_async() != threading.get_ident()


# --- validation ----------------------------------------------------------------------------------


def test_valid_arguments_pass_validation() -> None:
    restart_service.validate({"service": "nginx", "force": True, "timeout": 5})


def test_validation_errors_are_reported_per_field() -> None:
    with pytest.raises(InvalidToolArguments) as caught:
        restart_service.validate({"force": "yes", "retries": 1.5})

    err = caught.value
    assert err.tool_name == "restart_service"
    assert set(err.errors) == {"service", "force", "retries"}
    assert "required" in err.errors["service"]
    assert "boolean" in err.errors["force"]
    assert "integer" in err.errors["retries"]
    assert str(err).startswith("Invalid parameters for tool 'restart_service': ")
    assert isinstance(err, ValueError)


def test_an_enum_param_refuses_a_value_outside_the_enum() -> None:
    def f(severity: Severity) -> None:
        """Enum."""

    with pytest.raises(InvalidToolArguments) as caught:
        tool(f).validate({"severity": "urgent"})

    assert list(caught.value.errors) == ["severity"]


def test_an_unexpected_argument_is_reported_under_its_own_name_when_the_schema_forbids_it() -> None:
    strict = Tool(
        name="strict",
        description="Strict.",
        parameters={"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False},
        function=lambda a: a,
    )

    with pytest.raises(InvalidToolArguments) as caught:
        strict.validate({"a": "x", "b": 1})

    assert list(caught.value.errors) == ["b"]


@pytest.mark.parametrize("name", ["", "has space", "dots.not.allowed", "a" * 65, "emoji_🙂"])
def test_invalid_tool_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="must be 1-64 letters"):
        Tool(name=name, description="x", parameters={"type": "object", "properties": {}}, function=lambda: None)


def test_an_invalid_schema_is_refused() -> None:
    import jsonschema

    with pytest.raises(jsonschema.SchemaError):
        Tool(name="bad", description="x", parameters={"type": "no-such-type"}, function=lambda: None)


# --- toolsets and helpers ------------------------------------------------------------------------


def test_a_toolset_iterates_counts_and_contains_tools_by_object_or_name() -> None:
    toolset = Toolset([restart_service])
    toolset.add(fetch_logs)

    assert list(toolset) == [restart_service, fetch_logs]
    assert len(toolset) == 2
    assert restart_service in toolset
    assert "fetch_logs" in toolset
    assert "delete_file" not in toolset


def test_flatten_tools_expands_toolsets_in_order() -> None:
    def other() -> None:
        """Other."""

    extra = tool(other)

    assert flatten_tools([Toolset([restart_service, fetch_logs]), extra]) == [restart_service, fetch_logs, extra]
    assert flatten_tools(None) == []


def test_flatten_tools_refuses_duplicate_names_across_toolsets() -> None:
    def restart_service() -> None:
        """Another tool with the same name."""

    with pytest.raises(ValueError, match="Duplicate tool names: restart_service"):
        flatten_tools([Toolset([globals()["restart_service"]]), tool(restart_service)])


def test_the_fingerprint_is_stable_and_ignores_order() -> None:
    assert tools_fingerprint([restart_service, fetch_logs]) == tools_fingerprint([fetch_logs, restart_service])


def test_the_fingerprint_changes_when_a_schema_changes() -> None:
    def restart_service(service: str, force: bool = False, timeout: float = 30.0, retries: int = 2) -> str:
        """Restart a systemd service, with a new description but the same parameters."""
        return service

    def restart_service_v2(service: str, force: bool = False, timeout: int = 30, retries: int = 2) -> str:
        """Restart a systemd service."""
        return service

    reworded = tool(restart_service)
    retyped = tool(name="restart_service")(restart_service_v2)

    assert tools_fingerprint([reworded]) == tools_fingerprint([tool(restart_service)])
    assert tools_fingerprint([reworded]) != tools_fingerprint([retyped])


def test_the_fingerprint_changes_when_a_tool_is_added_or_renamed() -> None:
    base = tools_fingerprint([restart_service])

    assert tools_fingerprint([restart_service, fetch_logs]) != base
    assert tools_fingerprint([tool(name="restart_unit")(restart_service.function)]) != base


# --- serialisation -------------------------------------------------------------------------------


def test_a_module_level_decorated_tool_round_trips_through_json() -> None:
    data = json.loads(json.dumps(restart_service.to_dict()))

    restored = Tool.from_dict(data)

    assert data["type"] == "bot.tools.Tool"
    assert data["init_parameters"]["function"] == "tests.unit.bot.test_tools:restart_service"
    assert restored.name == restart_service.name
    assert restored.parameters == restart_service.parameters
    assert restored.invoke(service="nginx") == "nginx restarted (force=False)"


def test_a_toolset_round_trips_with_its_tools() -> None:
    restored = Toolset.from_dict(json.loads(json.dumps(Toolset([restart_service, fetch_logs]).to_dict())))

    assert [t.name for t in restored] == ["restart_service", "fetch_logs"]
    assert restored.tools[1].invoke(service="db", lines=2) == "2 lines of db"


def test_import_attribute_reads_module_colon_attribute_paths() -> None:
    assert import_attribute("json:dumps") is json.dumps
    assert import_attribute("tests.unit.bot.test_tools:Severity.HIGH") is Severity.HIGH
    with pytest.raises(ValueError, match="module:attribute"):
        import_attribute("json.dumps")


# --- rich parameter types (Pydantic): datetime, date, Enum, TypedDict, dataclass, model ---------------


def test_dates_and_datetimes_become_formatted_strings() -> None:
    props = book_window.parameters["properties"]

    assert props["at"] == {
        "anyOf": [{"format": "date-time", "type": "string"}, {"type": "null"}],
        "description": "When to announce it.",
        "default": None,
    }
    assert props["day"] == {"format": "date", "type": "string", "description": "The day.", "default": "2026-12-01"}


def test_dataclasses_typed_dicts_and_models_become_inline_objects_with_docstring_descriptions() -> None:
    props = schedule_change.parameters["properties"]

    assert props["owner"] == {
        "type": "object",
        "properties": {"name": {"type": "string"}, "email": {"type": "string"}},
        "required": ["name", "email"],
        "description": "Who answers for it.",
    }
    change = props["change"]
    assert change["description"] == "What changes, and when."
    assert change["properties"]["title"] == {"type": "string", "description": "Short summary"}
    assert change["properties"]["severity"] == {"enum": ["low", "high"], "type": "string", "default": "low"}
    assert change["properties"]["window"]["properties"]["start"] == {"format": "date-time", "type": "string"}
    assert change["required"] == ["title", "window"]
    assert "$defs" not in schedule_change.parameters
    assert "title" not in json.dumps(props["owner"])  # Pydantic's generated titles are dropped


def test_a_recursive_model_keeps_its_definition_at_the_root_of_the_schema() -> None:
    schema = plant_tree.parameters

    assert schema["properties"]["root"]["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}
    assert set(schema["$defs"]) == {"Node"}
    plant_tree.validate({"root": {"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]}})
    with pytest.raises(InvalidToolArguments):
        plant_tree.validate({"root": {"name": "a", "children": [{"children": []}]}})


@pytest.mark.parametrize("typed_tool", [schedule_change, book_window, plant_tree], ids=lambda t: t.name)
def test_rich_schemas_are_json_and_valid_openai_tool_definitions(typed_tool: Tool) -> None:
    spec = json.loads(json.dumps(typed_tool.tool_spec))

    assert spec["function"]["parameters"]["type"] == "object"
    Tool(name="copy", description="d", parameters=spec["function"]["parameters"], function=lambda **kw: kw)
    assert tools_fingerprint([typed_tool]) == tools_fingerprint([Tool.from_dict(typed_tool.to_dict())])


def test_the_function_receives_real_typed_values() -> None:
    RECEIVED.clear()
    arguments = {
        "change": {"title": "Upgrade", "severity": "high", "window": {"start": "2026-12-01T22:00:00Z"}},
        "owner": {"name": "Ana", "email": "ana@example.com"},
        "on": "2026-12-01",
        "severity": "high",
    }
    schedule_change.validate(arguments)

    assert schedule_change.invoke(**arguments) == "Upgrade on 2026-12-01"

    [got] = RECEIVED
    assert got["on"] == date(2026, 12, 1)
    assert got["severity"] is RichSeverity.HIGH
    assert isinstance(got["change"], Change) and got["change"].severity is RichSeverity.HIGH
    assert isinstance(got["change"].window, Window)
    assert got["change"].window.start == datetime(2026, 12, 1, 22, 0, tzinfo=UTC)
    assert got["owner"] == {"name": "Ana", "email": "ana@example.com"}


async def test_invoke_async_converts_too_and_a_default_stays_a_python_value() -> None:
    RECEIVED.clear()

    await book_window.invoke_async(window={"start": "2026-12-01T22:00:00+01:00", "minutes": 45})

    [got] = RECEIVED
    assert got["window"] == Window(datetime(2026, 12, 1, 22, 0, tzinfo=timezone(timedelta(hours=1))), 45)
    assert got["day"] == date(2026, 12, 1) and got["at"] is None


def test_values_that_do_not_convert_are_reported_per_field_without_the_value() -> None:
    with pytest.raises(InvalidToolArguments) as refused:
        schedule_change.validate(
            {
                "change": {"title": "x", "window": {"start": "half past nine"}},
                "owner": {"name": "Ana", "email": "a@b"},
                "on": "not-a-date",
            }
        )

    assert set(refused.value.errors) == {"on", "change"}
    assert "date" in refused.value.errors["on"]
    assert refused.value.errors["change"].startswith("window.start:")
    assert "half past nine" not in str(refused.value) and "not-a-date" not in str(refused.value)


def test_an_enum_param_now_reaches_the_function_as_its_member() -> None:
    received: list[object] = []

    @tool
    def triage(severity: Severity) -> str:
        """Triage."""
        received.append(severity)
        return "ok"

    triage.invoke(severity="low")

    assert received == [Severity.LOW]


def test_a_typing_typed_dict_works_on_python_3_11_too() -> None:
    @tool
    def tag(label: Label) -> dict:
        """Tag."""
        return dict(label)

    assert tag.parameters["properties"]["label"] == {
        "type": "object",
        "properties": {"key": {"type": "string"}, "value": {"type": "string"}},
    }
    assert tag.invoke(label={"key": "team"}) == {"key": "team"}


def test_a_default_without_a_json_form_is_left_out_of_the_schema_and_still_applied() -> None:
    odd = Window(start=object(), minutes=45)  # type: ignore[arg-type]  # no JSON form for the start

    @tool
    def plan(window: Window = odd) -> str:
        """Plan a window.

        :param window: When.
        """
        return str(window.minutes)

    assert "default" not in plan.parameters["properties"]["window"]
    assert "window" not in plan.parameters.get("required", [])
    assert plan.invoke() == "45"

"""A question's form: the fields of a flat elicitation schema, and the values a person typed checked against it."""

from __future__ import annotations

import pytest

from bot.engine.errors import InvalidAnswer
from bot.engine.questions import checked_values, form_fields

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "description": "Your name"},
        "count": {"type": "integer", "minimum": 1, "maximum": 5, "default": 2},
        "ratio": {"type": "number"},
        "ok": {"type": "boolean", "default": False},
        "pet": {"type": "string", "enum": ["p1", "p2"], "enumNames": ["Cats", "Dogs"]},
        "hero": {"type": "string", "oneOf": [{"const": "h1", "title": "Superman"}]},
        "fish": {"type": "array", "items": {"anyOf": [{"const": "f1", "title": "Tuna"}, {"const": "f2"}]}},
    },
    "required": ["name", "count"],
}


def test_every_kind_of_field_is_read_in_the_schemas_order():
    fields = {f.name: f for f in form_fields(SCHEMA)}
    assert list(fields) == ["name", "count", "ratio", "ok", "pet", "hero", "fish"]
    assert (fields["name"].title, fields["name"].description, fields["name"].required) == ("Name", "Your name", True)
    assert (fields["count"].kind, fields["count"].default, fields["count"].title) == ("integer", 2, "count")
    assert (fields["ratio"].kind, fields["ok"].kind) == ("number", "boolean")
    assert fields["pet"].choices == (("p1", "Cats"), ("p2", "Dogs"))
    assert fields["hero"].choices == (("h1", "Superman"),)
    assert (fields["fish"].kind, fields["fish"].choices) == ("array", (("f1", "Tuna"), ("f2", "f2")))


def test_typed_values_are_coerced_by_the_schema():
    values = {"name": "Ana", "count": "3", "ratio": "0.5", "ok": "true", "pet": "p2", "fish": ["f1"]}
    assert checked_values(SCHEMA, values) == {
        "name": "Ana",
        "count": 3,
        "ratio": 0.5,
        "ok": True,
        "pet": "p2",
        "fish": ["f1"],
    }


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"count": "3"}, "name"),  # required, missing
        ({"name": "Ana", "count": "9"}, "count"),  # past the maximum
        ({"name": "Ana", "count": "two"}, "count"),  # not a number
        ({"name": "Ana", "count": "1", "pet": "p9"}, "pet"),  # not a choice
        ({"name": "Ana", "count": "1", "ok": "maybe"}, "ok"),
        ({"name": "Ana", "count": None}, "count"),  # required, left empty
    ],
)
def test_a_bad_value_is_refused_naming_its_field(values, field):
    with pytest.raises(InvalidAnswer) as refused:
        checked_values(SCHEMA, values)
    assert set(refused.value.errors) == {field}
    assert str(refused.value).startswith("Some answers are not valid:")


def test_an_optional_field_left_empty_is_left_out():
    assert checked_values(SCHEMA, {"name": "Ana", "count": "1", "ratio": None}) == {"name": "Ana", "count": 1}

"""``form_answer``: SEP-1034 defaults and schema checks of an elicitation answer. Pure."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik._json import JsonObject, JsonValue
from agentik.agent import ElicitationError, form_answer

_KINDS: dict[str, st.SearchStrategy[JsonValue]] = {
    "string": st.text(max_size=5),
    "integer": st.integers(-5, 5),
    "number": st.floats(-5, 5, allow_nan=False),
    "boolean": st.booleans(),
}


@st.composite
def questions(draw: st.DrawFn) -> tuple[JsonObject, JsonObject]:
    """A flat form schema (some fields with defaults, some required) and an answer
    giving a subset of the fields with values of the right type."""
    names = draw(st.lists(st.sampled_from("abcdefg"), unique=True, min_size=1, max_size=5))
    properties: dict[str, JsonValue] = {}
    content: dict[str, JsonValue] = {}
    required: list[JsonValue] = []
    for name in names:
        kind = draw(st.sampled_from(sorted(_KINDS)))
        field: dict[str, JsonValue] = {"type": kind}
        if draw(st.booleans()):
            field["default"] = draw(_KINDS[kind])
        elif draw(st.booleans()):
            required.append(name)
        properties[name] = field
        if name in required or draw(st.booleans()):
            content[name] = draw(_KINDS[kind])
    return {"type": "object", "properties": properties, "required": required}, content


class TestFormAnswer:
    @settings(max_examples=200, deadline=None)
    @given(questions())
    def test_given_fields_stay_and_defaults_fill_the_rest(
        self, question: tuple[JsonObject, JsonObject]
    ) -> None:
        """Every given value is kept; every left-out field with a default gets it; nothing
        else is added; the input is not changed."""
        schema, content = question
        before = copy.deepcopy(content)
        answer = form_answer(schema, content)
        assert content == before
        properties = schema["properties"]
        assert isinstance(properties, dict)
        for name, field in properties.items():
            assert isinstance(field, dict)
            if name in content:
                assert answer[name] == content[name]
            elif "default" in field:
                assert answer[name] == field["default"]
            else:
                assert name not in answer

    @settings(max_examples=100, deadline=None)
    @given(questions(), st.sampled_from([[1], {"x": 1}, None]))
    def test_a_value_of_the_wrong_type_is_refused(
        self, question: tuple[JsonObject, JsonObject], wrong: JsonValue
    ) -> None:
        """A list, object or null where the schema wants a scalar: ElicitationError naming
        the field, code ``invalid``."""
        schema, content = question
        name = next(iter(schema["properties"]))  # type: ignore[arg-type]
        with pytest.raises(ElicitationError, match=rf"^{name}: ") as error:
            form_answer(schema, {**content, name: wrong})
        assert error.value.code == "invalid"

    def test_accept_with_nothing_means_the_defaults(self) -> None:
        schema: JsonObject = {
            "type": "object",
            "properties": {"n": {"type": "integer", "default": 3}, "s": {"type": "string"}},
        }
        assert form_answer(schema, None) == {"n": 3}

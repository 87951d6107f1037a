"""parse_arguments: malformed JSON and schema violations become ToolErrors naming the field."""

from __future__ import annotations

import pytest

from agentik import ToolError
from agentik._json import JsonObject
from agentik.toolsets import NamedTool, parse_arguments
from agentik.toolsets._arguments import validator_for
from agentik.toolsets._closures import applies


def schema_tool(parameters: JsonObject, name: str = "t") -> NamedTool:
    async def handler(arguments: JsonObject) -> str:
        return "ran"

    return NamedTool(name, "a tool", parameters, handler)


POINT: JsonObject = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
    "required": ["x", "y"],
    "additionalProperties": False,
}
SHAPE = schema_tool(
    {
        "type": "object",
        "properties": {
            "label": {"type": "string", "minLength": 1, "maxLength": 5},
            "color": {"enum": ["red", "green"]},
            "kind": {"const": "shape"},
            "scale": {"type": "number", "minimum": 0, "exclusiveMaximum": 10},
            "points": {"type": "array", "items": {"$ref": "#/$defs/Point"}, "maxItems": 3},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "code": {"type": "string", "pattern": "^[a-z]+$"},
            "tags": {"type": "object", "additionalProperties": {"type": "boolean"}},
            "exact": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
        },
        "required": ["label"],
        "additionalProperties": False,
        "$defs": {"Point": POINT},
    },
    name="shape",
)
VIA_JSONSCHEMA = schema_tool({**SHAPE.parameters, "x-vendor": True}, name="shape")


class TestParsing:
    def test_valid_arguments_come_back_as_a_dict(self) -> None:
        """A valid object is returned as parsed."""
        raw = (
            '{"label": "sq", "color": "red", "kind": "shape", "scale": 2.5, '
            '"points": [{"x": 1, "y": 2.0}], "note": null, "code": "ab", "tags": {"a": true}}'
        )
        assert parse_arguments(SHAPE, raw)["points"] == [{"x": 1, "y": 2.0}]

    @pytest.mark.parametrize("raw", ["", "  \n"])
    def test_empty_text_is_an_empty_object(self, raw: str) -> None:
        """Some models send '' for a tool without parameters."""
        assert parse_arguments(schema_tool({"type": "object"}), raw) == {}

    def test_malformed_json_names_the_problem_and_position(self) -> None:
        """The JSON error and where it happened are in the message."""
        with pytest.raises(
            ToolError,
            match=r"^arguments of tool 'shape' are not valid JSON: Expecting property name "
            r"enclosed in double quotes at line 1 column 2$",
        ):
            parse_arguments(SHAPE, "{label: 1}")

    def test_nan_is_not_json(self) -> None:
        """Python's json accepts NaN; JSON does not."""
        with pytest.raises(ToolError, match=r"^arguments of tool 'shape' are not valid JSON: NaN"):
            parse_arguments(SHAPE, '{"label": "a", "scale": NaN}')

    def test_not_an_object(self) -> None:
        """Arguments are an object, never an array or scalar."""
        with pytest.raises(
            ToolError,
            match=r"^arguments of tool 'shape' must be a JSON object, got an array \[1\]$",
        ):
            parse_arguments(SHAPE, "[1]")

    def test_deep_nesting_is_an_error_not_a_crash(self) -> None:
        """A pathological payload is refused with a ToolError."""
        with pytest.raises(ToolError, match=r"^arguments of tool 'shape'"):
            parse_arguments(SHAPE, "[" * 100_000 + "]" * 100_000)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{}", "field 'label' is required"),
        ('{"label": 3}', "field 'label' must be a string, got a number 3"),
        ('{"label": ""}', "field 'label' must have at least 1 characters, got 0"),
        ('{"label": "abcdef"}', "field 'label' must have at most 5 characters, got 6"),
        ('{"label": "a", "colour": "red"}', "field 'colour' is not an accepted field; accepted:"),
        ('{"label": "a", "color": "blue"}', 'field \'color\' must be one of "red", "green", got'),
        ('{"label": "a", "kind": "circle"}', "field 'kind' must be \"shape\", got a string"),
        ('{"label": "a", "scale": -1}', "field 'scale' must be >= 0, got a number -1"),
        ('{"label": "a", "scale": 10}', "field 'scale' must be < 10, got a number 10"),
        ('{"label": "a", "scale": true}', "field 'scale' must be a number, got a boolean true"),
        ('{"label": "a", "points": [{"x": 1}]}', "field 'points[0].y' is required"),
        (
            '{"label": "a", "points": [{"x": 1, "y": 2}, {"x": 1.5, "y": 2}]}',
            "field 'points[1].x' must be an integer, got a number 1.5",
        ),
        ('{"label": "a", "points": [{"x": 1, "y": 2, "z": 3}]}', "field 'points[0].z' is not an"),
        ('{"label": "a", "points": {}}', "must be an array, got an object {}"),
        (
            '{"label": "a", "points": [{"x":1,"y":1},{"x":1,"y":1},{"x":1,"y":1},{"x":1,"y":1}]}',
            "field 'points' must have at most 3 items, got 4",
        ),
        ('{"label": "a", "note": 5}', "field 'note' must be a string or null, got a number 5"),
        ('{"label": "a", "code": "AB"}', "field 'code' must match the pattern '^[a-z]+$'"),
        ('{"label": "a", "tags": {"x": 1}}', "field 'tags.x' must be a boolean, got a number 1"),
        ('{"label": "a", "exact": 2}', "field 'exact' matches more than one of the allowed forms"),
    ],
)
@pytest.mark.parametrize("engine", ["closures", "jsonschema"])
def test_schema_violations_name_the_field(raw: str, message: str, engine: str) -> None:
    """Each rule names the bad field and the expectation, in the same words whichever
    engine checks it (an unknown keyword sends the same schema to jsonschema)."""
    tool = SHAPE if engine == "closures" else VIA_JSONSCHEMA
    assert applies(tool.parameters, ref_siblings_apply=True) is (engine == "closures")
    with pytest.raises(ToolError) as caught:
        parse_arguments(tool, raw)
    text = str(caught.value)
    assert text.startswith("invalid arguments for tool 'shape': ")
    assert message in text


class TestValidator:
    def test_compiled_once_per_tool(self) -> None:
        """The validator is cached per tool, so the common case does not recompile."""
        tool = schema_tool({"type": "object"})
        assert validator_for(tool) is validator_for(tool)

    def test_recursive_ref(self) -> None:
        """A schema that refers to itself validates nested data to any depth."""
        tree = schema_tool(
            {
                "$ref": "#/$defs/Node",
                "$defs": {
                    "Node": {
                        "type": "object",
                        "properties": {
                            "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}
                        },
                        "additionalProperties": False,
                    }
                },
            }
        )
        assert parse_arguments(tree, '{"kids": [{"kids": [{}]}]}')
        with pytest.raises(ToolError, match=r"field 'kids\[0\].kids\[0\].x' is not an accepted"):
            parse_arguments(tree, '{"kids": [{"kids": [{"x": 1}]}]}')

    def test_dangling_ref_is_a_tool_error(self) -> None:
        """A schema that cannot be compiled is reported as the tool's fault."""
        broken = schema_tool({"$ref": "#/$defs/Missing"}, name="broken")
        with pytest.raises(
            ToolError, match=r"^tool 'broken' has an unusable parameters schema: \$ref"
        ):
            parse_arguments(broken, "{}")

    @pytest.mark.parametrize("index", ["²", "9" * 5000, "\u0661"])
    def test_a_ref_index_is_ascii_digits(self, index: str) -> None:
        """An array index in a $ref (from an MCP server's schema, say) is ASCII
        digits: '²' and 5,000 digits raised a bare ValueError from int(), and
        '١' was read as 1 (issue 14, item 4)."""
        schema = {"allOf": [{}, {}], "properties": {"a": {"$ref": f"#/allOf/{index}"}}}
        broken = schema_tool(schema, name="odd")
        with pytest.raises(
            ToolError, match=r"^tool 'odd' has an unusable parameters schema: \$ref"
        ):
            parse_arguments(broken, "{}")

    def test_unknown_keywords_are_ignored_and_false_refuses(self) -> None:
        """Keywords outside the subset do not block; a false schema refuses any value."""
        loose = schema_tool({"type": "object", "x-vendor": 1, "properties": {"a": False}})
        assert parse_arguments(loose, '{"b": 1}') == {"b": 1}
        with pytest.raises(ToolError, match=r"field 'a' is not allowed"):
            parse_arguments(loose, '{"a": 1}')

    def test_type_lists_and_integers_as_floats(self) -> None:
        """type may be a list; 2.0 is an integer in JSON Schema."""
        tool = schema_tool({"properties": {"n": {"type": ["integer", "null"]}}})
        assert parse_arguments(tool, '{"n": 2.0}') == {"n": 2.0}
        assert parse_arguments(tool, '{"n": null}') == {"n": None}
        with pytest.raises(ToolError, match=r"field 'n' must be an integer or null, got a string"):
            parse_arguments(tool, '{"n": "2"}')

    def test_enum_does_not_confuse_true_and_one(self) -> None:
        """JSON equality: true is not 1."""
        tool = schema_tool({"properties": {"v": {"enum": [1, "a"]}}})
        assert parse_arguments(tool, '{"v": 1.0}') == {"v": 1.0}
        with pytest.raises(ToolError, match=r"field 'v' must be one of 1, \"a\", got a boolean"):
            parse_arguments(tool, '{"v": true}')

    def test_all_of_and_prefix_items(self) -> None:
        """allOf applies every branch; prefixItems checks positions."""
        tool = schema_tool(
            {
                "properties": {
                    "pair": {"prefixItems": [{"type": "string"}, {"type": "integer"}]},
                    "n": {"allOf": [{"minimum": 1}, {"maximum": 3}]},
                }
            }
        )
        assert parse_arguments(tool, '{"pair": ["a", 1, null], "n": 2}')
        with pytest.raises(ToolError, match=r"field 'pair\[1\]' must be an integer"):
            parse_arguments(tool, '{"pair": ["a", "b"]}')
        with pytest.raises(ToolError, match=r"field 'n' must be <= 3, got a number 4"):
            parse_arguments(tool, '{"n": 4}')

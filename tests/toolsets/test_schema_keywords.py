"""Issue 14, item 9: JSON Schema keywords that real MCP schemas use, checked as the spec says.

Each test pairs a value the keyword must refuse with one it must accept, so a
validator that ignores the keyword, or applies it too broadly, fails.
"""

from __future__ import annotations

import pytest

from agentik import ToolError
from agentik._json import JsonObject
from agentik.toolsets import NamedTool, parse_arguments


def schema_tool(parameters: JsonObject, name: str = "t") -> NamedTool:
    async def handler(arguments: JsonObject) -> str:
        return "ran"

    return NamedTool(name, "a tool", parameters, handler)


def refused(tool: NamedTool, raw: str) -> str:
    with pytest.raises(ToolError) as caught:
        parse_arguments(tool, raw)
    return str(caught.value)


class TestIssueKeywords:
    def test_pattern_properties_with_additional_properties_false(self) -> None:
        """A key matching patternProperties is not 'additional'; its schema still applies."""
        headers = schema_tool(
            {
                "type": "object",
                "properties": {"url": {"type": "string"}},
                "patternProperties": {"^x-": {"type": "string"}},
                "additionalProperties": False,
            },
            name="fetch",
        )
        assert parse_arguments(headers, '{"url": "u", "x-trace": "1"}') == {
            "url": "u",
            "x-trace": "1",
        }
        assert refused(headers, '{"url": "u", "x-trace": 1}') == (
            "invalid arguments for tool 'fetch': field 'x-trace' must be a string, got a number 1"
        )
        assert refused(headers, '{"url": "u", "trace": "1"}').startswith(
            "invalid arguments for tool 'fetch': field 'trace' is not an accepted field; "
            "accepted: url, keys matching '^x-'"
        )

    def test_not(self) -> None:
        """``not`` refuses what its subschema accepts."""
        tool = schema_tool({"properties": {"id": {"not": {"type": "string"}}}})
        assert parse_arguments(tool, '{"id": 3}') == {"id": 3}
        assert refused(tool, '{"id": "3"}') == (
            "invalid arguments for tool 't': field 'id' must not match the schema "
            '{"type": "string"}, got a string "3"'
        )

    def test_multiple_of(self) -> None:
        """``multipleOf`` holds for integers and decimals alike."""
        tool = schema_tool({"properties": {"n": {"multipleOf": 5}, "p": {"multipleOf": 0.25}}})
        assert parse_arguments(tool, '{"n": 10, "p": 0.75}') == {"n": 10, "p": 0.75}
        assert refused(tool, '{"n": 7}') == (
            "invalid arguments for tool 't': field 'n' must be a multiple of 5, got a number 7"
        )

    def test_unique_items(self) -> None:
        """``uniqueItems`` uses JSON equality: 1 and 1.0 repeat, true and 1 do not."""
        tool = schema_tool({"properties": {"ids": {"type": "array", "uniqueItems": True}}})
        assert parse_arguments(tool, '{"ids": [1, true, "1"]}') == {"ids": [1, True, "1"]}
        assert refused(tool, '{"ids": [1, 2, 1.0]}') == (
            "invalid arguments for tool 't': field 'ids' must have unique items, "
            "got an array [1, 2, 1.0]"
        )

    def test_dependent_required(self) -> None:
        """``dependentRequired``: one field present makes others required."""
        tool = schema_tool(
            {
                "type": "object",
                "properties": {"card": {"type": "string"}, "cvv": {"type": "string"}},
                "dependentRequired": {"card": ["cvv"]},
            }
        )
        assert parse_arguments(tool, "{}") == {}
        assert parse_arguments(tool, '{"card": "4", "cvv": "1"}')
        assert refused(tool, '{"card": "4"}') == (
            "invalid arguments for tool 't': field 'cvv' is required when 'card' is present"
        )

    def test_if_then_else(self) -> None:
        """``if``/``then``/``else`` apply the branch the ``if`` selects."""
        tool = schema_tool(
            {
                "type": "object",
                "properties": {"kind": {"enum": ["file", "url"]}},
                "if": {"properties": {"kind": {"const": "url"}}, "required": ["kind"]},
                "then": {"required": ["url"]},
                "else": {"required": ["path"]},
            }
        )
        assert parse_arguments(tool, '{"kind": "url", "url": "u"}')
        assert parse_arguments(tool, '{"kind": "file", "path": "p"}')
        assert refused(tool, '{"kind": "url", "path": "p"}') == (
            "invalid arguments for tool 't': field 'url' is required"
        )
        assert refused(tool, '{"kind": "file"}') == (
            "invalid arguments for tool 't': field 'path' is required"
        )


class TestSubsetEdges:
    """Keywords the old validator did support, on edges the differential test turned up."""

    def test_bounds_compare_exactly_beyond_float_precision(self) -> None:
        """2**53 is below a minimum of 2**53 + 1, though both round to the same float."""
        tool = schema_tool({"properties": {"n": {"type": "integer", "minimum": 2**53 + 1}}})
        assert parse_arguments(tool, f'{{"n": {2**53 + 1}}}') == {"n": 2**53 + 1}
        assert refused(tool, f'{{"n": {2**53}}}') == (
            f"invalid arguments for tool 't': field 'n' must be >= {2**53 + 1}, "
            f"got a number {2**53}"
        )

    def test_enum_and_const_use_json_equality_at_any_depth(self) -> None:
        """true is not 1 inside arrays and objects either; 1 and 1.0 are equal."""
        tool = schema_tool(
            {"properties": {"flags": {"enum": [[True]]}, "opts": {"const": {"a": False}}}}
        )
        assert parse_arguments(tool, '{"flags": [true], "opts": {"a": false}}')
        assert refused(tool, '{"flags": [1]}') == (
            "invalid arguments for tool 't': field 'flags' must be [true], got an array [1]"
        )
        assert refused(tool, '{"opts": {"a": 0}}').startswith(
            "invalid arguments for tool 't': field 'opts' must be {\"a\": false}, got an object"
        )

    def test_counts_written_as_integral_floats(self) -> None:
        """maxItems: 1.0 is a valid count (2.0 is an integer in JSON Schema) and applies."""
        tool = schema_tool({"properties": {"ids": {"maxItems": 1.0}}})
        assert parse_arguments(tool, '{"ids": [1]}') == {"ids": [1]}
        assert refused(tool, '{"ids": [1, 2]}') == (
            "invalid arguments for tool 't': field 'ids' must have at most 1 items, got 2"
        )


class TestDialects:
    """The dialect comes from ``$schema`` (2020-12 without one); the schema is checked first."""

    def test_draft_7_ignores_keywords_beside_a_ref_and_2020_12_applies_them(self) -> None:
        """In draft 7 a ``$ref`` replaces its siblings; from 2019-09 on they apply too."""
        body: JsonObject = {
            "properties": {"n": {"$ref": "#/definitions/int", "minimum": 5}},
            "definitions": {"int": {"type": "integer"}},
        }
        for uri in (
            "http://json-schema.org/draft-07/schema#",
            "https://json-schema.org/draft-07/schema",
        ):
            draft7 = schema_tool({"$schema": uri, **body})
            assert parse_arguments(draft7, '{"n": 1}') == {"n": 1}
        latest = schema_tool(body)
        assert refused(latest, '{"n": 1}') == (
            "invalid arguments for tool 't': field 'n' must be >= 5, got a number 1"
        )

    def test_draft_4_boolean_exclusive_bounds(self) -> None:
        """Draft 4 spells "> 0" as minimum 0 with exclusiveMinimum true."""
        tool = schema_tool(
            {
                "$schema": "http://json-schema.org/draft-04/schema#",
                "properties": {"n": {"minimum": 0, "exclusiveMinimum": True}},
            }
        )
        assert parse_arguments(tool, '{"n": 1}') == {"n": 1}
        assert refused(tool, '{"n": 0}') == (
            "invalid arguments for tool 't': field 'n' must be > 0, got a number 0"
        )

    def test_an_unknown_dialect_is_read_as_2020_12(self) -> None:
        """MCP's default dialect, rather than a refusal of the whole tool."""
        tool = schema_tool(
            {"$schema": "https://example.com/my-dialect", "dependentRequired": {"a": ["b"]}}
        )
        assert refused(tool, '{"a": 1}') == (
            "invalid arguments for tool 't': field 'b' is required when 'a' is present"
        )

    def test_format_is_an_annotation(self) -> None:
        """2020-12 does not assert ``format`` unless a meta-schema asks; agentik never does."""
        tool = schema_tool({"properties": {"mail": {"type": "string", "format": "email"}}})
        assert parse_arguments(tool, '{"mail": "not an address"}') == {"mail": "not an address"}

    def test_an_invalid_schema_is_the_tools_error_naming_the_spot(self) -> None:
        """Checked against the dialect's meta-schema before any argument is."""
        tool = schema_tool({"properties": {"n": {"type": "int"}}}, name="typo")
        assert refused(tool, '{"n": 1}') == (
            "tool 'typo' has an unusable parameters schema: the schema is not valid JSON "
            "Schema Draft 2020-12 at '/properties/n/type': 'int' is not valid under any of "
            "the given schemas"
        )

    def test_a_remote_ref_is_refused_not_fetched(self) -> None:
        """A tool's schema never makes agentik open a URL."""
        tool = schema_tool({"$ref": "http://127.0.0.1:9/schema.json"}, name="remote")
        assert refused(tool, "{}") == (
            "tool 'remote' has an unusable parameters schema: $ref "
            "'http://127.0.0.1:9/schema.json' is not in the schema; remote references are "
            "not fetched"
        )

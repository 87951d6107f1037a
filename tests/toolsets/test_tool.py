"""@tool: schema from type hints, description from the docstring, typed arguments at call time."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Annotated, Literal

import attrs
import pytest

from agentik import ToolError
from agentik._json import JsonObject, JsonValue
from agentik.toolsets import NamedTool, parse_arguments, tool
from agentik.toolsets._tool import parse_docstring


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.Enum):
    LOW = 1
    HIGH = 2


@attrs.frozen
class Point:
    x: int
    y: int = 0
    label: str | None = attrs.field(default=None, metadata={"description": "shown on the map"})


@attrs.frozen
class Route:
    start: Point
    stops: list[Point]


def property_of(named: NamedTool, name: str) -> JsonValue:
    properties = named.parameters["properties"]
    assert isinstance(properties, dict)
    return properties[name]


class TestSchema:
    @pytest.mark.parametrize(
        ("hint", "schema"),
        [
            (str, {"type": "string"}),
            (int, {"type": "integer"}),
            (float, {"type": "number"}),
            (bool, {"type": "boolean"}),
            (list[str], {"type": "array", "items": {"type": "string"}}),
            (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
            (Sequence[float], {"type": "array", "items": {"type": "number"}}),
            (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
            (str | None, {"type": ["string", "null"]}),
            (int | str, {"type": ["integer", "string"]}),
            (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
            (Literal[1, "a"], {"enum": [1, "a"]}),
            (Color, {"type": "string", "enum": ["red", "green"]}),
            (Level, {"type": "integer", "enum": [1, 2]}),
            (
                Color | None,
                {"anyOf": [{"type": "string", "enum": ["red", "green"]}, {"type": "null"}]},
            ),
            (Annotated[str, "a city"], {"type": "string", "description": "a city"}),
        ],
        ids=repr,
    )
    def test_each_supported_type(self, hint: object, schema: JsonObject) -> None:
        """Every supported hint maps to its JSON Schema."""

        async def probe(value: hint) -> str:  # type: ignore[valid-type]
            """Probe."""
            return ""

        probe.__annotations__ = {"value": hint, "return": str}
        assert property_of(tool(probe), "value") == schema

    def test_attrs_classes_are_nested_objects(self) -> None:
        """An attrs class becomes a closed object; defaults are optional; metadata describes."""

        @tool
        async def plan(route: Route) -> str:
            """Plan a route."""
            return ""

        point = {
            "type": "object",
            "properties": {
                "x": {"type": "integer"},
                "y": {"type": "integer"},
                "label": {"type": ["string", "null"], "description": "shown on the map"},
            },
            "required": ["x"],
            "additionalProperties": False,
        }
        assert property_of(plan, "route") == {
            "type": "object",
            "properties": {"start": point, "stops": {"type": "array", "items": point}},
            "required": ["start", "stops"],
            "additionalProperties": False,
        }

    def test_name_description_required_and_defaults(self) -> None:
        """Name from the function, description from the docstring, Args entries per parameter."""

        @tool
        async def get_weather(city: str, days: int = 1, unit: Literal["C", "F"] = "C") -> str:
            """Get the weather forecast
            for a city.

            Args:
                city: The city, as its
                    English name.
                days (int): How many days.

            Returns:
                The forecast.
            """
            return ""

        assert get_weather.name == "get_weather"
        assert get_weather.description == "Get the weather forecast for a city."
        assert get_weather.parameters == {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, as its English name."},
                "days": {"type": "integer", "description": "How many days.", "default": 1},
                "unit": {"type": "string", "enum": ["C", "F"], "default": "C"},
            },
            "required": ["city"],
            "additionalProperties": False,
        }

    def test_enum_default_is_shown_by_value(self) -> None:
        """An enum default appears as its JSON value; other defaults are not shown."""

        @tool
        async def paint(color: Color = Color.GREEN, at: Point | None = Point(1)) -> str:
            """Paint."""
            return ""

        assert property_of(paint, "color") == {
            "type": "string",
            "enum": ["red", "green"],
            "default": "green",
        }
        at = property_of(paint, "at")
        assert isinstance(at, dict)
        assert "default" not in at

    def test_explicit_name_and_description(self) -> None:
        """@tool(name=..., description=...) overrides both."""

        @tool(name="files_read", description="Read a file.")
        async def read(path: str) -> str:
            return path

        assert (read.name, read.description) == ("files_read", "Read a file.")

    def test_docstring_without_sections(self) -> None:
        """A plain docstring is all description."""
        assert parse_docstring("One.\n\nTwo.") == ("One. Two.", {})


class TestDefinitionErrors:
    def test_not_async(self) -> None:
        """Tools are async functions."""

        def sync(x: int) -> str:
            """Sync."""
            return ""

        with pytest.raises(ToolError, match=r"^tool 'sync' must be an async function"):
            tool(sync)  # type: ignore[arg-type]

    def test_no_description(self) -> None:
        """The model needs a description."""

        async def bare(x: int) -> str:
            return ""

        with pytest.raises(ToolError, match=r"^tool 'bare' needs a description"):
            tool(bare)

    def test_bad_name(self) -> None:
        """The name must be acceptable to OpenAI-compatible APIs."""

        async def fine() -> str:
            """Fine."""
            return ""

        with pytest.raises(ToolError, match=r"^tool name 'a.b' is invalid"):
            tool(name="a.b")(fine)

    def test_unsupported_type(self) -> None:
        """A type without a JSON Schema is refused when the tool is defined."""

        async def odd(when: complex) -> str:
            """Odd."""
            return ""

        with pytest.raises(
            ToolError,
            match=r"^parameter 'when' of tool 'odd' has a type without a JSON Schema "
            r"\(unsupported type <class 'complex'>\); expected str, int",
        ):
            tool(odd)

    def test_recursive_attrs_class(self) -> None:
        """A self-referencing attrs class cannot be inlined."""

        @attrs.frozen
        class Node:
            child: Node | None = None

        async def walk(node: Node) -> str:
            """Walk."""
            return ""

        walk.__annotations__ = {"node": Node, "return": str}
        with pytest.raises(ToolError, match=r"\(recursive attrs class .*Node\)"):
            tool(walk)

    def test_missing_hint_and_variadics_and_return(self) -> None:
        """Every parameter is named and typed, and the result is text."""

        async def untyped(x) -> str:  # type: ignore[no-untyped-def]
            """U."""
            return ""

        async def variadic(*xs: int) -> str:
            """V."""
            return ""

        async def number() -> int:
            """N."""
            return 1

        with pytest.raises(ToolError, match=r"^parameter 'x' of tool 'untyped' needs a type hint$"):
            tool(untyped)
        with pytest.raises(ToolError, match=r"^parameter 'xs' of tool 'variadic' must be a named"):
            tool(variadic)
        with pytest.raises(ToolError, match=r"^tool 'number' must return str"):
            tool(number)  # type: ignore[arg-type]


class TestCalls:
    async def test_arguments_arrive_typed(self) -> None:
        """Validated JSON becomes enums, attrs instances, tuples and floats."""
        seen: list[object] = []

        @tool
        async def draw(
            route: Route,
            color: Color,
            level: Level,
            weights: tuple[float, ...],
            scale: float = 1.0,
            note: str | None = None,
        ) -> str:
            """Draw a route."""
            seen.extend([route, color, level, weights, scale, note])
            return "drawn"

        raw = (
            '{"route": {"start": {"x": 1}, "stops": [{"x": 2, "y": 3, "label": "b"}]},'
            ' "color": "green", "level": 2, "weights": [1, 2.5], "scale": 2}'
        )
        assert await draw.handler(parse_arguments(draw, raw)) == "drawn"
        assert seen == [
            Route(start=Point(1), stops=[Point(2, 3, "b")]),
            Color.GREEN,
            Level.HIGH,
            (1.0, 2.5),
            2.0,
            None,
        ]
        assert isinstance(seen[3], tuple)
        assert isinstance(seen[4], float)

    async def test_invalid_arguments_name_the_field(self) -> None:
        """Bad arguments give a ToolError naming the field, from parse_arguments and handler."""

        @tool
        async def plan(route: Route, color: Color = Color.RED) -> str:
            """Plan."""
            return ""

        with pytest.raises(
            ToolError,
            match=r"^invalid arguments for tool 'plan': field 'route.stops\[0\].x' must be an "
            r"integer, got a string \"1\"$",
        ):
            parse_arguments(plan, '{"route": {"start": {"x": 1}, "stops": [{"x": "1"}]}}')
        with pytest.raises(
            ToolError, match=r"^invalid arguments for tool 'plan': field 'color' must be one of"
        ):
            await plan.handler({"route": {"start": {"x": 1}, "stops": []}, "color": "blue"})
        with pytest.raises(ToolError, match=r"field 'route' is required"):
            await plan.handler({})

    async def test_integral_float_for_an_int_parameter(self) -> None:
        """2.0 is an integer in JSON Schema, and arrives as int 2."""

        @tool
        async def count(n: int, m: int | str) -> str:
            """Count."""
            return f"{n!r} {m!r}"

        assert await count.handler({"n": 2.0, "m": 3.0}) == "2 3"

    async def test_non_text_result_is_a_tool_error(self) -> None:
        """A function that breaks its own annotation is caught at the call."""

        @tool
        async def liar() -> str:
            """Lie."""
            return 3  # type: ignore[return-value]

        with pytest.raises(ToolError, match=r"^tool 'liar' returned int; expected str$"):
            await liar.handler({})


async def test_containers_of_enums_and_optional_objects_convert() -> None:
    """Conversion reaches inside lists, dicts and optionals."""
    seen: list[object] = []

    @tool
    async def paint(colors: list[Color], by_name: dict[str, Level], where: Point | None) -> str:
        """Paint."""
        seen.extend([colors, by_name, where])
        return "painted"

    assert property_of(paint, "where") == {
        "anyOf": [property_of(tool_for_point(), "p"), {"type": "null"}]
    }
    await paint.handler({"colors": ["red", "green"], "by_name": {"a": 1}, "where": None})
    await paint.handler({"colors": [], "by_name": {}, "where": {"x": 4}})
    assert seen == [[Color.RED, Color.GREEN], {"a": Level.LOW}, None, [], {}, Point(4)]


def tool_for_point() -> NamedTool:
    @tool
    async def place(p: Point) -> str:
        """Place."""
        return ""

    return place

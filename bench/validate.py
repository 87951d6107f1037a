"""Per-call cost of argument validation on real-looking tool schemas.

Run: .venv/bin/python -m bench.validate [--repeat 15] [--number 5000]

Times one check of a valid arguments object (and, separately, of an invalid
one) against four schemas of the kinds agentik sees: what ``@tool``
generates, what a TypeScript MCP server sends (zod-to-json-schema, draft-07
``$schema``), what a Python MCP server sends (pydantic: ``$defs``, ``anyOf``
with null, ``title``/``default`` annotations) and a 2020-12 schema using the
keywords the old hand-written validator ignored. Variants:

- ``agentik``: ``compile_schema`` from ``agentik.toolsets._validate``, the
  check ``parse_arguments`` runs (jsonschema, or the fast path where it
  applies), including building the model-facing failure message;
- ``jsonschema``: a cached ``jsonschema`` validator's ``is_valid`` (for the
  invalid case, ``best_match(iter_errors)``, as agentik needs the error);
- ``fastjsonschema``: its compiled function, if installed (draft 4/6/7
  only: it has no ``prefixItems``, ``dependentRequired`` or ``$defs``
  semantics of 2020-12, so it would be wrong for the last schema).

CPU time of this process, minimum and median over repeats, in µs per call.
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit
from collections.abc import Callable

import jsonschema

from agentik._json import JsonObject, JsonValue
from agentik.toolsets import tool
from agentik.toolsets._validate import compile_schema

_CPU = time.process_time


@tool
async def weather(city: str, days: int = 1, unit: str | None = None) -> str:
    """Weather for a city."""
    return city


EDIT_FILE: JsonObject = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "edits": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "oldText": {"type": "string", "description": "Text to search for"},
                    "newText": {"type": "string", "description": "Text to replace with"},
                },
                "required": ["oldText", "newText"],
                "additionalProperties": False,
            },
        },
        "dryRun": {"type": "boolean", "default": False, "description": "Preview only"},
    },
    "required": ["path", "edits"],
    "additionalProperties": False,
    "$schema": "http://json-schema.org/draft-07/schema#",
}

SEARCH: JsonObject = {
    "type": "object",
    "title": "searchArguments",
    "properties": {
        "query": {"title": "Query", "type": "string"},
        "filters": {"anyOf": [{"$ref": "#/$defs/Filters"}, {"type": "null"}], "default": None},
        "limit": {"default": 10, "maximum": 100, "minimum": 1, "title": "Limit", "type": "integer"},
    },
    "required": ["query"],
    "$defs": {
        "Filters": {
            "title": "Filters",
            "type": "object",
            "properties": {
                "tags": {"items": {"type": "string"}, "type": "array", "title": "Tags"},
                "since": {"format": "date", "type": "string", "title": "Since"},
            },
        }
    },
}

HEADERS: JsonObject = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "pattern": "^https?://"},
        "retries": {"type": "integer", "multipleOf": 1, "minimum": 0},
        "ids": {"type": "array", "uniqueItems": True, "items": {"type": "integer"}},
    },
    "patternProperties": {"^x-": {"type": "string"}},
    "additionalProperties": False,
    "required": ["url"],
    "dependentRequired": {"retries": ["ids"]},
}

CASES: dict[str, tuple[JsonObject, JsonObject, JsonObject]] = {
    "@tool weather": (
        weather.parameters,
        {"city": "Paris", "days": 3, "unit": None},
        {"city": "Paris", "days": "3"},
    ),
    "mcp edit_file (zod, draft-07)": (
        EDIT_FILE,
        {"path": "a.txt", "edits": [{"oldText": "a", "newText": "b"}], "dryRun": True},
        {"path": "a.txt", "edits": [{"oldText": "a"}]},
    ),
    "mcp search (pydantic)": (
        SEARCH,
        {"query": "trio", "filters": {"tags": ["a", "b"], "since": "2026-01-01"}, "limit": 5},
        {"query": "trio", "filters": {"tags": [1]}},
    ),
    "2020-12 keywords": (
        HEADERS,
        {"url": "https://x", "retries": 2, "ids": [1, 2], "x-trace": "t"},
        {"url": "https://x", "retries": 2, "ids": [1, 1]},
    ),
}


def _variants(
    schema: JsonObject, valid: bool, generated: bool
) -> dict[str, Callable[[JsonValue], object]]:
    check = compile_schema(schema, generated=generated)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = cls(schema)
    variants: dict[str, Callable[[JsonValue], object]] = {
        "agentik": check,
        "jsonschema": (
            validator.is_valid
            if valid
            else lambda value: jsonschema.exceptions.best_match(validator.iter_errors(value))
        ),
    }
    try:
        import fastjsonschema  # type: ignore[import-not-found]
    except ImportError:
        return variants
    fast = fastjsonschema.compile(schema)

    def run_fast(value: JsonValue) -> object:
        try:
            return fast(value)
        except fastjsonschema.JsonSchemaException as error:
            return error

    variants["fastjsonschema"] = run_fast
    return variants


def _time(run: Callable[[], object], number: int, repeat: int) -> list[float]:
    return [t / number * 1e6 for t in timeit.repeat(run, timer=_CPU, number=number, repeat=repeat)]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--number", type=int, default=5000)
    options = parser.parse_args()
    for name, (schema, good, bad) in CASES.items():
        print(name)
        for label, value in (("valid", good), ("invalid", bad)):
            for variant, run in _variants(schema, label == "valid", name == "@tool").items():
                samples = _time(
                    lambda run=run, value=value: run(value), options.number, options.repeat
                )  # type: ignore[misc]
                print(
                    f"  {label:8s} {variant:15s} min {min(samples):7.2f} µs/call, "
                    f"median {statistics.median(samples):7.2f}"
                )


if __name__ == "__main__":
    main()

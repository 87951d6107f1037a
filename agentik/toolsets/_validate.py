"""JSON Schema validation of tool arguments: a schema compiled once into a check. Pure.

``compile_schema(schema)`` returns a ``Check``: None for a valid value, else a
``Failure`` naming the field and the rule broken. The schema may be anything
a tool or an MCP server sends:

- The dialect comes from ``$schema`` (2020-12, 2019-09, draft 7, 6, 4, 3;
  ``http``/``https`` and a trailing ``#`` alike); without one, or with one
  jsonschema does not know, it is Draft 2020-12, as MCP specifies.
- The schema is checked against its dialect's meta-schema first, and every
  ``$ref`` must resolve inside it: remote references are never fetched (a
  tool's schema must not make agentik open a URL). Either problem raises
  ``SchemaError`` at compile time (only a ``$dynamicRef`` that leads nowhere
  is found at a call, and raises it then).
- ``format`` is an annotation and never asserted: that is 2020-12's default,
  and the only way a schema can ask otherwise (a meta-schema with the
  format-assertion vocabulary) would need fetching one.

Two engines give one answer. ``jsonschema`` is the reference and checks every
schema agentik did not write itself (an MCP server's, a hand-written
``NamedTool``'s); the closures of ``_closures`` check the subset of keywords
they implement exactly, 10 to 20 times faster, and are used only for the
schemas ``@tool`` generates (``generated=True``), every one of which is in
that subset (tests/toolsets/test_validation_properties.py shows both).
"""

from __future__ import annotations

from typing import cast
from urllib.parse import unquote

import attrs
import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema as jsonschema_specs
from jsonschema.protocols import Validator
from referencing.jsonschema import Schema, SchemaRegistry, SchemaResource

from agentik._json import JsonValue
from agentik.toolsets._closures import applies, compile_closures, resolve_pointer
from agentik.toolsets._failure import Check, Failure, SchemaError, describe
from agentik.toolsets._schema_errors import failure_of, for_reporting

__all__ = ["Check", "Failure", "SchemaError", "compile_schema", "describe"]


@attrs.frozen
class Dialect:
    """One JSON Schema dialect: how jsonschema and referencing handle it, and what differs."""

    name: str
    validator: type[Validator]
    specification: referencing.Specification[Schema]
    closures: bool
    """Whether the closures' keywords mean here what they implement (not in draft 3/4,
    whose bounds and integers differ)."""
    ref_siblings_apply: bool
    """Whether keywords beside a ``$ref`` apply (2019-09 on) or are ignored."""


_DIALECTS: dict[str, Dialect] = {
    "json-schema.org/draft/2020-12/schema": Dialect(
        "Draft 2020-12", jsonschema.Draft202012Validator, jsonschema_specs.DRAFT202012, True, True
    ),
    "json-schema.org/draft/2019-09/schema": Dialect(
        "Draft 2019-09", jsonschema.Draft201909Validator, jsonschema_specs.DRAFT201909, True, True
    ),
    "json-schema.org/draft-07/schema": Dialect(
        "draft 7", jsonschema.Draft7Validator, jsonschema_specs.DRAFT7, True, False
    ),
    "json-schema.org/draft-06/schema": Dialect(
        "draft 6", jsonschema.Draft6Validator, jsonschema_specs.DRAFT6, True, False
    ),
    "json-schema.org/draft-04/schema": Dialect(
        "draft 4", jsonschema.Draft4Validator, jsonschema_specs.DRAFT4, False, False
    ),
    "json-schema.org/draft-03/schema": Dialect(
        "draft 3", jsonschema.Draft3Validator, jsonschema_specs.DRAFT3, False, False
    ),
}
_DEFAULT = _DIALECTS["json-schema.org/draft/2020-12/schema"]

_NOTHING_REMOTE: SchemaRegistry = referencing.Registry()
"""An empty registry that retrieves nothing: jsonschema's default would fetch remote refs."""


def dialect_of(schema: JsonValue) -> Dialect:
    """The dialect ``$schema`` names, or Draft 2020-12."""
    uri = schema.get("$schema") if isinstance(schema, dict) else None
    if not isinstance(uri, str):
        return _DEFAULT
    key = uri.removeprefix("https://").removeprefix("http://").rstrip("#")
    return _DIALECTS.get(key, _DEFAULT)


def compile_schema(schema: JsonValue, *, generated: bool = False) -> Check:
    """Compile ``schema`` into a check; raises ``SchemaError`` naming what is wrong
    with it. ``generated``: ``@tool`` wrote it, so the closures may check it."""
    if isinstance(schema, bool):
        return compile_closures(schema)
    if not isinstance(schema, dict):
        raise SchemaError(f"a schema must be an object or a boolean, got {describe(schema)}")
    dialect = dialect_of(schema)
    try:
        dialect.validator.check_schema(schema)
    except jsonschema.SchemaError as error:
        where = "".join(f"[{p}]" if isinstance(p, int) else f"/{p}" for p in error.absolute_path)
        raise SchemaError(
            f"the schema is not valid JSON Schema {dialect.name}"
            + (f" at {where!r}" if where else "")
            + f": {error.message}"
        ) from error
    _check_refs(dialect.specification.create_resource(schema))
    if (
        generated
        and dialect.closures
        and applies(schema, ref_siblings_apply=dialect.ref_siblings_apply)
    ):
        return compile_closures(schema)
    validator = dialect.validator(
        for_reporting(schema), registry=_NOTHING_REMOTE, format_checker=None
    )
    return _reference_check(validator)


def _check_refs(root: SchemaResource) -> None:
    """Raise ``SchemaError`` for a ``$ref`` that does not resolve inside the schema."""
    stack = [(root, _NOTHING_REMOTE.resolver_with_root(root))]
    while stack:
        resource, resolver = stack.pop()
        contents = resource.contents
        ref = contents.get("$ref") if isinstance(contents, dict) else None
        if isinstance(ref, str):
            try:
                # A JSON-pointer fragment is walked here: ``referencing`` reads an
                # array index with ``int()``, which raises on '²' and reads '١' as
                # 1, where a pointer allows ASCII digits only.
                uri, _, fragment = ref.partition("#")
                if fragment.startswith("/"):
                    document = resolver.lookup(f"{uri}#").contents
                    # (a schema here is decoded JSON: Mapping is dict)
                    resolve_pointer(cast(JsonValue, document), "#" + unquote(fragment))
                else:
                    resolver.lookup(ref)
            except (referencing.exceptions.Unresolvable, ValueError) as error:
                where = (
                    "leads nowhere in the schema"
                    if ref.startswith("#")
                    else "is not in the schema; remote references are not fetched"
                )
                raise SchemaError(f"$ref {ref!r} {where}") from error
        stack.extend((sub, resolver.in_subresource(sub)) for sub in resource.subresources())


def _reference_check(validator: Validator) -> Check:
    def check(value: JsonValue) -> Failure | None:
        try:
            errors = validator.iter_errors(value)
            first = next(errors, None)
            if first is None:
                return None
            return failure_of([first, *errors])
        except referencing.exceptions.Unresolvable as error:  # a $dynamicRef, say
            raise SchemaError(f"a reference in the schema does not resolve: {error}") from error

    return check

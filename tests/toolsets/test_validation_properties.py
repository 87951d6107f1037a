"""Differential tests: agentik's argument validation against jsonschema, the oracle.

The class of bug behind issue 14 item 9 is a validator that disagrees with the
spec on some schema. These tests generate schemas and values and require
agentik's verdict (valid or not) to equal jsonschema's, for:

- arbitrary Draft 2020-12 schemas (and a few older dialects), through
  ``compile_schema`` as it checks a schema from outside (jsonschema) and as it
  checks one ``@tool`` wrote (the closures wherever they apply);
- schemas of only the keywords the closures implement, through the closures
  directly (``applies`` must hold for every one of them);
- the schemas ``@tool`` generates from random type hints, with valid values
  generated from the schema (each confirmed by jsonschema) and random JSON,
  much of it a near miss.
"""

from __future__ import annotations

import jsonschema
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agentik._json import JsonValue
from agentik.toolsets import NamedTool
from agentik.toolsets._arguments import validator_for
from agentik.toolsets._closures import applies, compile_closures
from agentik.toolsets._validate import compile_schema, dialect_of
from tests.toolsets.schema_strategies import (
    FAST_KEYWORDS,
    generated_tools,
    json_values,
    schemas,
    valid_instances,
)

values = st.lists(json_values, min_size=1, max_size=10)


def oracle(schema: JsonValue) -> jsonschema.protocols.Validator:
    """jsonschema's own choice of dialect, and its own validator."""
    assert isinstance(schema, dict | bool)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas(), instances=values)
def test_any_schema_agrees_with_jsonschema(schema: JsonValue, instances: list[JsonValue]) -> None:
    """For any schema and value, agentik accepts exactly what jsonschema accepts."""
    reference = oracle(schema)
    outside = compile_schema(schema)
    generated = compile_schema(schema, generated=True)
    dialect = dialect_of(schema)
    fast = dialect.closures and applies(schema, ref_siblings_apply=dialect.ref_siblings_apply)
    event(f"engine if generated: {'closures' if fast else 'jsonschema'}")
    for instance in instances:
        expected = reference.is_valid(instance)
        event(f"verdict: {'valid' if expected else 'invalid'}")
        for check in (outside, generated):
            failure = check(instance)
            assert (failure is None) == expected, (instance, failure)
            if failure is not None:
                assert failure.message  # something the model can read


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas(FAST_KEYWORDS, dialects=False), instances=values)
def test_closures_agree_with_jsonschema_where_they_apply(
    schema: JsonValue, instances: list[JsonValue]
) -> None:
    """The fast engine, on the keywords it claims, is exact; it claims every such schema."""
    reference = oracle(schema)
    assert applies(schema, ref_siblings_apply=True)
    check = compile_closures(schema)
    for instance in instances:
        assert (check(instance) is None) == reference.is_valid(instance), instance


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(named=generated_tools(), data=st.data())
def test_tool_schemas_take_the_fast_path_and_agree(named: NamedTool, data: st.DataObject) -> None:
    """``@tool`` schemas are valid, always go to the closures, and agree with jsonschema."""
    schema = named.parameters
    reference = oracle(schema)
    assert applies(schema, ref_siblings_apply=True)
    check = validator_for(named)
    valid = data.draw(st.lists(valid_instances(schema), min_size=1, max_size=5), label="valid")
    for instance in valid:
        assert reference.is_valid(instance)
        assert check(instance) is None, instance
    properties = schema["properties"]
    assert isinstance(properties, dict)
    near = st.dictionaries(st.sampled_from([*properties, "extra"]), json_values, max_size=4)
    others = data.draw(st.lists(near | json_values, min_size=1, max_size=8), label="others")
    for instance in others:
        expected = reference.is_valid(instance)
        event(f"verdict: {'valid' if expected else 'invalid'}")
        assert (check(instance) is None) == expected, instance

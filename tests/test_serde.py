"""The one converter turns every value into JSON-compatible data and back."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentik import Message, Role, Skill
from agentik._serde import converter
from tests import strategies as s

VALUES = [
    (s.messages, Message),
    (s.tool_calls, s.ToolCall),
    (s.token_usages, s.TokenUsage),
    (s.token_stats, s.TokenStats),
    (s.memory_entries, s.MemoryEntry),
    (s.reflections, s.Reflection),
    (s.skills, Skill),
    (s.skill_summaries, s.SkillSummary),
]


@pytest.mark.parametrize(("strategy", "cls"), VALUES, ids=lambda v: getattr(v, "__name__", ""))
def test_round_trip_through_json_text(strategy: st.SearchStrategy[object], cls: type) -> None:
    """Every value survives unstructure -> json.dumps -> json.loads -> structure."""

    @given(strategy)
    def check(value: object) -> None:
        data = json.loads(json.dumps(converter.unstructure(value)))
        assert converter.structure(data, cls) == value

    check()


def test_role_travels_as_its_value() -> None:
    """Roles are the wire strings the chat APIs use."""
    assert converter.unstructure(Message(Role.TOOL, "x"))["role"] == "tool"


def test_datetimes_travel_as_utc_text() -> None:
    """A datetime with another offset is written as the same instant in UTC."""
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    text = converter.unstructure(Skill("a", "b", "c", moment))["updated_at"]
    assert text == "2026-01-02T01:04:05+00:00"
    assert converter.structure(
        {"name": "a", "description": "b", "body": "c", "updated_at": text}, Skill
    ).updated_at == moment.astimezone(UTC)


def test_naive_datetime_is_refused() -> None:
    """A timestamp without a zone is ambiguous, so it is an error, not a guess."""
    with pytest.raises(ExceptionGroup) as info:
        converter.structure(
            {"name": "a", "description": "b", "body": "c", "updated_at": "2026-01-02T01:04:05"},
            Skill,
        )
    assert info.group_contains(ValueError, match="has no time zone")


def test_unknown_keys_are_refused() -> None:
    """Bad input gets a clear error: an unexpected key is not silently dropped."""
    with pytest.raises(ExceptionGroup) as info:
        converter.structure({"role": "user", "content": "x", "colour": "red"}, Message)
    assert "colour" in repr(info.value.exceptions)


_JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
_KINDS = {int: (int,), float: (int, float), str: (str,), bool: (bool,)}


@pytest.mark.parametrize("cls", [int, float, str, bool])
def test_primitives_take_exactly_their_json_type(cls: type) -> None:
    """Nothing is coerced: ``"1"``, ``1.9`` and ``true`` are not integers,
    ``"no"`` is not a boolean, a list is not a string; each is refused,
    naming what was expected and what came."""

    @given(
        _JSON_SCALARS | st.lists(st.integers(), max_size=2) | st.dictionaries(st.text(), st.none())
    )
    def check(value: object) -> None:
        if type(value) in _KINDS[cls]:
            # a JSON integer read as a float is the nearest float (past 2**53, not equal)
            expected = float(value) if cls is float else value  # type: ignore[arg-type]
            assert converter.structure(value, cls) == expected
        else:
            with pytest.raises(TypeError, match=r"^expected .*, got "):
                converter.structure(value, cls)

    check()


def test_sequences_are_json_arrays() -> None:
    """A string or an object is not read as a list of its characters or keys."""
    for value in ("ab", {}, {"a": 1}):
        with pytest.raises(ExceptionGroup):
            converter.structure({"role": "user", "content": "", "tool_calls": value}, Message)
    assert converter.structure({"role": "user", "content": "", "tool_calls": []}, Message)


@pytest.mark.parametrize(
    "text",
    ["2026-01-02", "2026-W01-1T00:00:00+00:00", "20260102T030405Z", "2026-01-02T03:04:05+0000"],
)
def test_timestamps_are_rfc_3339(text: str) -> None:
    with pytest.raises(ExceptionGroup):
        converter.structure({"name": "a", "description": "", "body": "", "updated_at": text}, Skill)

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

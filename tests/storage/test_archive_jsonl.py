"""The archive's JSON Lines: any records survive writing and reading exactly
(hypothesis builds them); anything else is refused with its line number."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import MemoryEntry, Message, Reflection, Role, TokenUsage, ToolCall
from agentik.storage import (
    Approval,
    ArchivedApproval,
    ArchivedFailure,
    ArchivedMessage,
    ArchivedNote,
    ArchivedReflection,
    ArchivedSummary,
    ArchiveRecord,
    Summary,
)
from agentik.storage._jsonl import ArchiveFormatError, header_line, read_archive, record_line

TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=40)
TIMES = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2400, 1, 1), timezones=st.just(UTC)
)
CALLS = st.lists(st.builds(ToolCall, TEXT, TEXT, TEXT), max_size=2).map(tuple)
USAGE = st.none() | st.builds(TokenUsage, st.integers(0, 10**9), st.integers(0, 10**9))
MESSAGES = st.builds(
    lambda role, content, calls, usage, seq, at, key: ArchivedMessage(
        message=Message(role, content, calls, None, usage, seq, at), idempotency_key=key
    ),
    st.sampled_from(Role),
    TEXT,
    CALLS,
    USAGE,
    st.integers(1, 10**6),
    TIMES,
    st.none() | TEXT,
)
NOTES = st.builds(
    lambda i, text, at, archived: ArchivedNote(
        entry=MemoryEntry(id=i, conversation_id="c", text=text, created_at=at), archived=archived
    ),
    st.integers(1, 10**6),
    TEXT,
    TIMES,
    st.booleans(),
)
REFLECTIONS = st.builds(
    lambda i, text, at: ArchivedReflection(
        reflection=Reflection(id=i, conversation_id="c", text=text, created_at=at)
    ),
    st.integers(1, 10**6),
    TEXT,
    TIMES,
)
APPROVALS = st.builds(
    lambda seq, call, approved, reason, at, later: ArchivedApproval(
        approval=Approval(seq=seq, call_id=call, approved=approved, reason=reason),
        created_at=at,
        decided_at=None if later is None else at + timedelta(seconds=later),
    ),
    st.integers(1, 10**6),
    TEXT,
    st.none() | st.booleans(),
    TEXT,
    TIMES,
    st.none() | st.integers(0, 10**6),
)
FAILURES = st.builds(
    lambda seq, code, at: ArchivedFailure(seq=seq, code=code, created_at=at),
    st.integers(1, 10**6),
    TEXT,
    TIMES,
)
SUMMARIES = st.builds(
    lambda seq, text, at: ArchivedSummary(
        summary=Summary(through_seq=seq, text=text, created_at=at)
    ),
    st.integers(1, 10**6),
    TEXT,
    TIMES,
)
RECORDS = st.lists(MESSAGES | NOTES | REFLECTIONS | APPROVALS | FAILURES | SUMMARIES, max_size=12)


@settings(max_examples=150, deadline=None)
@given(records=RECORDS, conversation_id=TEXT.filter(bool))
def test_records_survive_a_round_trip(records: list[ArchiveRecord], conversation_id: str) -> None:
    """Write then read gives the same records (notes and reflections name the
    archive's conversation), whatever the text, times and numbers."""
    lines = header_line(conversation_id) + "".join(record_line(r, conversation_id) for r in records)
    assert lines.count("\n") == len(records) + 1, "a record spans more than one line"
    found_id, back = read_archive(lines.splitlines(keepends=True))
    assert found_id == conversation_id
    assert back == [_named(r, conversation_id) for r in records]


def _named(record: ArchiveRecord, conversation_id: str) -> ArchiveRecord:
    import attrs

    if isinstance(record, ArchivedNote):
        return attrs.evolve(
            record, entry=attrs.evolve(record.entry, conversation_id=conversation_id)
        )
    if isinstance(record, ArchivedReflection):
        return attrs.evolve(
            record, reflection=attrs.evolve(record.reflection, conversation_id=conversation_id)
        )
    return record


GOOD = header_line("c") + record_line(
    ArchivedFailure(seq=1, code="x", created_at=datetime(2026, 1, 1, tzinfo=UTC)), "c"
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "^the archive is empty"),
        ('{"type": "agentik.conversation", "version": 2, "conversation_id": "c"}', "version 2"),
        ('{"type": "agentik.conversation", "version": 1}', "conversation_id"),
        ('{"type": "message"}', "^line 1 must be the header"),
        (GOOD + "[1]\n", "^line 3 is not a JSON object"),
        (GOOD + "{oops\n", "^line 3 is not JSON"),
        (GOOD + '{"type": "snapshot"}\n', "^line 3 has an unknown record type 'snapshot'"),
        (GOOD + '{"type": "summary", "summary": {}}\n', "^line 3 is not a valid summary"),
        (GOOD.replace('"code":"x"', '"code":"x","extra":1'), "^line 2 is not a valid turn_failure"),
        (GOOD.replace('"seq":1', '"seq":"one"'), "^line 2 is not a valid turn_failure"),
    ],
)
def test_bad_archives_are_refused(text: str, message: str) -> None:
    with pytest.raises(ArchiveFormatError, match=message):
        read_archive(text.splitlines())

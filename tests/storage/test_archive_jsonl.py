"""The archive's JSON Lines: any conversation the exporter writes survives
writing and reading exactly (hypothesis builds them); anything else is
refused, as one line naming its line number: a value of another JSON type
than the field's (nothing is coerced), a broken history rule, an id the API
would refuse, JSON nested past any bound."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agentik.storage import ArchivedNote, ArchivedReflection, ArchiveRecord
from agentik.storage._jsonl import (
    Archive,
    ArchiveFormatError,
    header_line,
    read_archive,
    record_line,
    split_lines,
)
from tests.storage.archives import TEXT, conversations

OWNERS = st.none() | st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,47}", fullmatch=True)
IDS = st.text(st.characters(blacklist_categories=["Cs", "Cc", "Cf", "Zl", "Zp", "Co", "Cn"]))
CONVERSATION_IDS = IDS.filter(lambda i: 0 < len(i) <= 200 and i.isprintable() and i.strip())


def archive_text(records: list[ArchiveRecord], conversation_id: str, owner: str | None) -> str:
    return header_line(conversation_id, owner) + "".join(
        record_line(r, conversation_id) for r in records
    )


def named(record: ArchiveRecord, conversation_id: str) -> ArchiveRecord:
    """A record as the archive names it: notes and reflections carry its id."""
    if isinstance(record, ArchivedNote):
        return attrs.evolve(
            record, entry=attrs.evolve(record.entry, conversation_id=conversation_id)
        )
    if isinstance(record, ArchivedReflection):
        return attrs.evolve(
            record, reflection=attrs.evolve(record.reflection, conversation_id=conversation_id)
        )
    return record


@settings(max_examples=150, deadline=None)
@given(records=conversations(), conversation_id=CONVERSATION_IDS, owner=OWNERS)
def test_any_exported_conversation_survives_a_round_trip(
    records: list[ArchiveRecord], conversation_id: str, owner: str | None
) -> None:
    """Write then read gives the same conversation, owner and records,
    whatever the text, times, counts and ids; a record is one line."""
    text = archive_text(records, conversation_id, owner)
    assert text.count("\n") == len(records) + 1, "a record spans more than one line"
    expected = Archive(
        conversation_id=conversation_id,
        owner=owner,
        records=tuple(named(r, conversation_id) for r in records),
    )
    assert read_archive(split_lines(text.encode())) == expected
    assert read_archive(text.splitlines()) == expected


def _lines(records: list[ArchiveRecord]) -> list[dict[str, Any]]:
    text = archive_text(records, "c", None)
    return [json.loads(line) for line in text.splitlines()]


def _paths(value: object, path: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Every path to a value inside ``value`` (keys and list indexes)."""
    found = [path] if path else []
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*path, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _paths(inner, (*path, index))
    return found


def _set(value: Any, path: tuple[object, ...], new: object) -> None:
    for step in path[:-1]:
        value = value[step]
    value[path[-1]] = new


def _json_kind(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(TEXT, inner, max_size=2),
    max_leaves=4,
)


@settings(max_examples=300, deadline=None)
@given(records=conversations().filter(bool), data=st.data())
def test_a_value_of_another_json_type_is_refused(
    records: list[ArchiveRecord], data: st.DataObject
) -> None:
    """Any field of any record set to a value of another JSON type (a string
    for a number, a number for a boolean, an array for a string, …; but null
    is left out where null is allowed) is refused with the record's line."""
    lines = _lines(records)
    number = data.draw(st.integers(1, len(lines) - 1))
    line = lines[number]
    path = data.draw(st.sampled_from([p for p in _paths(line) if p != ("type",)]))
    old: Any = line
    for step in path:
        old = old[step]
    # Not null for a value, nor a value for null: where a field may be null
    # (usage, tool_call_id, decided_at, a key) either can be valid.
    assume(old is not None)
    new = data.draw(
        JSON_VALUES.filter(lambda v: v is not None and _json_kind(v) != _json_kind(old))
    )
    _set(line, path, new)
    text = "".join(json.dumps(line) + "\n" for line in lines)
    with pytest.raises(ArchiveFormatError, match=rf"^line {number + 1}\b"):
        read_archive(split_lines(text.encode()))


HEADER = header_line("c")
MESSAGE = (
    '{"type":"message","message":{"role":"user","content":"hi","tool_calls":[],'
    '"tool_call_id":null,"usage":null,"seq":1,"created_at":"2026-01-01T00:00:00+00:00"},'
    '"idempotency_key":null}\n'
)


def _message(seq: int, role: str = "user", **fields: object) -> str:
    message: dict[str, object] = {
        "role": role,
        "content": "x",
        "tool_calls": [],
        "tool_call_id": None,
        "usage": None,
        "seq": seq,
        "created_at": "2026-01-01T00:00:00+00:00",
    }
    message.update(fields)
    return json.dumps({"type": "message", "message": message, "idempotency_key": None}) + "\n"


def _call(call_id: str) -> dict[str, str]:
    return {"id": call_id, "name": "t", "arguments": "{}"}


AT = "2026-01-01T00:00:00+00:00"
NOTE = (
    '{"type":"note","entry":{"id":1,"conversation_id":"c","text":"n","created_at":"%s"},'
    '"archived":%s}\n'
)
APPROVAL = (
    '{"type":"approval","approval":{"seq":2,"call_id":"a","approved":%s,"reason":""},'
    '"created_at":"%s","decided_at":%s}\n'
)
CALLED = HEADER + _message(1) + _message(2, "assistant", tool_calls=[_call("a")])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "^the archive is empty"),
        ('{"type": "agentik.conversation", "version": 3, "conversation_id": "c"}', "version 3"),
        ('{"type": "agentik.conversation", "version": true, "conversation_id": "c"}', "True"),
        ('{"type": "agentik.conversation", "version": 1}', "missing: conversation_id"),
        ('{"type":"agentik.conversation","version":2,"conversation_id":"c"}', "missing: owner"),
        (HEADER.replace('"owner"', '"x":1,"owner"'), "unknown: 'x'"),
        ('{"type": "message"}', "^line 1 must be the header"),
        (HEADER + "[1]\n", "^line 2 is not a JSON object"),
        (HEADER + "{oops\n", "^line 2 is not valid JSON"),
        (HEADER + "[" * 100_000 + "]" * 100_000 + "\n", "^line 2 is not valid JSON: .*nested"),
        (HEADER + '{"type":' + "[" * 5000 + "\n", "^line 2 is not valid JSON"),
        (HEADER + '{"type": "snapshot"}\n', "^line 2 has an unknown record type 'snapshot'"),
        (HEADER + '{"type": "summary", "summary": {}}\n', "^line 2 is not a valid summary"),
        (HEADER + MESSAGE.replace('"hi"', '"\\ud800"'), "^line 2 is not valid JSON: .*surrogate"),
        (HEADER + MESSAGE.replace('"seq":1', '"seq":1.9'), r"got a number 1\.9 @ \$\.message\.seq"),
        (HEADER + MESSAGE.replace('"seq":1', '"seq":"1"'), r"got a string '1' @ \$\.message\.seq"),
        (HEADER + MESSAGE.replace('"seq":1', '"seq":true'), r"boolean True @ \$\.message\.seq"),
        (HEADER + MESSAGE.replace('"hi"', '["a","b"]'), r"got an array .* @ \$\.message\.content"),
        (HEADER + MESSAGE.replace('"tool_calls":[]', '"tool_calls":{}'), "expected an array"),
        (HEADER + MESSAGE.replace('"user"', '"root"'), "expected one of 'system', 'user'"),
        (HEADER + MESSAGE.replace('"seq":1', '"seq":1,"x":1'), "unknown fields 'x' @"),
        (HEADER + MESSAGE.replace("+00:00", ""), "has no time zone"),
        (HEADER + MESSAGE.replace("2026-01-01T", "2026-W01-1T"), "is not RFC 3339"),
        (HEADER + MESSAGE.replace('"seq":1', '"seq":2'), "^line 2: messages must have seqs 1, 2"),
        (HEADER + _message(1, "system"), "^line 2: message 1 is a system message"),
        (
            HEADER + _message(1, usage={"prompt_tokens": -1, "completion_tokens": 0}),
            "^line 2: message 1 has prompt_tokens -1",
        ),
        (
            HEADER + _message(1, usage={"prompt_tokens": 2**63, "completion_tokens": 0}),
            "^line 2: message 1 has prompt_tokens",
        ),
        (HEADER + _message(1, "tool", tool_call_id="a"), "^line 2: message 1 answers call 'a'"),
        (HEADER + _message(1, "tool"), "^line 2: message 1 is a tool result without"),
        (HEADER + _message(1, "user", tool_call_id="a"), "^line 2: .* only tool results answer"),
        (HEADER + _message(1, "user", tool_calls=[_call("a")]), "only assistant messages make"),
        (
            CALLED + _message(3, "tool", tool_call_id="a") + _message(4, "tool", tool_call_id="a"),
            "^line 5: message 4 is a second result for call 'a'",
        ),
        (
            HEADER + _message(1, "assistant", tool_calls=[_call("a"), _call("a")]),
            "^line 2: message 1 makes call 'a' again",
        ),
        (
            CALLED
            + _message(3, "tool", tool_call_id="a")
            + _message(4, "assistant", tool_calls=[_call("a")]),
            "^line 5: message 4 makes call 'a' again \\(message 2 made it\\)",
        ),
        (CALLED + _message(3, "user"), "^line 4: message 3 \\(user\\) comes while calls 'a'"),
        (
            CALLED + _message(3, "tool", tool_call_id="a") + NOTE % (AT, '"false"'),
            r"^line 5 is not a valid note record: expected true or false, got a string 'false'",
        ),
        (
            CALLED + APPROVAL % ('"no"', AT, "null"),
            r"^line 4 is not a valid approval record: expected true or false, got a string 'no'",
        ),
        (CALLED + APPROVAL % ("true", AT, "null"), "^line 4: the approval of call 'a' must have"),
        (CALLED + APPROVAL.replace('"a"', '"b"') % ("null", AT, "null"), "^line 4: an approval"),
        (
            CALLED + NOTE.replace('"c"', '"d"') % (AT, "false"),
            "^line 4: the note names conversation 'd', not the archive's 'c'",
        ),
        (
            CALLED + APPROVAL % ("null", AT, "null") + NOTE % (AT, "false"),
            "^line 5: a note record comes after the approval records",
        ),
    ],
)
def test_bad_archives_are_refused(text: str, message: str) -> None:
    with pytest.raises(ArchiveFormatError, match=message) as refused:
        read_archive(split_lines(text.encode()))
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("conversation_id", "owner", "message"),
    [
        ("a\x00b", None, "conversation_id must be 1..200 printable"),
        ("a\nb", None, "conversation_id must be 1..200 printable"),
        ("x" * 1_000_000, None, "conversation_id must be 1..200 printable"),
        ("bob\x1fnotes", None, "conversation_id must be 1..200 printable"),
        ("   ", None, "conversation_id must be .* not only spaces"),
        ("", None, "conversation_id must be"),
        ("c", "bob\x1f", "owner must be 1..48"),
        ("c", "alice\n", "owner must be 1..48"),
        ("c", "", "owner must be 1..48"),
        ("c", "a" * 49, "owner must be 1..48"),
    ],
)
def test_header_ids_are_checked_as_the_api_checks_them(
    conversation_id: str, owner: str | None, message: str
) -> None:
    """An id the API would refuse never reaches a store: no control
    character, no U+001F (which would plant the conversation in another
    owner's namespace), at most 200 characters; owners are owner names."""
    text = header_line(conversation_id, owner) + MESSAGE
    with pytest.raises(ArchiveFormatError, match=f"^line 1: the header's {message}"):
        read_archive(split_lines(text.encode()))


def test_version_1_is_the_default_owners() -> None:
    """An archive from before owners were kept reads as the default owner's."""
    header = '{"type":"agentik.conversation","version":1,"conversation_id":"c"}\n'
    archive = read_archive(split_lines((header + MESSAGE).encode()))
    assert (archive.conversation_id, archive.owner, len(archive.records)) == ("c", None, 1)


def test_line_numbers_count_only_newlines() -> None:
    """A raw U+2028 or U+0085 inside a string does not end a line (the file is
    split at ``\\n`` only), so the number is the one an editor shows."""
    text = HEADER + MESSAGE.replace('"hi"', '"a\u2028b\x85c"') + _message(2, "system")
    with pytest.raises(ArchiveFormatError, match=r"^line 3: message 2 is a system message"):
        read_archive(split_lines(text.encode()))
    with pytest.raises(ArchiveFormatError, match=r"^line 2 is not valid JSON: not valid UTF-8"):
        read_archive([HEADER.encode(), b'{"type": "\xff"}'])

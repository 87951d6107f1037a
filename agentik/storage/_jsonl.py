"""A conversation's archive as JSON Lines: what ``agentik export`` and
``GET …/export`` write, and ``agentik import`` reads.

The first line is a header, ``{"type": "agentik.conversation", "version": 2,
"conversation_id": …, "owner": …}`` (``owner`` null for the default owner;
version 1, from before owners were kept, has no ``owner`` and is read as the
default owner's); every other line is one record (``agentik.storage._archive``)
with its ``type``: ``message``, ``note``, ``reflection``, ``approval``,
``turn_failure``, ``summary``. Values inside are the one converter's JSON
(``agentik._serde``): timestamps RFC 3339 in UTC to the microsecond, so a
round trip is exact. A record never spans lines: the line breaks
``str.splitlines`` knows beyond ``\\n`` (U+0085, U+2028, U+2029) are escaped
inside strings.

Reading is strict, and reads what the exporter writes and nothing else: one
schema, exact JSON types (the converter coerces nothing: ``"approved": "no"``
is refused, not read as true), ids checked as the API checks them (the
header's conversation id printable and at most 200 characters, its owner an
owner name), JSON as the API reads it (``agentik._input.decode_json``: no
lone surrogates, no nesting deeper than 100, no number beyond a double), and
the conversation's history rules (``_archive_rules``) over the whole file.
The first problem is refused as one ``ArchiveFormatError`` line naming the
line number, before anything is stored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final

import attrs

from agentik._errors import AgentikError
from agentik._input import InputError, checked_id, decode_json
from agentik._json import JsonObject
from agentik._scope import checked_owner
from agentik._serde import converter, structure_error
from agentik.storage._archive import (
    ArchivedApproval,
    ArchivedFailure,
    ArchivedMessage,
    ArchivedNote,
    ArchivedOutput,
    ArchivedReflection,
    ArchivedSummary,
    ArchiveRecord,
)
from agentik.storage._archive_rules import ArchiveRuleError, check_archive

ARCHIVE_VERSION: Final = 2
"""What this agentik writes; it reads 1 (no owner) and 2."""
HEADER_TYPE: Final = "agentik.conversation"
MEDIA_TYPE: Final = "application/jsonl"

_TYPES: dict[type, str] = {
    ArchivedMessage: "message",
    ArchivedNote: "note",
    ArchivedReflection: "reflection",
    ArchivedApproval: "approval",
    ArchivedFailure: "turn_failure",
    ArchivedOutput: "turn_output",
    ArchivedSummary: "summary",
}
_CLASSES = {name: cls for cls, name in _TYPES.items()}
_HEADER_FIELDS = {
    1: ("type", "version", "conversation_id"),
    2: ("type", "version", "conversation_id", "owner"),
}


class ArchiveFormatError(AgentikError):
    """A conversation archive that cannot be read; the message names the line."""


@attrs.frozen(kw_only=True)
class Archive:
    """What an archive holds: whose conversation, and its records in order."""

    conversation_id: str
    """The id its owner knows it by (never an owner-scoped stored id)."""
    owner: str | None
    """Its owner; None for the default owner."""
    records: tuple[ArchiveRecord, ...]


def header_line(conversation_id: str, owner: str | None = None) -> str:
    return _line(
        {
            "type": HEADER_TYPE,
            "version": ARCHIVE_VERSION,
            "conversation_id": conversation_id,
            "owner": owner,
        }
    )


def record_line(record: ArchiveRecord, conversation_id: str) -> str:
    """One record as a line; notes and reflections name ``conversation_id``
    (the id the archive is for, not a store's internal one)."""
    if isinstance(record, ArchivedNote):
        record = attrs.evolve(
            record, entry=attrs.evolve(record.entry, conversation_id=conversation_id)
        )
    elif isinstance(record, ArchivedReflection):
        record = attrs.evolve(
            record,
            reflection=attrs.evolve(record.reflection, conversation_id=conversation_id),
        )
    data: JsonObject = converter.unstructure(record)
    return _line({"type": _TYPES[type(record)], **data})


# Characters ``str.splitlines`` (and so many a reader) ends a line at, which
# ``json.dumps(ensure_ascii=False)`` leaves raw inside strings; the C0 ones it
# escapes already. Escaped here, a record stays on its one line.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _line(data: JsonObject) -> str:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.translate(_LINE_BREAKS) + "\n"


def split_lines(data: bytes) -> list[bytes]:
    """An archive file's lines: split at ``\\n`` only (the exporter's line
    end), so line numbers are an editor's."""
    return data.split(b"\n")


def read_archive(lines: Iterable[bytes | str]) -> Archive:
    """The archive ``lines`` hold (UTF-8 bytes, or text), or ``ArchiveFormatError``.

    Blank lines are skipped; everything else must be exactly what the
    exporter writes."""
    header: tuple[str, str | None] | None = None
    records: list[ArchiveRecord] = []
    numbers: list[int] = []
    for number, line in enumerate(lines, 1):
        raw = line.encode("utf-8", "surrogatepass") if isinstance(line, str) else line
        if not raw.strip():
            continue
        data = _object(number, raw)
        if header is None:
            header = _header(number, data)
            continue
        records.append(_record(number, data, header[0]))
        numbers.append(number)
    if header is None:
        raise ArchiveFormatError("the archive is empty: no header line")
    try:
        check_archive(records)
    except ArchiveRuleError as error:
        raise ArchiveFormatError(f"line {numbers[error.index]}: {error}") from None
    return Archive(conversation_id=header[0], owner=header[1], records=tuple(records))


def _object(number: int, raw: bytes) -> dict[str, object]:
    try:
        data = decode_json(raw)
    except (InputError, RecursionError) as error:  # decode_json bounds nesting; belt and braces
        raise ArchiveFormatError(f"line {number} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ArchiveFormatError(f"line {number} is not a JSON object")
    return dict(data)


def _header(number: int, data: dict[str, object]) -> tuple[str, str | None]:
    kind = data.get("type")
    if kind != HEADER_TYPE:
        raise ArchiveFormatError(
            f'line {number} must be the header ({{"type": "{HEADER_TYPE}", …}}),'
            f" got type {_shown(kind)}"
        )
    version = data.get("version")
    fields = _HEADER_FIELDS.get(version) if type(version) is int else None
    if fields is None:
        raise ArchiveFormatError(
            f"archive version {_shown(version)} is not one this agentik reads"
            f" ({', '.join(map(str, _HEADER_FIELDS))})"
        )
    unknown = sorted(set(data) - set(fields))
    missing = [name for name in fields if name not in data]
    if unknown or missing:
        raise ArchiveFormatError(
            f"line {number}: a version {version} header has exactly the fields"
            f" {', '.join(fields)}"
            + (f"; unknown: {', '.join(map(_shown, unknown))}" if unknown else "")
            + (f"; missing: {', '.join(missing)}" if missing else "")
        )
    conversation_id, owner = data["conversation_id"], data.get("owner")
    try:
        if not isinstance(conversation_id, str):
            raise InputError(f"conversation_id must be a string, got {_shown(conversation_id)}")
        checked_id(conversation_id, "conversation_id")
        if owner is not None:
            if not isinstance(owner, str):
                raise InputError(f"owner must be a string or null, got {_shown(owner)}")
            checked_owner(owner)
    except InputError as error:
        raise ArchiveFormatError(f"line {number}: the header's {error}") from None
    return conversation_id, owner


def _record(number: int, data: dict[str, object], conversation_id: str) -> ArchiveRecord:
    kind = data.pop("type", None)
    cls = _CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ArchiveFormatError(f"line {number} has an unknown record type {_shown(kind)}")
    try:
        record: ArchiveRecord = converter.structure(data, cls)
    except Exception as error:  # cattrs' validation errors (an exception group): refused
        raise ArchiveFormatError(
            f"line {number} is not a valid {kind} record: {structure_error(error)}"
        ) from None
    named = (
        record.entry.conversation_id
        if isinstance(record, ArchivedNote)
        else record.reflection.conversation_id
        if isinstance(record, ArchivedReflection)
        else conversation_id
    )
    if named != conversation_id:
        raise ArchiveFormatError(
            f"line {number}: the {kind} names conversation {_shown(named)},"
            f" not the archive's {conversation_id!r}"
        )
    return record


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"

"""A conversation's archive as JSON Lines, version 1: what ``agentik export``
writes, ``agentik import`` and ``GET …/export`` read and serve.

The first line is a header, ``{"type": "agentik.conversation", "version": 1,
"conversation_id": …}``; every other line is one record
(``agentik.storage._archive``) with its ``type``: ``message``, ``note``,
``reflection``, ``approval``, ``turn_failure``, ``summary``. Values inside are the one
converter's JSON (``agentik._serde``): timestamps RFC 3339 in UTC to the
microsecond, so a round trip is exact. Reading is strict: an unknown type or
field, a newer version, a line that is not a JSON object is refused with its
line number, before anything is stored. A record never spans lines: the
line breaks ``str.splitlines`` knows beyond ``\n`` (U+0085, U+2028, U+2029)
are escaped inside strings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final

import attrs

from agentik._errors import AgentikError
from agentik._json import JsonObject
from agentik._serde import converter
from agentik.storage._archive import (
    ArchivedApproval,
    ArchivedFailure,
    ArchivedMessage,
    ArchivedNote,
    ArchivedReflection,
    ArchivedSummary,
    ArchiveRecord,
)

ARCHIVE_VERSION: Final = 1
HEADER_TYPE: Final = "agentik.conversation"
MEDIA_TYPE: Final = "application/jsonl"

_TYPES: dict[type, str] = {
    ArchivedMessage: "message",
    ArchivedNote: "note",
    ArchivedReflection: "reflection",
    ArchivedApproval: "approval",
    ArchivedFailure: "turn_failure",
    ArchivedSummary: "summary",
}
_CLASSES = {name: cls for cls, name in _TYPES.items()}


class ArchiveFormatError(AgentikError):
    """A conversation archive that cannot be read; the message names the line."""


def header_line(conversation_id: str) -> str:
    return _line(
        {"type": HEADER_TYPE, "version": ARCHIVE_VERSION, "conversation_id": conversation_id}
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


def read_archive(lines: Iterable[str]) -> tuple[str, list[ArchiveRecord]]:
    """The conversation id of the header and the records, or ``ArchiveFormatError``."""
    conversation_id: str | None = None
    records: list[ArchiveRecord] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as error:
            raise ArchiveFormatError(f"line {number} is not JSON: {error}") from None
        if not isinstance(data, dict):
            raise ArchiveFormatError(f"line {number} is not a JSON object")
        kind = data.pop("type", None)
        if conversation_id is None:
            conversation_id = _header(number, kind, data)
            continue
        cls = _CLASSES.get(kind) if isinstance(kind, str) else None
        if cls is None:
            raise ArchiveFormatError(f"line {number} has an unknown record type {kind!r}")
        try:
            records.append(converter.structure(data, cls))
        except Exception as error:  # cattrs' validation errors: the line is refused
            raise ArchiveFormatError(
                f"line {number} is not a valid {kind} record: {_reason(error)}"
            ) from None
    if conversation_id is None:
        raise ArchiveFormatError("the archive is empty: no header line")
    return conversation_id, records


def _header(number: int, kind: object, data: dict[str, object]) -> str:
    if kind != HEADER_TYPE:
        raise ArchiveFormatError(
            f'line {number} must be the header ({{"type": "{HEADER_TYPE}", …}}), got type {kind!r}'
        )
    version = data.get("version")
    if version != ARCHIVE_VERSION:
        raise ArchiveFormatError(
            f"archive version {version!r} is not one this agentik reads ({ARCHIVE_VERSION})"
        )
    conversation_id = data.get("conversation_id")
    if not isinstance(conversation_id, str) or not conversation_id:
        raise ArchiveFormatError("the header's conversation_id must be a non-empty string")
    return conversation_id


def _reason(error: Exception) -> str:
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_reason(e) for e in error.exceptions)  # type: ignore[arg-type]
    return str(error) or type(error).__name__

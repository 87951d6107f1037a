"""The one cattrs converter: agentik values <-> JSON-compatible data.

Built here by ``make_converter()`` (cattrs' preconf pattern) and shared as
``converter``; code elsewhere never imports cattrs. Datetimes travel as
RFC 3339 text in UTC, enums as their values, tuples as lists.
"""

from __future__ import annotations

from datetime import UTC, datetime

import cattrs
from cattrs.preconf.json import configure_converter


def _datetime_from_text(value: object, _: object) -> datetime:
    if not isinstance(value, str):
        raise TypeError(f"expected an RFC 3339 timestamp string, got {value!r}")
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp {value!r} has no time zone")
    return parsed.astimezone(UTC)


def _datetime_to_text(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


def make_converter() -> cattrs.Converter:
    """A converter configured for agentik's values (JSON-compatible output)."""
    converter = cattrs.Converter(forbid_extra_keys=True)
    configure_converter(converter)
    converter.register_structure_hook(datetime, _datetime_from_text)
    converter.register_unstructure_hook(datetime, _datetime_to_text)
    return converter


converter = make_converter()

"""A message's parts as the SQL backends keep them: one JSON column, inline
data moved to the blob table.

``parts_column`` encodes a message's parts as the ``message.parts`` column
(the converter's JSON, each part with inline data naming it by ``"blob"``,
its hash, instead of carrying it) and returns the blobs to store beside it;
``parts_of`` reads the column back with the blobs found. The column is
agentik's own ASCII JSON (``dumps_ascii``: no U+0000, no lone surrogate),
so PostgreSQL keeps it as text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import cast

import attrs

from agentik._errors import StoreError
from agentik._json import dumps_ascii
from agentik._parts import Part, TextPart, blob_hash
from agentik._serde import converter

_unstructure = converter.get_unstructure_hook(Part)
_structure = cast("Callable[[object, object], Part]", converter.get_structure_hook(Part))

NO_BLOBS: Mapping[str, bytes] = {}


def parts_column(parts: Sequence[Part]) -> tuple[str, dict[str, bytes]]:
    """The ``parts`` column of ``parts``, and its blobs by hash (deduplicated)."""
    items: list[object] = []
    blobs: dict[str, bytes] = {}
    for part in parts:
        item = cast("dict[str, object]", _unstructure(part))
        if not isinstance(part, TextPart) and part.data is not None:
            key = blob_hash(part.data)
            blobs[key] = part.data
            del item["data"]
            item["blob"] = key
        items.append(item)
    return dumps_ascii(items), blobs


def blob_keys(column: str) -> list[str]:
    """The hashes of the blobs a ``parts`` column names."""
    return [
        item["blob"] for item in cast("list[dict[str, str]]", json.loads(column)) if "blob" in item
    ]


def parts_of(column: str, blobs: Mapping[str, bytes]) -> tuple[Part, ...]:
    """The parts of a ``parts`` column, each blob's data put back."""
    parts: list[Part] = []
    for item in cast("list[dict[str, object]]", json.loads(column)):
        key = item.pop("blob", None)
        if key is None:
            parts.append(_structure(item, Part))
            continue
        data = blobs.get(cast("str", key))
        if data is None:
            raise StoreError(
                f"blob {key!r} of a message is gone: its conversation was deleted while it was read"
            )
        item["data"] = ""  # structured as empty data, then given its own
        part = _structure(item, Part)
        if isinstance(part, TextPart):
            raise StoreError(f"a text part names blob {key!r}")
        parts.append(attrs.evolve(part, data=data))
    return tuple(parts)

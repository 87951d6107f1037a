"""Content parts as the transports take them: checked against ``[limits]
max_part_bytes`` before anything is stored, and handed to the agent.

Each transport reads its own wire shape (native JSON parts, A2A ``raw`` /
``url`` parts, AG-UI binary content) into ``Part`` values, then calls
``check_sizes``: one part past the limit refuses the whole request with 413
(``part_too_large``), so nothing of it is stored. ``turn_content`` gives
``ChatAgent.send``'s ``text`` and ``content`` for a turn's text and parts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from agentik._json import JsonValue
from agentik._parts import Part, TextPart, part_size
from agentik._serde import converter, structure_error
from agentik.server.http import HttpError, as_list

_structure = cast("Callable[[object, object], Part]", converter.get_structure_hook(Part))


def check_sizes(parts: Sequence[Part], limit: int, where: str) -> None:
    """Refuse a request with a part larger than ``limit`` bytes (413)."""
    for i, part in enumerate(parts):
        size = part_size(part)
        if size > limit:
            raise HttpError(
                413,
                f"{where}[{i}] holds {size} bytes; at most {limit} are allowed"
                " ([limits] max_part_bytes)",
                code="part_too_large",
            )


def parts_of_json(raw: JsonValue, limit: int, where: str) -> tuple[Part, ...]:
    """Native content parts: ``[{"type": "text" | "image" | "file", …}]``,
    inline ``data`` as base64 (the converter's form); 422 naming the field."""
    items = as_list(raw, f"field '{where}'")
    if not items:
        raise HttpError(422, f"field '{where}' must hold at least one part", code="invalid_field")
    parts: list[Part] = []
    for i, item in enumerate(items):
        try:
            parts.append(_structure(item, Part))
        except (ValueError, TypeError, ExceptionGroup) as error:  # worded by structure_error
            raise HttpError(
                422, f"field '{where}[{i}]': {structure_error(error)}", code="invalid_field"
            ) from None
    check_sizes(parts, limit, f"field '{where}'")
    return tuple(parts)


def input_modes(kinds: frozenset[str]) -> list[str]:
    """The media types a turn may carry, for an A2A agent card: text, and
    images (``image/*``) and files (``application/*``) when the agent takes them."""
    modes = ["text/plain"]
    if "image" in kinds:
        modes.append("image/*")
    if "file" in kinds:
        modes.append("application/*")
    return modes


def turn_content(text: str, parts: Sequence[Part]) -> tuple[str | None, list[Part] | None]:
    """``send``'s ``text`` and ``content`` for a turn of ``text`` and ``parts``."""
    if not parts:
        return text, None
    return None, [TextPart(text=text), *parts] if text else list(parts)

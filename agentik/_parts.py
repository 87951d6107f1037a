"""Content parts: what a message carries beside its text (images, files).

A ``Message`` keeps its text in ``content`` and its other parts, in order, in
``Message.parts``. An image or a file is either a ``url`` (the model fetches
it) or inline ``data`` (bytes, with its ``media_type``): exactly one of the
two, checked when the part is built, so a store or a model never sees half a
part. Stores keep inline data in a blob table of their own, by content hash
(``blob_hash``), so the same picture sent twice is stored once.
"""

from __future__ import annotations

import hashlib
from typing import TypeAlias

import attrs


class InvalidPart(ValueError):
    """A part built from values that do not make one (both url and data, data
    that is not bytes …); the message names the field and what it takes."""


def _check_source(
    instance: ImagePart | FilePart, _: attrs.Attribute[str | None], __: str | None
) -> None:
    kind, article = ("image", "an") if isinstance(instance, ImagePart) else ("file", "a")
    url, data = instance.url, instance.data
    if (url is None) == (data is None):
        raise InvalidPart(
            f"{article} {kind} part needs exactly one of url or data, got {_given(url, data)}"
        )
    if data is not None and type(data) is not bytes:
        raise InvalidPart(f"{kind} part data must be bytes, got {type(data).__name__}")
    if url is not None and (type(url) is not str or not url):
        raise InvalidPart(f"{kind} part url must be a non-empty string, got {url!r}")
    media_type = instance.media_type
    if data is not None and not media_type:
        raise InvalidPart(
            f"{article} {kind} part with data needs its media_type, got {media_type!r}"
        )
    if media_type is not None and (type(media_type) is not str or "/" not in media_type):
        raise InvalidPart(
            f"{kind} part media_type must be a type/subtype string, got {media_type!r}"
        )


def _check_text(value: object) -> None:
    if type(value) is not str:
        raise InvalidPart(f"text part text must be a string, got {type(value).__name__}")


def _check_name(value: object) -> None:
    if value is not None and type(value) is not str:
        raise InvalidPart(f"file part filename must be a string, got {type(value).__name__}")


def _given(url: object, data: object) -> str:
    return "both" if url is not None else "neither"


@attrs.frozen(kw_only=True)
class TextPart:
    """A run of text among other parts (``send(content=[...])``); the texts
    of a message's parts, joined, are its ``content``."""

    text: str = attrs.field(validator=lambda _, __, value: _check_text(value))


@attrs.frozen(kw_only=True)
class ImagePart:
    """An image, by ``url`` or as inline ``data`` with its ``media_type``."""

    url: str | None = None
    data: bytes | None = attrs.field(default=None, repr=False)
    media_type: str | None = attrs.field(default=None, validator=_check_source)
    """``image/png``, ``image/jpeg`` …; required with ``data``."""


@attrs.frozen(kw_only=True)
class FilePart:
    """A file (a PDF, a text file …), by ``url`` or as inline ``data`` with its
    ``media_type``; ``filename`` as the sender named it."""

    url: str | None = None
    data: bytes | None = attrs.field(default=None, repr=False)
    media_type: str | None = attrs.field(default=None, validator=_check_source)
    filename: str | None = attrs.field(default=None, validator=lambda _, __, v: _check_name(v))


Part: TypeAlias = TextPart | ImagePart | FilePart
"""One part of a message's content."""

PART_TYPES = (TextPart, ImagePart, FilePart)


def blob_hash(data: bytes) -> str:
    """The key a store files inline data under: its SHA-256, hex."""
    return hashlib.sha256(data).hexdigest()


def part_size(part: Part) -> int:
    """Bytes a part carries inline (its data, or its text as UTF-8): what
    ``[limits] max_part_bytes`` bounds."""
    if isinstance(part, TextPart):
        return len(part.text.encode("utf-8", "surrogatepass"))
    return 0 if part.data is None else len(part.data)

"""The one cattrs converter: agentik values <-> JSON-compatible data.

Built here by ``make_converter()`` (cattrs' preconf pattern) and shared as
``converter``; code elsewhere never imports cattrs. Datetimes travel as
RFC 3339 text in UTC, enums as their values, tuples as lists.

Structuring is strict: it reads data that came from outside (an archive a
person may have edited), and cattrs' own hooks coerce (``int("1")``,
``bool("no")`` is True, ``str(["a"])``), so the primitive hooks here take
exactly their JSON type and nothing else: an ``int`` field takes an integer
(not ``true``, not ``1.9``, not ``"1"``), a ``bool`` field ``true`` or
``false``, a ``str`` field a string, a sequence a JSON array (not a string
or an object), a timestamp RFC 3339 text with its offset. Unknown keys are
refused. Bytes (a part's inline data) travel as standard base64 text, read
strictly (no stray characters, correct padding). Content parts are a tagged
union keyed by ``"type"`` (``text``, ``image``, ``file``); a message without
parts is written without the ``parts`` key, as it was before parts existed.
``structure_error`` words what went wrong as one line, with the
path of each bad field (``$.message.seq``).
"""

from __future__ import annotations

import base64
import binascii
import enum
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import get_args, get_origin

import cattrs
from cattrs.cols import homogenous_tuple_structure_factory, list_structure_factory
from cattrs.gen import make_dict_unstructure_fn, override
from cattrs.preconf.json import configure_converter
from cattrs.v import format_exception

from agentik._messages import Message
from agentik._parts import FilePart, ImagePart, InvalidPart, Part, TextPart


class StrictTypeError(TypeError):
    """A value of another JSON type than the field's; the message names both."""


class StrictValueError(ValueError):
    """A value of the right JSON type but not one the field takes (a timestamp
    that is not RFC 3339); the message names it."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


def _json_type(value: object) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    names |= {list: "an array", tuple: "an array", dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _refuse(expected: str, value: object) -> StrictTypeError:
    return StrictTypeError(f"expected {expected}, got {_json_type(value)} {_shown(value)}")


def _int(value: object, _: object) -> int:
    if type(value) is not int:  # bool is an int subclass: ``true`` is not a count
        raise _refuse("an integer", value)
    return value


def _float(value: object, _: object) -> float:
    if type(value) is not float and type(value) is not int:
        raise _refuse("a number", value)
    return float(value)


def _str(value: object, _: object) -> str:
    if type(value) is not str:
        raise _refuse("a string", value)
    return value


def _bool(value: object, _: object) -> bool:
    if type(value) is not bool:
        raise _refuse("true or false", value)
    return value


_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?"
    r"(?P<offset>[Zz]|[+-][0-9]{2}:[0-9]{2})?"
)
"""RFC 3339's date-time (to the microsecond: what a datetime holds); Python's
``fromisoformat`` alone also reads week dates, basic formats and no offset."""


def _datetime_from_text(value: object, _: object) -> datetime:
    if not isinstance(value, str):
        raise _refuse("an RFC 3339 timestamp string", value)
    match = _RFC3339.fullmatch(value)
    if match is None:
        raise StrictValueError(
            f"timestamp {_shown(value)} is not RFC 3339 (2026-01-02T03:04:05.000006+00:00)"
        )
    if match["offset"] is None:
        raise StrictValueError(f"timestamp {value!r} has no time zone")
    try:
        return datetime.fromisoformat(value.upper()).astimezone(UTC)
    except (ValueError, OverflowError) as error:  # day 31 of February, or before year 1 in UTC
        raise StrictValueError(f"timestamp {_shown(value)} is not a valid time: {error}") from None


def _bytes_from_base64(value: object, _: object) -> bytes:
    if type(value) is not str:
        raise _refuse("base64 text", value)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):  # ValueError: a non-ASCII character
        raise StrictValueError(f"expected base64 text, got {_shown(value)}") from None


def _bytes_to_base64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


_PART_TAGS: dict[type, str] = {TextPart: "text", ImagePart: "image", FilePart: "file"}
_PART_CLASSES = {tag: cls for cls, tag in _PART_TAGS.items()}


def _configure_parts(converter: cattrs.Converter) -> None:
    """``Part`` as a union tagged by ``"type"``, fields left out when None
    (cattrs' own tagged union names neither an unknown tag nor the tags it knows)."""
    unstructure: dict[type, Callable[[Part], dict[str, object]]] = {
        cls: make_dict_unstructure_fn(cls, converter, _cattrs_omit_if_default=True)
        for cls in _PART_TAGS
    }

    def to_data(part: Part) -> dict[str, object]:
        cls = type(part)
        return {"type": _PART_TAGS[cls], **unstructure[cls](part)}

    def from_data(value: object, _: object) -> Part:
        if type(value) is not dict:
            raise _refuse("an object", value)
        tag = value.get("type")
        cls = _PART_CLASSES.get(tag) if type(tag) is str else None
        if cls is None:
            raise StrictValueError(
                f"expected a part type of 'text', 'image' or 'file', got {_shown(tag)}"
            )
        part: Part = converter.structure({k: v for k, v in value.items() if k != "type"}, cls)
        return part

    converter.register_structure_hook(Part, from_data)
    converter.register_unstructure_hook(Part, to_data)
    for cls in _PART_TAGS:
        converter.register_unstructure_hook(cls, to_data)


def _datetime_to_text(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


def _is_enum(cls: object) -> bool:
    return isinstance(cls, type) and issubclass(cls, enum.Enum)


def _enum_factory(cls: type[enum.Enum], _: cattrs.Converter) -> Callable[[object, object], object]:
    """An enum from exactly one of its values (``Role("user")``), named in the error."""
    members = {member.value: member for member in cls}
    names = ", ".join(repr(value) for value in members)

    def structure(value: object, _: object) -> enum.Enum:
        member = members.get(value) if isinstance(value, str | int) else None
        if member is None or type(value) is not type(member.value):
            raise StrictValueError(f"expected one of {names}, got {_shown(value)}")
        return member

    return structure


def _is_array(cls: object) -> bool:
    origin = get_origin(cls)
    if origin is list:
        return True
    return origin is tuple and len(get_args(cls)) == 2 and get_args(cls)[1] is Ellipsis


def _array_factory(cls: type, converter: cattrs.Converter) -> Callable[[object, object], object]:
    """A homogeneous tuple or a list: cattrs' own hook, for a JSON array only
    (it would iterate a string's characters or an object's keys)."""
    if get_origin(cls) is list:
        inner = list_structure_factory(cls, converter)
    else:
        inner = homogenous_tuple_structure_factory(cls, converter)

    def structure(value: object, target: object) -> object:
        if not isinstance(value, list | tuple):
            raise _refuse("an array", value)
        return inner(value, target)

    return structure


def make_converter() -> cattrs.Converter:
    """A converter configured for agentik's values (JSON-compatible output,
    strict input)."""
    converter = cattrs.Converter(forbid_extra_keys=True)
    configure_converter(converter)
    converter.register_structure_hook(int, _int)
    converter.register_structure_hook(float, _float)
    converter.register_structure_hook(str, _str)
    converter.register_structure_hook(bool, _bool)
    converter.register_structure_hook(datetime, _datetime_from_text)
    converter.register_unstructure_hook(datetime, _datetime_to_text)
    converter.register_structure_hook_factory(_is_array, _array_factory)
    converter.register_structure_hook_factory(_is_enum, _enum_factory)
    converter.register_structure_hook(bytes, _bytes_from_base64)
    converter.register_unstructure_hook(bytes, _bytes_to_base64)
    _configure_parts(converter)
    converter.register_unstructure_hook(
        Message,
        make_dict_unstructure_fn(Message, converter, parts=override(omit_if_default=True)),
    )
    return converter


def _format(error: BaseException, cls: type | None) -> str:
    if isinstance(error, StrictTypeError | StrictValueError | InvalidPart):
        return str(error)
    if isinstance(error, cattrs.ForbiddenExtraKeysError):  # names shown quoted: one line
        return f"unknown fields {', '.join(_shown(k) for k in sorted(error.extra_fields))}"
    return format_exception(error, cls)


def structure_error(error: Exception) -> str:
    """One line for a failed ``converter.structure``: each problem and its path
    (``expected an integer, got a string '1' @ $.message.seq``)."""
    return "; ".join(cattrs.transform_error(error, format_exception=_format))


converter = make_converter()

"""Content parts: built whole or not at all, and carried through the one
converter (JSON, base64 data) without a byte changed."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentik import FilePart, ImagePart, Message, Role, TextPart
from agentik._parts import InvalidPart, Part, blob_hash, part_size
from agentik._serde import converter, structure_error
from tests import strategies as s


@given(s.parts)
def test_a_part_survives_json(part: Part) -> None:
    """Odd bytes, empty data, any unicode: unstructure -> JSON text -> structure."""
    data = json.loads(json.dumps(converter.unstructure(part, Part)))
    assert converter.structure(data, Part) == part


@given(s.messages, st.lists(s.parts, max_size=4))
def test_a_message_with_parts_survives_json(message: Message, parts: list[Part]) -> None:
    """A message keeps its parts, in order, through JSON."""
    with_parts = Message(message.role, message.content, parts=parts)
    data = json.loads(json.dumps(converter.unstructure(with_parts)))
    assert converter.structure(data, Message) == with_parts
    assert converter.structure(data, Message).parts == tuple(parts)


def test_a_message_without_parts_is_written_as_before() -> None:
    """No ``parts`` key for a text-only message: archives and the native API unchanged."""
    assert "parts" not in converter.unstructure(Message(Role.USER, "hi"))


def test_data_travels_as_base64() -> None:
    """The wire form the OpenAI data URL, A2A ``raw`` and AG-UI binary content use."""
    part = ImagePart(data=b"\x00\xff\xfe", media_type="image/png")
    assert converter.unstructure(part, Part) == {
        "type": "image",
        "data": "AP/+",
        "media_type": "image/png",
    }


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"type": "image", "data": "A"}, "expected base64 text, got 'A' @ $.data"),
        ({"type": "image", "data": "AA==\n"}, "expected base64 text, got 'AA==\\n' @ $.data"),
        (
            {"type": "image", "data": 3, "media_type": "a/b"},
            "expected base64 text, got an integer 3 @ $.data",
        ),
        (
            {"type": "video", "url": "u"},
            "expected a part type of 'text', 'image' or 'file', got 'video' @ $",
        ),
        ({"url": "u"}, "expected a part type of 'text', 'image' or 'file', got None @ $"),
        (
            {"type": "image", "url": "u", "data": "AA==", "media_type": "a/b"},
            "an image part needs exactly one of url or data, got both @ $",
        ),
        ({"type": "file"}, "a file part needs exactly one of url or data, got neither @ $"),
        (
            {"type": "file", "data": "AA=="},
            "a file part with data needs its media_type, got None @ $",
        ),
        ({"type": "text", "text": "x", "url": "u"}, "unknown fields 'url' @ $"),
    ],
)
def test_bad_part_data_is_refused_by_name(data: dict[str, object], expected: str) -> None:
    """Each problem named, with its path; never a half-built part."""
    with pytest.raises(Exception) as info:
        converter.structure(data, Part)
    assert structure_error(info.value) == expected


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda: ImagePart(), "an image part needs exactly one of url or data, got neither"),
        (
            lambda: ImagePart(url="u", data=b"x", media_type="image/png"),
            "an image part needs exactly one of url or data, got both",
        ),
        (lambda: ImagePart(data=b"x"), "an image part with data needs its media_type, got None"),
        (
            lambda: FilePart(data=bytearray(b"x"), media_type="text/plain"),  # type: ignore[arg-type]
            "file part data must be bytes, got bytearray",
        ),
        (
            lambda: FilePart(data=b"x", media_type="pdf"),
            "file part media_type must be a type/subtype string, got 'pdf'",
        ),
        (lambda: ImagePart(url=""), "image part url must be a non-empty string, got ''"),
        (lambda: TextPart(text=b"x"), "text part text must be a string, got bytes"),  # type: ignore[arg-type]
        (
            lambda: FilePart(url="u", filename=3),  # type: ignore[arg-type]
            "file part filename must be a string, got int",
        ),
    ],
)
def test_a_part_is_whole_or_not_built(build: object, expected: str) -> None:
    with pytest.raises(InvalidPart, match=f"^{expected}$"):
        build()  # type: ignore[operator]


def test_message_parts_are_a_tuple() -> None:
    """A list given is kept as a tuple: messages stay hashable."""
    part = ImagePart(url="https://example.com/a.png")
    message = Message(Role.USER, "look", parts=[part])
    assert message.parts == (part,)
    assert hash(message) == hash(Message(Role.USER, "look", parts=(part,)))


@given(st.binary(max_size=64))
def test_size_and_hash_of_data(data: bytes) -> None:
    part = FilePart(data=data, media_type="application/octet-stream")
    assert part_size(part) == len(data)
    assert blob_hash(data) == blob_hash(bytes(data))
    assert len(blob_hash(data)) == 64


@given(st.text())
def test_size_of_text_is_its_utf8_length(text: str) -> None:
    assert part_size(TextPart(text=text)) == len(text.encode("utf-8", "surrogatepass"))

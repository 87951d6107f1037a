"""The three transports' part readers, as properties: any bytes sent as
base64 come back as the part's data, byte for byte, in order, and the size
limit takes exactly ``max_part_bytes`` and refuses one byte more, whatever
the transport."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentik import FilePart, ImagePart
from agentik.server.a2a._send import parse_send
from agentik.server.agui._input import parse_run_input
from agentik.server.http import HttpError
from agentik.server.native._wire import parse_turn_request

blobs = st.lists(st.binary(max_size=200), min_size=1, max_size=4)
images = st.booleans()


def _a2a(parts: list[dict[str, object]]) -> dict[str, object]:
    return {"message": {"messageId": "m", "role": "ROLE_USER", "parts": parts}}


def _agui(content: list[dict[str, object]]) -> dict[str, object]:
    return {
        "threadId": "t",
        "runId": "r",
        "messages": [{"id": "u", "role": "user", "content": content}],
    }


def _expected(data: bytes, image: bool) -> ImagePart | FilePart:
    if image:
        return ImagePart(data=data, media_type="image/png")
    return FilePart(data=data, media_type="application/pdf")


def _media(image: bool) -> str:
    return "image/png" if image else "application/pdf"


@given(blobs, st.lists(images, min_size=4, max_size=4), st.booleans())
def test_a2a_raw_parts_carry_any_bytes(data: list[bytes], kinds: list[bool], urlsafe: bool) -> None:
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    parts: list[dict[str, object]] = [
        {"raw": encode(d).decode().rstrip("=" if urlsafe else ""), "mediaType": _media(k)}
        for d, k in zip(data, kinds, strict=False)
    ]
    sent = parse_send(_a2a([{"text": "t"}, *parts]), max_part_bytes=200)
    assert sent.parts == tuple(_expected(d, k) for d, k in zip(data, kinds, strict=False))


@given(blobs, st.lists(images, min_size=4, max_size=4))
def test_agui_data_sources_carry_any_bytes(data: list[bytes], kinds: list[bool]) -> None:
    content: list[dict[str, object]] = [
        {
            "type": "image" if k else "document",
            "source": {
                "type": "data",
                "value": base64.b64encode(d).decode(),
                "mimeType": _media(k),
            },
        }
        for d, k in zip(data, kinds, strict=False)
    ]
    run = parse_run_input(_agui(content), max_part_bytes=200)
    assert run.parts == tuple(_expected(d, k) for d, k in zip(data, kinds, strict=False))


@given(blobs, st.lists(images, min_size=4, max_size=4))
def test_native_parts_carry_any_bytes(data: list[bytes], kinds: list[bool]) -> None:
    content: list[dict[str, object]] = [
        {
            "type": "image" if k else "file",
            "data": base64.b64encode(d).decode(),
            "media_type": _media(k),
        }
        for d, k in zip(data, kinds, strict=False)
    ]
    turn = parse_turn_request({"content": content}, 200)
    assert turn.parts == tuple(_expected(d, k) for d, k in zip(data, kinds, strict=False))


@pytest.mark.parametrize("transport", ["native", "a2a", "agui"])
@given(size=st.integers(0, 64), limit=st.integers(0, 64))
def test_the_limit_is_the_same_boundary_everywhere(transport: str, size: int, limit: int) -> None:
    encoded = base64.b64encode(b"\xff" * size).decode()
    if transport == "native":

        def parse() -> object:
            part = {"type": "image", "data": encoded, "media_type": "image/png"}
            return parse_turn_request({"content": [part]}, limit)

    elif transport == "a2a":

        def parse() -> object:
            return parse_send(_a2a([{"raw": encoded, "mediaType": "image/png"}]), limit)

    else:

        def parse() -> object:
            source = {"type": "data", "value": encoded, "mimeType": "image/png"}
            return parse_run_input(_agui([{"type": "image", "source": source}]), limit)

    if size <= limit:
        parse()
        return
    with pytest.raises(HttpError, match=r"max_part_bytes") as info:
        parse()
    assert (info.value.status, info.value.code) == (413, "part_too_large")

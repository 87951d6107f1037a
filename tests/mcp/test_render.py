"""Rendering CallToolResult content as the tool result text."""

from __future__ import annotations

import base64

import mcp.types as mt

from agentik.mcp._render import EMPTY, render_result


def result(*content: mt.ContentBlock, structured: object = None) -> mt.CallToolResult:
    return mt.CallToolResult(content=list(content), structured_content=structured)


def test_text_blocks_are_joined_by_lines() -> None:
    """Text is the result, in block order."""
    text = result(mt.TextContent(text="one"), mt.TextContent(text="two"))
    assert render_result(text) == "one\ntwo"


def test_structured_content_is_json_unless_text_mirrors_it() -> None:
    """Servers mirror structured content in text; then the text alone is shown."""
    assert render_result(result(structured={"b": 1, "a": [1, "é"]})) == '{"a": [1, "é"], "b": 1}'
    mirrored = result(mt.TextContent(text="5"), structured={"result": 5})
    assert render_result(mirrored) == "5"


def test_binary_blocks_become_short_descriptions() -> None:
    """The model learns what came back and its size, not the base64."""
    png = base64.b64encode(b"\x89PNG" + bytes(96)).decode()
    blocks = result(
        mt.ImageContent(data=png, mime_type="image/png"),
        mt.AudioContent(data="!!", mime_type="audio/wav"),
        mt.ResourceLink(name="report", uri="file:///r.txt"),
        mt.EmbeddedResource(resource=mt.TextResourceContents(uri="file:///a.txt", text="hello")),
        mt.EmbeddedResource(
            resource=mt.BlobResourceContents(
                uri="file:///b.bin", blob=base64.b64encode(b"abc").decode()
            )
        ),
    )
    assert render_result(blocks).splitlines() == [
        "[image: image/png, 100 bytes]",
        "[audio: audio/wav, 2 characters of invalid base64]",
        "[resource link: report <file:///r.txt>]",
        "[resource <file:///a.txt>]",
        "hello",
        "[resource <file:///b.bin>: application/octet-stream, 3 bytes]",
    ]


def test_an_empty_result_says_so() -> None:
    """An empty string would look like a lost result."""
    assert render_result(result()) == EMPTY

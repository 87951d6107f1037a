"""Rendering an MCP ``CallToolResult`` as the one string a tool result is. Pure.

Text blocks are the result; other blocks become a short bracketed line each,
so the model learns that an image or a file was returned without being fed
base64. Structured content is rendered as JSON only when no text block
carries it already (servers are asked to mirror it in text, and MCPServer
does). Block order is kept.
"""

from __future__ import annotations

import base64
import binascii
import json

import mcp.types as mt

EMPTY = "(the tool returned no content)"


def render_result(result: mt.CallToolResult) -> str:
    """The text the model sees for ``result`` (``is_error`` is the caller's concern)."""
    parts = [_block(block) for block in result.content]
    if result.structured_content is not None and not any(
        isinstance(block, mt.TextContent) for block in result.content
    ):
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, sort_keys=True))
    return "\n".join(parts) if parts else EMPTY


def _block(block: mt.ContentBlock) -> str:
    if isinstance(block, mt.TextContent):
        return block.text
    if isinstance(block, mt.ImageContent):
        return f"[image: {block.mime_type}, {_size(block.data)}]"
    if isinstance(block, mt.AudioContent):
        return f"[audio: {block.mime_type}, {_size(block.data)}]"
    if isinstance(block, mt.ResourceLink):
        return f"[resource link: {block.name} <{block.uri}>]"
    resource = block.resource
    if isinstance(resource, mt.TextResourceContents):
        return f"[resource <{resource.uri}>]\n{resource.text}"
    mime = resource.mime_type or "application/octet-stream"
    return f"[resource <{resource.uri}>: {mime}, {_size(resource.blob)}]"


def _size(data: str) -> str:
    """The decoded size of base64 ``data``, which is what a reader cares about."""
    try:
        return f"{len(base64.b64decode(data, validate=True))} bytes"
    except (binascii.Error, ValueError):
        return f"{len(data)} characters of invalid base64"

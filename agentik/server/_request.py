"""Reading request bodies safely: size limit, UTF-8, JSON, and typed fields.

Everything here runs before a request touches any state, so a refused request
changes nothing. Malformed bodies are 400, well-formed JSON of the wrong shape
is 422, oversized bodies 413; every message names the field or the limit.
"""

from __future__ import annotations

import json

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive

from agentik._json import JsonObject, JsonValue
from agentik.server._errors import HttpError


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refusing more than ``limit`` bytes without buffering them."""
    return await receive_body(request.receive, request.headers.get("content-length", ""), limit)


async def receive_body(receive: Receive, declared: str, limit: int) -> bytes:
    """The whole body straight from ASGI ``receive``; ``declared`` is the
    Content-Length header ("" when absent). What ``read_body`` does, without a
    Starlette ``Request``: the hot turn route reads its body this way."""
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(limit: int) -> HttpError:
    return HttpError(413, f"request body exceeds the limit of {limit} bytes", code="too_large")


def _reject_constant(name: str) -> JsonValue:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
"""One decoder, reused: ``json.loads(text, parse_constant=…)`` builds a new one per call."""


def parse_json(body: bytes) -> JsonValue:
    """Strict JSON from UTF-8 bytes (no NaN or Infinity)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise HttpError(
            400, f"request body is not valid UTF-8 (byte {error.start})", code="invalid_utf8"
        ) from error
    try:
        value: JsonValue = _DECODER.decode(text)
    except ValueError as error:
        raise HttpError(
            400, f"request body is not valid JSON: {error}", code="invalid_json"
        ) from error
    return value


async def read_json(request: Request, limit: int) -> JsonValue:
    return parse_json(await read_body(request, limit))


def _invalid(message: str) -> HttpError:
    return HttpError(422, message, code="invalid_field")


def as_object(value: JsonValue, where: str = "body") -> JsonObject:
    if not isinstance(value, dict):
        raise _invalid(f"{where} must be a JSON object, got {_kind(value)}")
    return value


def as_list(value: JsonValue, where: str) -> list[JsonValue]:
    if not isinstance(value, list):
        raise _invalid(f"{where} must be an array, got {_kind(value)}")
    return value


def field_str(obj: JsonObject, key: str, *, where: str = "", non_empty: bool = True) -> str:
    """A required string field."""
    name = f"{where}{key}"
    if key not in obj:
        raise _invalid(f"field '{name}' is required")
    value = obj[key]
    if not isinstance(value, str):
        raise _invalid(f"field '{name}' must be a string, got {_kind(value)}")
    if non_empty and not value.strip():
        raise _invalid(f"field '{name}' must not be empty")
    return value


def optional_str(obj: JsonObject, key: str, *, where: str = "") -> str | None:
    """An optional string field; null counts as absent."""
    if obj.get(key) is None:
        return None
    return field_str(obj, key, where=where)


def query_int(request: Request, key: str, *, default: int, minimum: int, maximum: int) -> int:
    """An integer query parameter within bounds."""
    text = request.query_params.get(key)
    if text is None:
        return default
    if not text.isdigit() or not minimum <= int(text) <= maximum:
        raise _invalid(f"query parameter '{key}' must be an integer {minimum}..{maximum}")
    return int(text)


def _kind(value: JsonValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"

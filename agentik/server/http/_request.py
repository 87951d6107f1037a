"""Reading request bodies safely: size limit, UTF-8, JSON, and typed fields.

Everything here runs before a request touches any state, so a refused request
changes nothing. Malformed bodies are 400 (``agentik._input.decode_json``
says what is malformed: invalid UTF-8 or JSON, lone surrogates, nesting past
100 levels, numbers no double or bounded integer holds), well-formed JSON of
the wrong shape is 422, oversized bodies 413; every message names the field
or the limit. Numbers in query strings are ASCII decimals (``decimal_int``).
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive, Scope

from agentik._input import InputError, InvalidUtf8, checked_id, decimal_int, decode_json
from agentik._json import JsonObject, JsonValue
from agentik.server.http._errors import HttpError


def url_text(raw: bytes) -> str:
    """A request's raw path or query percent-decoded, as UTF-8
    (``UnicodeDecodeError`` if it is not; the engine takes only ASCII bytes)."""
    return unquote_to_bytes(raw).decode("utf-8") if b"%" in raw else raw.decode("ascii")


def undecodable_url(scope: Scope) -> str | None:
    """Why the request's path or query is not UTF-8 once percent-decoded, or None.

    The server decodes ``%FF`` to U+FFFD (``errors="replace"``), so two
    different ids would name one conversation; the raw bytes tell them apart."""
    for part, raw in (("path", scope.get("raw_path")), ("query", scope.get("query_string"))):
        if raw and b"%" in raw:
            try:
                url_text(raw)
            except UnicodeDecodeError as error:
                return (
                    f"the request {part} is not valid UTF-8 once percent-decoded"
                    f" (decoded byte {error.start})"
                )
    return None


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refusing more than ``limit`` bytes without buffering them."""
    return await receive_body(request.receive, request.headers.get("content-length", ""), limit)


async def receive_body(receive: Receive, declared: str, limit: int) -> bytes:
    """The whole body straight from ASGI ``receive``; ``declared`` is the
    Content-Length header ("" when absent). What ``read_body`` does, without a
    Starlette ``Request``: the hot turn route reads its body this way."""
    if declared:
        try:
            if decimal_int(declared, "header 'Content-Length'") > limit:
                raise _too_large(limit)
        except InputError as error:  # h11 checks it too: a second line of defence
            raise HttpError(400, str(error), code="bad_request") from error
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


def parse_json(body: bytes) -> JsonValue:
    """Strict JSON from UTF-8 bytes: see ``agentik._input.decode_json``."""
    try:
        return decode_json(body)
    except InvalidUtf8 as error:
        raise HttpError(400, f"request body is {error}", code="invalid_utf8") from error
    except InputError as error:
        raise HttpError(
            400, f"request body is not valid JSON: {error}", code="invalid_json"
        ) from error


async def read_json(request: Request, limit: int) -> JsonValue:
    return parse_json(await read_body(request, limit))


def check_id(value: str, what: str = "conversation id") -> str:
    """Ids travel in URLs and keys: printable, bounded, non-empty (``checked_id``)."""
    try:
        return checked_id(value, what)
    except InputError as error:
        raise HttpError(422, str(error), code="invalid_field") from None


def _invalid(message: str) -> HttpError:
    return HttpError(422, message, code="invalid_field")


def as_object(value: JsonValue, where: str = "body") -> JsonObject:
    if not isinstance(value, dict):
        raise _invalid(f"{where} must be a JSON object, got {kind_of(value)}")
    return value


def as_list(value: JsonValue, where: str) -> list[JsonValue]:
    if not isinstance(value, list):
        raise _invalid(f"{where} must be an array, got {kind_of(value)}")
    return value


def field_str(obj: JsonObject, key: str, *, where: str = "", non_empty: bool = True) -> str:
    """A required string field."""
    name = f"{where}{key}"
    if key not in obj:
        raise _invalid(f"field '{name}' is required")
    value = obj[key]
    if not isinstance(value, str):
        raise _invalid(f"field '{name}' must be a string, got {kind_of(value)}")
    if non_empty and not value.strip():
        raise _invalid(f"field '{name}' must not be empty")
    return value


def optional_str(obj: JsonObject, key: str, *, where: str = "") -> str | None:
    """An optional string field; null counts as absent."""
    if obj.get(key) is None:
        return None
    return field_str(obj, key, where=where)


def field_bool(obj: JsonObject, key: str) -> bool:
    """A required boolean field: ``true`` or ``false``, not ``1``, ``"yes"`` or null."""
    if key not in obj:
        raise _invalid(f"field '{key}' is required")
    value = obj[key]
    if not isinstance(value, bool):
        raise _invalid(f"field '{key}' must be a boolean, got {kind_of(value)}")
    return value


def query_int(request: Request, key: str, *, default: int, minimum: int, maximum: int) -> int:
    """An integer query parameter within bounds (ASCII digits only)."""
    text = request.query_params.get(key)
    if text is None:
        return default
    try:
        return decimal_int(text, f"query parameter '{key}'", minimum=minimum, maximum=maximum)
    except InputError as error:
        raise _invalid(str(error)) from error


def kind_of(value: JsonValue) -> str:
    """The JSON kind of a value as error messages name it ("a string", "null", …)."""
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

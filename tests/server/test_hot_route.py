"""A hot route (``Guard``'s direct dispatch, ``_app._call_route``) answers
every outcome of its endpoint as Starlette's router and middleware would."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Match, Route

from agentik.server._app import _call_route, _http_error
from agentik.server._errors import HttpError

Message = dict[str, Any]
Endpoint = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


async def answers(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["path_params"] == {"conversation_id": "c1"}
    body = (await receive())["body"]
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


async def refuses(scope: dict[str, Any], receive: Any, send: Any) -> None:
    raise HttpError(422, "no good", code="invalid_field")


async def fails(scope: dict[str, Any], receive: Any, send: Any) -> None:
    raise ValueError("a bug")


async def refuses_late(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    raise HttpError(422, "too late", code="invalid_field")


class AsgiEndpoint:
    """A plain ASGI endpoint object, as ``TurnEndpoint`` is."""

    def __init__(self, fn: Endpoint) -> None:
        self.fn = fn

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.fn(scope, receive, send)


def scope() -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": "/agentik/conversations/c1/turns",
        "raw_path": b"/agentik/conversations/c1/turns",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-length", b"2")],
        "scheme": "http",
        "server": ("test", 80),
    }


async def run(app: Any) -> tuple[list[Message], BaseException | None]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"hi", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    try:
        await app(scope(), receive, send)
    except Exception as error:
        return sent, error
    return sent, None


@pytest.mark.parametrize("behaviour", [answers, refuses, fails, refuses_late])
async def test_the_hot_path_answers_as_starlette_does(behaviour: Endpoint) -> None:
    route = Route("/agentik/conversations/{conversation_id}/turns", AsgiEndpoint(behaviour))
    starlette = Starlette(routes=[route], exception_handlers={HttpError: _http_error})

    async def hot(scope: dict[str, Any], receive: Any, send: Any) -> None:
        match, child = route.matches(scope)
        assert match is Match.FULL
        await _call_route(route, child, scope, receive, send)

    expected, expected_error = await run(starlette)
    got, error = await run(hot)
    assert got == expected
    assert type(error) is type(expected_error)
    assert str(error) == str(expected_error)
    if behaviour is refuses:
        assert expected[0]["status"] == 422 and b'"invalid_field"' in expected[1]["body"]
    if behaviour is fails:
        assert expected[0]["status"] == 500 and expected[1]["body"] == b"Internal Server Error"

"""The HTTP side of the A2A client: one remote agent's card, calls and streams over httpx2.

Every failure leaves here as one of four kinds, which the toolset tells
apart: ``Unreachable`` (no answer: connection refused or lost, a timeout,
HTTP 429/502/503/504; worth trying again while following a task),
``Refused`` (any other HTTP status), ``RpcFault`` (a JSON-RPC error) and
``WireError`` (an answer that is not A2A 1.0). The token goes out in the
``Authorization`` header only, and no message here quotes it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2

from agentik._json import JsonObject, JsonValue
from agentik.a2a_client._config import A2AAgentConfig
from agentik.a2a_client._wire import A2A_VERSION, Card, WireError, parse_card, rpc_body, rpc_result

_RETRY_STATUSES = frozenset({429, 502, 503, 504})


class Unreachable(Exception):
    """The agent did not answer (connection, timeout, or an overloaded/unavailable status)."""


class Refused(Exception):
    """The agent answered with an HTTP status other than 200."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}" + (f": {body}" if body else ""))
        self.status = status


class A2AConnection:
    """One remote agent over a shared ``httpx2.AsyncClient``."""

    def __init__(self, config: A2AAgentConfig, http: httpx2.AsyncClient) -> None:
        self.config = config
        self._http = http
        self._ids = 0
        self._headers = {"A2A-Version": A2A_VERSION}
        if config.token is not None:
            self._headers["Authorization"] = f"Bearer {config.token}"

    async def card(self) -> Card:
        """Fetch and read the agent card."""
        url = self.config.card_url
        try:
            response = await self._http.get(url, headers=self._headers, timeout=self._timeout())
        except httpx2.HTTPError as error:
            raise Unreachable(_describe(error)) from error
        _check_status(response)
        return parse_card(_json(response.content, "the agent card"), url)

    async def call(self, url: str, method: str, params: JsonObject) -> JsonObject:
        """One JSON-RPC call; its result object."""
        try:
            response = await self._http.post(
                url, json=self._body(method, params), headers=self._headers, timeout=self._timeout()
            )
        except httpx2.HTTPError as error:
            raise Unreachable(_describe(error)) from error
        _check_status(response)
        return rpc_result(_json(response.content, f"the answer to {method}"))

    @asynccontextmanager
    async def stream(
        self, url: str, method: str, params: JsonObject
    ) -> AsyncIterator[AsyncIterator[JsonObject]]:
        """A streamed call: yields the results of its events, in order. A plain JSON
        answer (an error refused before the stream began) is read as one event."""
        headers = {**self._headers, "Accept": "text/event-stream"}
        timeout = httpx2.Timeout(self.config.connect_timeout, read=None)
        try:
            async with self._http.stream(
                "POST", url, json=self._body(method, params), headers=headers, timeout=timeout
            ) as response:
                if response.status_code != 200:
                    await response.aread()
                _check_status(response)
                yield _events(response, method)
        except httpx2.HTTPError as error:
            raise Unreachable(_describe(error)) from error

    def _body(self, method: str, params: JsonObject) -> JsonObject:
        self._ids += 1
        return rpc_body(method, params, self._ids)

    def _timeout(self) -> httpx2.Timeout:
        return httpx2.Timeout(self.config.connect_timeout)


async def _events(response: httpx2.Response, method: str) -> AsyncIterator[JsonObject]:
    content_type = response.headers.get("content-type", "")
    if not content_type.startswith("text/event-stream"):
        yield rpc_result(_json(await response.aread(), f"the answer to {method}"))
        return
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield rpc_result(_json("\n".join(data).encode(), f"an event of {method}"))
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        # other fields (event:, id:, retry:) and comments (: keep-alive) carry nothing here
    if data:
        yield rpc_result(_json("\n".join(data).encode(), f"an event of {method}"))


def _check_status(response: httpx2.Response) -> None:
    if response.status_code == 200:
        return
    body = " ".join(response.text.split())[:300] if response.is_stream_consumed else ""
    if response.status_code in _RETRY_STATUSES:
        raise Unreachable(f"HTTP {response.status_code}" + (f": {body}" if body else ""))
    raise Refused(response.status_code, body)


def _json(content: bytes, what: str) -> JsonValue:
    try:
        value: JsonValue = json.loads(content)
    except ValueError:
        raise WireError(f"{what} is not JSON") from None
    return value


def _describe(error: httpx2.HTTPError) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__

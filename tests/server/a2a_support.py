"""What the A2A approval and conformance tests share: a toolset whose tool needs
a person's approval, a scripted model that calls it, and a server on a real
SQLite file with an a2a-sdk client and a raw JSON-RPC client of it.

The model (deterministic, no network):

- ``pay N`` calls ``vault_pay {"amount": N}`` (needs approval);
- ``pay N and M`` calls it twice in one answer;
- ``pay lots`` calls it with invalid arguments (``{"amount": "lots"}``);
- ``slow`` waits until the test releases ``Script.release`` (or for ever);
- after tool results it answers ``done: <result>; <result>`` (after paying 99,
  only once ``Script.release`` is set);
- anything else is echoed, ``You said: <text>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx2
import trio
from a2a.client import Client, ClientConfig, create_client
from a2a.types import Message, Part, Role, SendMessageRequest, StreamResponse

from agentik import ModelRequest, ModelResponse, ToolCall
from agentik import Role as StoredRole
from agentik.models import ScriptedModel
from agentik.server import Client as Owner
from agentik.server import ServerConfig, serve_agentik
from agentik.storage import StorageBundle, open_sqlite_storage
from agentik.toolsets import ToolsetContribution, tool

A2A_1 = {"A2A-Version": "1.0"}
GUARD_SECONDS = 20
POLL_SECONDS = 0.005
TOKENS = {"alice": "alice-token-4f1c9a0b7e2d", "bob": "bob-token-8d3e2f6a1c5b"}

PAID: list[int] = []
"""Amounts ``vault_pay`` really paid (the tool ran), in order."""


@tool(requires_approval=True)
async def vault_pay(amount: int) -> str:
    """Pays an amount (a person must approve each payment).

    Args:
        amount: How much to pay.
    """
    PAID.append(amount)
    return f"paid {amount}"


def vault() -> ToolsetContribution:
    return ToolsetContribution(name="vault", description="Pays money.", tools=(vault_pay,))


@attrs.define
class Script:
    """The scripted model, with a gate for ``slow`` turns."""

    release: trio.Event = attrs.Factory(trio.Event)
    asked: trio.Event = attrs.Factory(trio.Event)
    """Set when a ``slow`` turn reached the model."""

    async def respond(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if last.role is StoredRole.TOOL:
            results = []
            for message in reversed(request.messages):
                if message.role is not StoredRole.TOOL:
                    break
                results.append(message.content)
            if "paid 99" in results:  # a slow answer after an approved payment
                self.asked.set()
                await self.release.wait()
            return ModelResponse(text="done: " + "; ".join(reversed(results)))
        text = last.content
        if text == "slow":
            self.asked.set()
            await self.release.wait()
            return ModelResponse(text="slow answer")
        if text == "pay lots":
            seq = len(request.messages)
            return ModelResponse(
                tool_calls=(ToolCall(f"pay-{seq}-0", "vault_pay", '{"amount": "lots"}'),)
            )
        amounts = re.fullmatch(r"pay (\d+)(?: and (\d+))?", text)
        if amounts is not None:
            seq = len(request.messages)
            calls = tuple(
                ToolCall(f"pay-{seq}-{i}", "vault_pay", json.dumps({"amount": int(a)}))
                for i, a in enumerate(amounts.groups())
                if a is not None
            )
            return ModelResponse(tool_calls=calls)
        return ModelResponse(text=f"You said: {text}")


@attrs.frozen
class Served:
    url: str
    raw: httpx2.AsyncClient
    sdk: Client
    script: Script
    storage: StorageBundle

    async def rpc(
        self, method: str, params: dict[str, Any], *, token: str | None = None
    ) -> dict[str, Any]:
        """One JSON-RPC call; the whole reply object."""
        headers = dict(A2A_1)
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        response = await self.raw.post("/a2a", json=body, headers=headers)
        assert response.status_code == 200, response.text
        return rpc_reply(response)

    async def history(self, context_id: str, token: str | None = None) -> list[dict[str, Any]]:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        reply = await self.raw.get(f"/agentik/conversations/{context_id}/messages", headers=headers)
        if reply.status_code == 404:
            return []  # never written to
        messages: list[dict[str, Any]] = reply.json()["messages"]
        return messages


@asynccontextmanager
async def serving(
    database: Path,
    *,
    streaming: bool = False,
    script: Script | None = None,
    owners: bool = False,
    **changes: object,
) -> AsyncIterator[Served]:
    """A server on ``database`` with the vault toolset and the scripted model,
    stopped (gracefully) when the block ends."""
    script = script or Script()
    config = attrs.evolve(
        ServerConfig(
            port=0,
            database=str(database),
            toolsets=("tests.server.a2a_support:vault",),
            clients=tuple(Owner(owner=o, token=t) for o, t in TOKENS.items()) if owners else (),
        ),
        **changes,
    )
    headers = {"Authorization": f"Bearer {TOKENS['alice']}"} if owners else {}
    async with open_sqlite_storage(database) as storage, trio.open_nursery() as nursery:
        stop = trio.Event()
        url = await nursery.start(
            lambda task_status: serve_agentik(
                config,
                shutdown_trigger=stop.wait,
                storage=storage,
                model=ScriptedModel(script.respond),
                task_status=task_status,
            )
        )
        async with (
            httpx2.AsyncClient(base_url=url, timeout=GUARD_SECONDS) as raw,
            httpx2.AsyncClient(timeout=GUARD_SECONDS, headers=headers) as for_sdk,
        ):
            sdk = await create_client(
                url, client_config=ClientConfig(streaming=streaming, httpx_client=for_sdk)
            )
            try:
                yield Served(url, raw, sdk, script, storage)
            finally:
                await sdk.close()
                script.release.set()
                stop.set()


def rpc_reply(response: httpx2.Response) -> dict[str, Any]:
    """The reply of a JSON-RPC call: the JSON body, or, for a stream refused
    before its first event, the stream's one ``error`` event."""
    if not response.headers["content-type"].startswith("text/event-stream"):
        reply: dict[str, Any] = response.json()
        return reply
    frames = [f for f in response.text.split("\n\n") if f]
    assert len(frames) == 1, frames
    event, data = frames[0].split("\n")
    assert event == "event: error", frames
    streamed: dict[str, Any] = json.loads(data.removeprefix("data: "))
    return streamed


def user_message(
    text: str, message_id: str, context_id: str | None = None, task_id: str | None = None
) -> SendMessageRequest:
    message = Message(message_id=message_id, role=Role.ROLE_USER, parts=[Part(text=text)])
    if context_id is not None:
        message.context_id = context_id
    if task_id is not None:
        message.task_id = task_id
    return SendMessageRequest(message=message)


def decision_message(
    data: dict[str, Any], message_id: str, task_id: str, context_id: str | None = None
) -> SendMessageRequest:
    """A follow-up on ``task_id`` whose one part is the data part ``data``."""
    request = user_message("", message_id, context_id, task_id)
    part = request.message.parts[0]
    part.ClearField("text")
    part.data.struct_value.update(data)
    return request


async def responses(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    return [r async for r in client.send_message(request)]


async def wait_until(condition: Any) -> None:
    """Poll ``await condition()`` until true: the server answers on real
    sockets, so a mock clock cannot drive it; bounded by ``GUARD_SECONDS``."""
    with trio.fail_after(GUARD_SECONDS):
        while not await condition():  # noqa: ASYNC110 (a server over real sockets)
            await trio.sleep(POLL_SECONDS)

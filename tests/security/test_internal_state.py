"""No route can read, change or delete what agentik keeps for itself.

Found from outside: the MCP OAuth token vault was the working memory of the
conversation ``agentik.mcp-oauth:<server>`` of the default owner, so ``GET
…/memory`` and ``…/export`` read the (encrypted) record, a turn there put it
in the system prompt, ``DELETE /agentik/conversations/agentik.mcp-oauth:notes``
wiped it and ``memory_add`` broke it. The vault now lives in the bundle's
``SecretStore``, which no conversation id names.

The routes come from the app itself (``build_app``): every (method, path) it
serves is a case, and a route without a probe in ``PROBES`` fails, so a new
route is covered or noticed. Each probe sends the requests a client could use
against internal state (reads, turns that call ``memory_add`` and stream, an
archive of the first note ids, deletes, decisions, AG-UI runs, every A2A
method) with ids that name the vault's old home, the secret's name and the
server's, each a conversation with history; afterwards the record is byte for
byte what it was and the vault reads the same tokens, and neither a record
(any Fernet token) nor a token is in any response or any model request.
Real HTTP on 127.0.0.1, a real SQLite file. Against the vault of before,
eight routes fail here (turns, AG-UI, A2A, GET memory, archived notes,
export, archive, DELETE).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast
from urllib.parse import quote

import httpx2
import pytest
import trio
from cryptography.fernet import Fernet
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl
from starlette.routing import Route

from agentik import Message, Role
from agentik.agent import ChatAgent
from agentik.mcp import McpTokenVault
from agentik.server import ServerConfig, ServerContext, build_app
from tests.security.conftest import Server, start

KEY = Fernet.generate_key()
SERVER = "notes"
ACCESS = "at-internal-4c1f0e9d8b7a6f5e4d3c"
REFRESH = "rt-internal-9a8b7c6d5e4f3a2b1c0d"
CLIENT_SECRET = "cs-internal-1b2c3d4e5f6a7b8c9d0e"
IDS = ("agentik.mcp-oauth:notes", "mcp-oauth:notes", "notes", "agentik.mcp-oauth:")
"""Where the record was (the old conversation), its name now, the server's name."""


def _served_routes() -> list[tuple[str, str]]:
    agent = SimpleNamespace(storage=SimpleNamespace(message_store=None), tracing=False)
    ctx = ServerContext(
        agent=cast(ChatAgent, agent),
        config=ServerConfig(),
        model_label="m",
        demo_model=False,
        storage_label="s",
    )
    app = build_app(ctx).app  # type: ignore[attr-defined]
    return sorted(
        {
            (method, route.path)
            for route in app.routes
            if isinstance(route, Route)
            for method in route.methods or ()
            if method != "HEAD"
        }
    )


Probe = Callable[[httpx2.AsyncClient, str], Awaitable[list[httpx2.Response]]]
SSE = {"Accept": "text/event-stream"}
A2A = {"A2A-Version": "1.0"}


def _path(template: str, cid: str) -> str:
    value = quote(cid, safe="")
    for name in ("{conversation_id}", "{name}", "{call_id:path}", "{elicitation_id}"):
        template = template.replace(name, value)
    return template


def _get(template: str) -> Probe:
    async def probe(client: httpx2.AsyncClient, cid: str) -> list[httpx2.Response]:
        return [await client.get(_path(template, cid))]

    return probe


def _delete(template: str) -> Probe:
    async def probe(client: httpx2.AsyncClient, cid: str) -> list[httpx2.Response]:
        return [await client.delete(_path(template, cid))]

    return probe


def _post(template: str, body: object) -> Probe:
    async def probe(client: httpx2.AsyncClient, cid: str) -> list[httpx2.Response]:
        return [await client.post(_path(template, cid), json=body)]

    return probe


PLANT = 'call memory_add {"text": "planted by a client"}'
CONVERSATION = "/agentik/conversations/{conversation_id}"


async def _turns(client: httpx2.AsyncClient, cid: str) -> list[httpx2.Response]:
    path = _path("/agentik/conversations/{conversation_id}/turns", cid)
    return [
        await client.post(path, json={"text": PLANT}),
        await client.post(path, json={"text": "what is in your memory?"}, headers=SSE),
        await client.post(path, json={"text": "and now?"}),
    ]


async def _archive(client: httpx2.AsyncClient, cid: str) -> list[httpx2.Response]:
    """The first note ids one by one (a list with an id that is not the
    conversation's active note is refused whole)."""
    path = _path(f"{CONVERSATION}/memory/archive", cid)
    return [await client.post(path, json={"entry_ids": [i]}) for i in range(1, 9)]


async def _agui(client: httpx2.AsyncClient, cid: str) -> list[httpx2.Response]:
    out = []
    for i, text in enumerate((PLANT, "what is in your memory?")):
        body = {
            "threadId": cid,
            "runId": f"run-{i}",
            "messages": [{"id": f"m{i}", "role": "user", "content": text}],
            "state": {},
            "tools": [],
            "context": [],
            "forwardedProps": {},
        }
        out.append(await client.post("/agui", json=body, headers=SSE))
    return out


async def _a2a(client: httpx2.AsyncClient, cid: str) -> list[httpx2.Response]:
    def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}

    def message(text: str, n: int) -> dict[str, Any]:
        return {
            "messageId": f"msg-{n}",
            "role": "ROLE_USER",
            "parts": [{"text": text}],
            "contextId": cid,
        }

    sent = await client.post(
        "/a2a", json=rpc("SendMessage", {"message": message(PLANT, 1)}), headers=A2A
    )
    task_ids = {"0" * 32 + "." + cid}
    with contextlib.suppress(KeyError, TypeError, ValueError):
        task_ids.add(sent.json()["result"]["task"]["id"])
    out = [sent]
    out.append(
        await client.post(
            "/a2a",
            json=rpc("SendStreamingMessage", {"message": message("what is in your memory?", 2)}),
            headers={**A2A, **SSE},
        )
    )
    out.append(await client.post("/a2a", json=rpc("ListTasks", {"contextId": cid}), headers=A2A))
    for task_id in sorted(task_ids):
        for method in ("GetTask", "CancelTask"):
            out.append(await client.post("/a2a", json=rpc(method, {"id": task_id}), headers=A2A))
    return out


PROBES: dict[tuple[str, str], Probe] = {
    ("POST", f"{CONVERSATION}/turns"): _turns,
    ("GET", f"{CONVERSATION}/messages"): _get(f"{CONVERSATION}/messages"),
    ("GET", f"{CONVERSATION}/memory"): _get(f"{CONVERSATION}/memory"),
    ("POST", f"{CONVERSATION}/memory/archive"): _archive,
    ("GET", f"{CONVERSATION}/memory/archived"): _get(f"{CONVERSATION}/memory/archived"),
    ("GET", f"{CONVERSATION}/summary"): _get(f"{CONVERSATION}/summary"),
    ("GET", f"{CONVERSATION}/summaries"): _get(f"{CONVERSATION}/summaries"),
    ("GET", f"{CONVERSATION}/toolsets"): _get(f"{CONVERSATION}/toolsets"),
    ("GET", f"{CONVERSATION}/usage"): _get(f"{CONVERSATION}/usage"),
    ("GET", f"{CONVERSATION}/export"): _get(f"{CONVERSATION}/export"),
    ("POST", f"{CONVERSATION}/cancel"): _post(f"{CONVERSATION}/cancel", None),
    ("DELETE", CONVERSATION): _delete(CONVERSATION),
    ("GET", f"{CONVERSATION}/approvals"): _get(f"{CONVERSATION}/approvals"),
    ("POST", f"{CONVERSATION}/approvals/{{call_id:path}}"): _post(
        f"{CONVERSATION}/approvals/{{call_id:path}}", {"approve": True}
    ),
    ("GET", f"{CONVERSATION}/elicitations"): _get(f"{CONVERSATION}/elicitations"),
    ("POST", f"{CONVERSATION}/elicitations/{{elicitation_id}}"): _post(
        f"{CONVERSATION}/elicitations/{{elicitation_id}}", {"action": "accept", "content": {}}
    ),
    ("POST", "/agui"): _agui,
    ("POST", "/a2a"): _a2a,
    # Routes without a conversation id: nothing of the vault must show there either.
    ("GET", "/health"): _get("/health"),
    ("GET", "/metrics"): _get("/metrics"),
    ("GET", "/agentik/conversations"): _get("/agentik/conversations"),
    ("GET", "/agentik/reflections"): _get("/agentik/reflections"),
    ("GET", "/agentik/skills"): _get("/agentik/skills"),
    ("GET", "/agentik/skills/{name}"): _get("/agentik/skills/{name}"),
    ("PUT", "/agentik/skills/{name}"): _post("/agentik/skills/{name}", None),
    ("DELETE", "/agentik/skills/{name}"): _delete("/agentik/skills/{name}"),
    ("GET", "/.well-known/agent-card.json"): _get("/.well-known/agent-card.json"),
}


async def _put_skill(client: httpx2.AsyncClient, cid: str) -> list[httpx2.Response]:
    body = {"description": "a skill named like the vault", "body": "steps"}
    return [await client.put(_path("/agentik/skills/{name}", cid), json=body)]


PROBES[("PUT", "/agentik/skills/{name}")] = _put_skill


async def _plant_record(server: Server) -> tuple[McpTokenVault, str]:
    """The vault with tokens and a client registration (with its secret); returns the
    stored record, as the store holds it."""
    vault = McpTokenVault(server.storage, KEY)
    tokens = vault.storage(SERVER)
    await tokens.set_tokens(OAuthToken(access_token=ACCESS, refresh_token=REFRESH))
    await tokens.set_client_info(
        OAuthClientInformationFull(
            client_id="agentik-client",
            client_secret=CLIENT_SECRET,
            redirect_uris=[AnyUrl("http://127.0.0.1:8976/callback")],
        )
    )
    return vault, await _stored(server)


async def _stored(server: Server) -> str:
    assert server.storage.secret_store is not None
    stored = await server.storage.secret_store.get_secret(f"mcp-oauth:{SERVER}")
    assert stored is not None
    return stored


def _shows(text: str, record: str) -> list[str]:
    """Which of the vault's secrets ``text`` shows: its tokens, the record (a
    24-character piece of its middle), or any record (a Fernet token, current
    or replaced, begins ``gAAAAA``)."""
    middle = record[len(record) // 2 : len(record) // 2 + 24]
    found = [s for s in (ACCESS, REFRESH, CLIENT_SECRET) if s in text]
    if middle in text or "gAAAAA" in text:
        found.append("a vault record")
    return found


@pytest.mark.parametrize(("method", "path"), _served_routes(), ids=lambda v: str(v))
async def test_no_route_reaches_the_token_vault(
    method: str, path: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    probe = PROBES.get((method, path))
    assert probe is not None, f"{method} {path} has no probe here: add one to PROBES"
    async with start(nursery, tmp_path / "agentik.db") as server:
        vault, record = await _plant_record(server)
        before = await vault.read(SERVER)
        for cid in IDS:  # each conversation exists (routes answer 404 for one that does not)
            await server.storage.message_store.append(cid, Message(Role.USER, "hello"))
            await server.storage.message_store.append(cid, Message(Role.ASSISTANT, "hi"))
        responses: list[httpx2.Response] = []
        async with server.client(None) as client:
            for cid in IDS:
                responses += await probe(client, cid)
        assert await _stored(server) == record, f"{method} {path} changed the vault's record"
        assert await vault.read(SERVER) == before
        again = await vault.storage(SERVER).get_tokens()
        assert again is not None
        assert (again.access_token, again.refresh_token) == (ACCESS, REFRESH)
        for response in responses:
            assert response.status_code < 500, (response.status_code, response.text[:300])
            shown = _shows(response.text, record)
            assert not shown, f"{method} {response.url.path} showed {shown}"
        for request in server.model.requests:
            seen = json.dumps([m.content for m in request.messages])
            assert not _shows(seen, record), "the vault reached a model request"
    files = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())  # noqa: ASYNC240
    for secret in (ACCESS, REFRESH, CLIENT_SECRET):
        assert secret.encode() not in files, "a token is in the database in clear"

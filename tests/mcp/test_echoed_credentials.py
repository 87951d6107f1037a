"""An MCP server that quotes the credentials it received: they reach nothing.

Found from outside: a server (or a proxy) that quotes the ``Authorization``
header in a tool result put the access token in clear in the turn's JSON,
``GET …/messages``, exports, the database and the next model request. Now
everything an MCP server sends is masked (``***``) with the credentials
agentik sends it, as a model backend's answers are masked with its API key.

For each credential agentik may send (the OAuth flows it supports: an
authorization-code login with a dynamically registered confidential client,
client credentials with a secret, with a private-key JWT assertion, an
enterprise identity assertion; and a static ``Authorization`` header) and
each backend (a SQLite file, PostgreSQL): a real MCP server on 127.0.0.1
(``echo_server``, the mcp SDK) whose tools quote the header they got and
every credential its authorization server saw, in a text result, an error
result and an embedded resource, is called in turns over every transport
(native JSON and SSE, AG-UI, A2A streaming). Afterwards no credential is in
any response (turn JSON, stream events, ``GET …/messages``, the export,
``/health``, ``/metrics``), any model request, the log (DEBUG, every logger,
the SDK's too) or the stored bytes (the SQLite files; every row of every
table on PostgreSQL), and the results do show the masked quote, so the
server did echo.
"""

from __future__ import annotations

import json
import logging
import pathlib
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import httpx2
import psycopg
import pytest
import trio
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from psycopg import sql

from agentik import ModelRequest, ModelResponse, Role, ScriptedModel, ToolCall
from agentik.mcp import HttpServer, McpServerConfig, McpTokenVault, OAuthSettings
from agentik.server import ServerConfig, serve_agentik
from agentik.storage import StorageBundle, open_postgres_storage, open_sqlite_storage
from tests.mcp import echo_server, oauth_server
from tests.mcp.recording import serving
from tests.mcp.test_oauth import _login
from tests.mcp.test_stdio import LIMIT
from tests.postgres import fresh_schema

KEY = Fernet.generate_key().decode()
FLOWS = (
    "authorization_code",
    "client_credentials",
    "private_key_jwt",
    "identity_assertion",
    "static_header",
)
ECHOES = ("web_echo", "web_echo_fail", "web_echo_resource")


@attrs.frozen
class Flow:
    config: McpServerConfig
    known: Callable[[], list[str]]
    """Every credential of the flow the server can quote, read at the end (tokens are
    issued on the way)."""
    login: bool = False
    hidden: tuple[str, ...] = ()
    """Credentials the server cannot know (a private key), which must not show either."""


@asynccontextmanager
async def flow(name: str, directory: pathlib.Path) -> AsyncIterator[Flow]:
    """The echoing server behind ``name``'s credentials, and agentik's config for it."""
    base = f"http://127.0.0.1:{oauth_server.free_port()}"
    bind = base.removeprefix("http://")
    if name == "authorization_code":
        authority = oauth_server.Authority()

        def registered() -> list[str]:
            secrets = [c.client_secret for c in authority.clients.values() if c.client_secret]
            return [*authority.issued_secrets(), *secrets]

        app = oauth_server.build(base, authority, partial(echo_server.build, registered))
        # a confidential client: dynamic registration issues it a client secret
        settings = OAuthSettings(token_endpoint_auth="client_secret_post")
        async with serving(app.streamable_http_app(host="127.0.0.1"), bind):
            yield Flow(_config(base, settings), registered, login=True)
        return
    if name == "static_header":
        token = "static-" + "k" * 28
        app = echo_server.build(lambda: [token]).streamable_http_app(host="127.0.0.1")
        config = McpServerConfig(
            transport=HttpServer(url=f"{base}/mcp", headers={"Authorization": f"Bearer {token}"}),
            name="web",
        )
        async with serving(app, bind):
            yield Flow(config, lambda: [token])
        return
    machine = oauth_server.MachineAuthority(base)
    extra: list[str] = []
    hidden: list[str] = []

    def seen() -> list[str]:
        return [*machine.issued_secrets(), *extra]

    settings = _machine_settings(name, machine, directory, extra, hidden)
    async with serving(oauth_server.machine(machine, partial(echo_server.build, seen)), bind):
        yield Flow(_config(base, settings), seen, hidden=tuple(hidden))


def _config(base: str, settings: OAuthSettings) -> McpServerConfig:
    return McpServerConfig(
        transport=HttpServer(url=f"{base}/mcp", oauth=settings), name="web", backoff=0.05
    )


def _machine_settings(
    name: str,
    machine: oauth_server.MachineAuthority,
    directory: pathlib.Path,
    extra: list[str],
    hidden: list[str],
) -> OAuthSettings:
    common = {"client_id": machine.client_id, "issuer": machine.base}
    if name == "client_credentials":
        machine.client_secret = "cc-secret-" + "x" * 22
        extra.append(machine.client_secret)
        return OAuthSettings(
            grant="client_credentials", client_secret=machine.client_secret, **common
        )
    if name == "private_key_jwt":
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        key_file = directory / "client.pem"
        key_file.write_bytes(pem)
        machine.public_key, machine.key_id = key.public_key(), "key-1"
        hidden.append(pem.decode().splitlines()[1])  # a line of the key itself
        return OAuthSettings(
            grant="client_credentials",
            private_key_file=str(key_file),
            key_id="key-1",
            signing_alg="ES256",
            **common,
        )
    assert name == "identity_assertion"
    machine.client_secret = "xaa-secret-" + "y" * 21
    machine.id_token = "eyJ-id-token-" + "z" * 24
    id_token_file = directory / "id_token"
    id_token_file.write_text(machine.id_token + "\n")
    extra += [machine.client_secret, machine.id_token]
    return OAuthSettings(
        grant="identity_assertion",
        client_secret=machine.client_secret,
        token_endpoint_auth="client_secret_basic",
        idp_token_endpoint=f"{machine.base}/idp/token",
        idp_client_id="agentik-at-idp",
        id_token_file=str(id_token_file),
        **common,
    )


@attrs.define
class Model:
    """Calls the three echoing tools, then quotes what they returned (a model repeats
    what it is shown); records every request."""

    requests: list[ModelRequest] = attrs.Factory(list)

    def respond(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        last = request.messages[-1]
        if last.role is Role.USER:
            calls = tuple(
                ToolCall(id=f"call-{i}", name=name, arguments="{}") for i, name in enumerate(ECHOES)
            )
            return ModelResponse(tool_calls=calls)
        results = [m.content for m in request.messages if m.role is Role.TOOL][-len(ECHOES) :]
        return ModelResponse(text="they said: " + " | ".join(results))

    def seen(self) -> str:
        return json.dumps([[m.content for m in r.messages] for r in self.requests])


@asynccontextmanager
async def backend(
    name: str, directory: pathlib.Path, dsn: str | None
) -> AsyncIterator[tuple[StorageBundle, Callable[[], str]]]:
    """A bundle, and a function that returns everything it stored, as text."""
    if name == "sqlite":
        async with open_sqlite_storage(directory / "agentik.db") as bundle:
            yield bundle, partial(_files, directory)
        return
    assert dsn is not None
    schema = fresh_schema()
    async with open_postgres_storage(dsn, schema=schema, readers=2) as bundle:
        yield bundle, partial(_rows, dsn, schema)


def _files(directory: pathlib.Path) -> str:
    data = b"".join(p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file())
    return data.decode("utf-8", "replace")


def _rows(dsn: str, schema: str) -> str:
    """Every value of every row of every table of the schema (bytea decoded as UTF-8)."""
    out: list[str] = []
    with psycopg.connect(dsn) as connection:
        tables = connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchall()
        for (table,) in tables:
            query = sql.SQL("SELECT * FROM {}.{}").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
            for row in connection.execute(query):
                for value in row:
                    if isinstance(value, bytes | memoryview):
                        out.append(bytes(value).decode("utf-8", "replace"))
                    else:
                        out.append(str(value))
    assert out, "no rows read: the check would be empty"
    return "\n".join(out)


async def _turns(client: httpx2.AsyncClient) -> list[httpx2.Response]:
    """One turn over each transport, then the history and the export."""
    sse = {"Accept": "text/event-stream"}
    turns = "/agentik/conversations/c/turns"
    out = [
        await client.post(turns, json={"text": "echo"}),
        await client.post(turns, json={"text": "echo again"}, headers=sse),
    ]
    run = {
        "threadId": "t",
        "runId": "r1",
        "messages": [{"id": "m1", "role": "user", "content": "echo"}],
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    out.append(await client.post("/agui", json=run, headers=sse))
    message: dict[str, Any] = {
        "messageId": "a1",
        "role": "ROLE_USER",
        "parts": [{"text": "echo"}],
        "contextId": "a",
    }
    rpc = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {"message": message},
    }
    out.append(await client.post("/a2a", json=rpc, headers={"A2A-Version": "1.0", **sse}))
    for path in ("c/messages", "c/export", "t/messages", "a/export"):
        out.append(await client.get(f"/agentik/conversations/{path}"))
    out += [await client.get("/health"), await client.get("/metrics")]
    return out


def _agentik_log(caplog: pytest.LogCaptureFixture) -> str:
    """Every record but the test servers' own (``mcp.server.*``: they log what they
    answered, which is theirs to quote), formatted with its traceback."""
    return "\n".join(
        caplog.handler.format(record)
        for record in caplog.records
        if not record.name.startswith("mcp.server")
    )


def _missing(secrets: Iterable[str], where: str) -> list[str]:
    return [secret[:12] + "…" for secret in secrets if secret in where]


@pytest.mark.parametrize("storage", ["sqlite", "postgres"])
@pytest.mark.parametrize("name", FLOWS)
async def test_credentials_an_mcp_server_echoes_reach_nothing(
    name: str,
    storage: str,
    tmp_path: pathlib.Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("AGENTIK_MCP_TOKEN_KEY", KEY)  # the daemon's vault reads the login's
    dsn = request.getfixturevalue("postgres_dsn") if storage == "postgres" else None
    model = Model()
    with trio.fail_after(LIMIT * 2):
        async with (
            flow(name, tmp_path) as setup,
            backend(storage, tmp_path / "db" if storage == "sqlite" else tmp_path, dsn) as (
                bundle,
                stored,
            ),
            trio.open_nursery() as nursery,
        ):
            if setup.login:
                await _login(setup.config, McpTokenVault(bundle, KEY.encode()))
            stop = trio.Event()
            config = ServerConfig(port=0, mcp_servers=(setup.config,))
            url = await nursery.start(
                partial(
                    serve_agentik,
                    config,
                    storage=bundle,
                    model=ScriptedModel(model.respond),
                    shutdown_trigger=stop.wait,
                )
            )
            async with httpx2.AsyncClient(base_url=url, timeout=LIMIT) as client:
                responses = await _turns(client)
            stop.set()
        everything_stored = stored()
    secrets = [s for s in setup.known() if s]
    assert len(secrets) >= (1 if name == "static_header" else 2), secrets
    secrets += setup.hidden
    first = responses[0]
    assert first.status_code == 200, first.text
    assert first.text.count("you sent Authorization: Bearer ***") >= 3, first.text[:2000]
    for response in responses:
        assert response.status_code == 200, (response.url, response.text[:500])
        assert not _missing(secrets, response.text), (response.url.path, response.text[:2000])
    assert not _missing(secrets, model.seen()), "a credential reached a model request"
    assert not _missing(secrets, _agentik_log(caplog)), "a credential was logged"
    assert not _missing(secrets, everything_stored), "a credential was stored"


@pytest.fixture(autouse=True)
def _no_sqlite_dir(tmp_path: pathlib.Path) -> None:
    (tmp_path / "db").mkdir()

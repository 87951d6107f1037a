"""Scope step-up: a server answers a tool call with 403 ``insufficient_scope``.

Authorization code: the conversation's turn pauses with a URL-mode question
carrying the authorization URL; the test plays the person (it answers, then
opens the URL with httpx2 and follows the redirect to agentik's 127.0.0.1
callback); the tokens with the wider scope are stored and the call is
retried. Machine grants (client secret, private-key JWT) step up alone.

Real servers on 127.0.0.1 (the SDK's own OAuth routes behind a gate that
wants ``read write`` for ``tools/call``, ``tests/mcp/oauth_server.py``), real
SQLite storage, real agent turns. Real time bounded by ``fail_after``; the
timing tests use timeouts of a second or less and say why.
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import attrs
import pytest
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from agentik import (
    ChatAgent,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    ToolCall,
    TurnResult,
    open_chat_agent,
)
from agentik._errors import ToolError
from agentik.agent import ElicitationAsked, ElicitationRequest, TurnFinished
from agentik.mcp import (
    HttpServer,
    McpServerConfig,
    McpState,
    McpTokenVault,
    McpToolset,
    OAuthSettings,
    open_mcp_toolsets,
    token_key,
)
from agentik.storage import StorageBundle, open_sqlite_storage
from tests.mcp import oauth_server
from tests.mcp.recording import serving
from tests.mcp.test_oauth import _browse, _login
from tests.mcp.test_stdio import LIMIT, tool


def _adds(request: ModelRequest) -> ModelResponse:
    last = request.messages[-1]
    if last.role.value == "user":
        return ModelResponse(
            tool_calls=(ToolCall(id="c1", name="web_add", arguments='{"a": 1, "b": 2}'),)
        )
    return ModelResponse(text=last.content)


def _tool_result(result: TurnResult) -> str:
    return next(m.content for m in result.messages if m.role.value == "tool")


@pytest.fixture
async def stepping() -> AsyncIterator[tuple[str, oauth_server.Authority, oauth_server.ScopeGate]]:
    authority = oauth_server.Authority()
    base = f"http://127.0.0.1:{oauth_server.free_port()}"
    gate = oauth_server.stepping_up(base, authority)
    async with serving(gate, base.removeprefix("http://")):
        yield base, authority, gate


@asynccontextmanager
async def _daemon(
    config: McpServerConfig, storage: StorageBundle, database: pathlib.Path
) -> AsyncIterator[tuple[ChatAgent, McpToolset, McpTokenVault]]:
    vault = McpTokenVault(storage, token_key(database))
    async with (
        open_mcp_toolsets([config], tokens=vault) as (src,),
        open_chat_agent(model=ScriptedModel(_adds), storage=storage, toolsets=[src]) as agent,
    ):
        assert src.state is McpState.READY, src.health.last_error
        yield agent, src, vault


@asynccontextmanager
async def _logged_in(
    config: McpServerConfig, database: pathlib.Path
) -> AsyncIterator[StorageBundle]:
    """A SQLite bundle at ``database`` whose vault holds ``agentik mcp login``'s tokens."""
    async with open_sqlite_storage(database) as storage:
        await _login(config, McpTokenVault(storage, token_key(database)))
        yield storage


async def _turn(
    agent: ChatAgent, person: Callable[[ElicitationRequest], Awaitable[None]]
) -> TurnResult:
    """A turn that adds 1 and 2; ``person`` gets the question it asks."""
    results: list[TurnResult] = []
    async with trio.open_nursery() as nursery:

        async def send() -> None:
            results.append(await agent.send("conv", "add them"))
            nursery.cancel_scope.cancel()

        nursery.start_soon(send)
        while not (pending := await agent.pending_elicitations("conv")):  # noqa: ASYNC110
            await trio.sleep(0.02)  # the 403 comes back over HTTP
        (question,) = pending
        await person(question)
        await trio.sleep_forever()  # until the turn ends
    (result,) = results
    return result


def _config(base: str, **options: object) -> McpServerConfig:
    return McpServerConfig(
        transport=HttpServer(url=f"{base}/mcp", oauth=OAuthSettings()),
        name="web",
        backoff=0.05,
        **options,  # type: ignore[arg-type]
    )


class TestAuthorizationCode:
    async def test_the_person_authorizes_the_wider_scope_and_the_call_goes_on(
        self,
        stepping: tuple[str, oauth_server.Authority, oauth_server.ScopeGate],
        tmp_path: pathlib.Path,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """The call waits (its own 1 s timeout standing still while the person takes
        1.5 s); the question carries the authorization URL, whose redirect comes back
        to the registered 127.0.0.1 callback; the call is retried with the new token,
        which is stored, so the next call asks no one. No token in clear anywhere."""
        caplog.set_level(logging.DEBUG)
        base, authority, gate = stepping
        database = tmp_path / "agentik.db"
        config = _config(base, call_timeout=1.0)
        asked: list[ElicitationRequest] = []

        async def person(question: ElicitationRequest) -> None:
            asked.append(question)
            await trio.sleep(1.5)  # longer than call_timeout: a person reads the page
            await agent.answer_elicitation("conv", question.id)  # "I opened it"
            await _browse(question.url or "")

        with trio.fail_after(LIMIT):
            async with open_sqlite_storage(database) as storage:
                vault = McpTokenVault(storage, token_key(database))
                await _login(config, vault)
                async with _daemon(config, storage, database) as (agent, src, vault):
                    result = await _turn(agent, person)
                    assert _tool_result(result) == "3"
                    again = await agent.send("conv", "add them again")
                    assert _tool_result(again) == "3"
                    health = repr(src.health)
                    tokens = await vault.storage("web").get_tokens()
        (question,) = asked
        assert question.url is not None
        assert question.url.startswith(f"{base}/authorize?")
        assert "scope=read+write" in question.url
        assert (question.schema, question.source) == ({}, "web")
        assert question.url in question.message
        assert (authority.authorizations, gate.refused) == (2, 1)
        assert tokens is not None
        assert tokens.scope == "read write"
        files = b"".join(p.read_bytes() for p in tmp_path.iterdir())  # noqa: ASYNC240 - test data
        secrets = authority.issued_secrets()
        assert len(secrets) == 4  # the login's pair and the step-up's pair
        for secret in secrets:
            assert secret.encode() not in files
            assert secret not in caplog.text
            assert secret not in health
            assert all(secret not in m.content for m in (*result.messages, *again.messages))
        # The flow's state stays out of agentik's log (the test's browser logs its requests).
        ours = [r.getMessage() for r in caplog.records if r.name.startswith("agentik")]
        assert any("wider authorization" in line for line in ours)
        assert all(question.url not in line for line in ours)

    async def test_a_streamed_turn_yields_the_url_question(
        self,
        stepping: tuple[str, oauth_server.Authority, oauth_server.ScopeGate],
        tmp_path: pathlib.Path,
    ) -> None:
        """What the HTTP transports put to the person: ``ElicitationAsked`` with the URL."""
        base, _, _ = stepping
        database = tmp_path / "agentik.db"
        config = _config(base)
        with trio.fail_after(LIMIT):
            async with _logged_in(config, database) as storage:
                async with _daemon(config, storage, database) as (agent, _, _):
                    async with agent.stream("conv", "add them") as events:
                        async for event in events:
                            if isinstance(event, ElicitationAsked):
                                assert event.request.url is not None
                                await _browse(event.request.url)  # no answer needed
                            elif isinstance(event, TurnFinished):
                                assert _tool_result(event.result) == "3"

    @pytest.mark.parametrize("action", ["decline", "cancel"])
    async def test_a_declined_authorization_is_an_error_result(
        self,
        stepping: tuple[str, oauth_server.Authority, oauth_server.ScopeGate],
        tmp_path: pathlib.Path,
        action: str,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """The model learns why; the server stays ready (the same connection: no
        restart); nothing new is stored; the log says it once, not as an error."""
        caplog.set_level(logging.INFO)
        base, authority, _ = stepping
        database = tmp_path / "agentik.db"
        config = _config(base)

        async def person(question: ElicitationRequest) -> None:
            await agent.answer_elicitation("conv", question.id, action=action)  # type: ignore[arg-type]

        with trio.fail_after(LIMIT):
            async with _logged_in(config, database) as storage:
                async with _daemon(config, storage, database) as (agent, src, vault):
                    result = await _turn(agent, person)
                    assert src.state is McpState.READY, src.health.last_error
                    assert src.health.restarts == 0
                    tokens = await vault.storage("web").get_tokens()
        assert _tool_result(result) == (
            f"error: mcp server 'web' needs a wider authorization, which the person {action}d "
            "(calling 'add')"
        )
        assert authority.authorizations == 1
        assert tokens is not None
        assert tokens.scope is None
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
        said = [r for r in caplog.records if f"which the person {action}d" in r.getMessage()]
        assert [r.levelname for r in said] == ["INFO"]

    async def test_no_authorization_in_time_is_an_error_result(
        self,
        stepping: tuple[str, oauth_server.Authority, oauth_server.ScopeGate],
        tmp_path: pathlib.Path,
    ) -> None:
        """``elicitation_timeout`` bounds the wait (0.3 s here, so the test is quick);
        accepting ("I opened it") without the redirect following does not end it."""
        base, _, _ = stepping
        database = tmp_path / "agentik.db"
        config = _config(base, elicitation_timeout=0.3)

        async def person(question: ElicitationRequest) -> None:
            await agent.answer_elicitation("conv", question.id)

        with trio.fail_after(LIMIT):
            async with _logged_in(config, database) as storage:
                async with _daemon(config, storage, database) as (agent, _, _):
                    result = await _turn(agent, person)
                    assert await agent.pending_elicitations("conv") == ()
        assert _tool_result(result) == (
            "error: mcp server 'web' needs a wider authorization, which did not come within 0.3s "
            "(calling 'add')"
        )

    async def test_outside_a_conversation_no_one_is_asked(
        self,
        stepping: tuple[str, oauth_server.Authority, oauth_server.ScopeGate],
        tmp_path: pathlib.Path,
    ) -> None:
        """A call that is not a conversation's (no person behind it) says to log in."""
        base, _, _ = stepping
        database = tmp_path / "agentik.db"
        config = _config(base)
        with trio.fail_after(LIMIT):
            async with _logged_in(config, database) as storage:
                async with _daemon(config, storage, database) as (_, src, _):
                    with pytest.raises(ToolError) as error:
                        await tool(src, "web_add").handler({"a": 1, "b": 2})
        assert str(error.value) == (
            "mcp server 'web' needs an authorization: run `agentik mcp login web` (calling 'add')"
        )


@pytest.fixture
async def machine() -> AsyncIterator[oauth_server.MachineAuthority]:
    base = f"http://127.0.0.1:{oauth_server.free_port()}"
    authority = oauth_server.MachineAuthority(base)
    async with serving(oauth_server.machine(authority), base.removeprefix("http://")):
        yield authority


class TestMachineGrants:
    async def test_client_credentials_step_up_without_a_person(
        self, machine: oauth_server.MachineAuthority, tmp_path: pathlib.Path
    ) -> None:
        """The 403 gets a new client-credentials token with the wider scope; no question."""
        machine.client_secret = "s3cret-" + "x" * 20
        settings = OAuthSettings(
            grant="client_credentials",
            client_id=machine.client_id,
            client_secret=machine.client_secret,
            issuer=machine.base,
        )
        await self._adds_without_a_person(machine, settings, tmp_path)
        assert machine.grants == ["", "read write"]

    async def test_a_private_key_jwt_client_steps_up_and_the_key_is_never_shown(
        self,
        machine: oauth_server.MachineAuthority,
        tmp_path: pathlib.Path,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """RFC 7523 assertions signed with the configured key and ``kid``; the key's PEM,
        the assertions and the tokens appear nowhere: log, health, results, database."""
        caplog.set_level(logging.DEBUG)
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        key_file = tmp_path / "keys" / "client.pem"
        key_file.parent.mkdir()
        key_file.write_bytes(pem)
        machine.public_key, machine.key_id = key.public_key(), "key-2026"
        settings = OAuthSettings(
            grant="client_credentials",
            client_id=machine.client_id,
            private_key_file=str(key_file),
            key_id="key-2026",
            signing_alg="ES256",
            issuer=machine.base,
        )
        seen = await self._adds_without_a_person(machine, settings, tmp_path / "db")
        assert machine.grants == ["", "read write"]
        assert len(machine.assertions) == 2
        body = pem.decode().splitlines()[1]  # a line of the key itself
        files = b"".join(p.read_bytes() for p in (tmp_path / "db").iterdir())
        for secret in (body, *machine.issued_secrets()):
            assert secret not in caplog.text
            assert secret not in seen
            assert secret.encode() not in files
        assert repr(settings).count("BEGIN") == 0

    async def test_an_enterprise_identity_assertion_gets_tokens_and_steps_up(
        self,
        machine: oauth_server.MachineAuthority,
        tmp_path: pathlib.Path,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """SEP-990: the ID token (read from its file) becomes an ID-JAG at the identity
        provider, the ID-JAG an access token at the configured issuer; a 403 gets a new
        one with the wider scope. The ID token, client secret, ID-JAGs and tokens
        appear nowhere."""
        caplog.set_level(logging.DEBUG)
        machine.client_secret = "xaa-secret-" + "y" * 16
        machine.id_token = "eyJ-id-token-" + "z" * 24
        id_token_file = tmp_path / "id_token"
        id_token_file.write_text(machine.id_token + "\n")
        settings = OAuthSettings(
            grant="identity_assertion",
            client_id=machine.client_id,
            client_secret=machine.client_secret,
            token_endpoint_auth="client_secret_basic",
            issuer=machine.base,
            idp_token_endpoint=f"{machine.base}/idp/token",
            idp_client_id="agentik-at-idp",
            id_token_file=str(id_token_file),
        )
        seen = await self._adds_without_a_person(machine, settings, tmp_path / "db")
        assert machine.grants == ["", "read write"]
        assert machine.exchanges == 2
        files = b"".join(p.read_bytes() for p in (tmp_path / "db").iterdir())
        for secret in (machine.id_token, machine.client_secret, *machine.issued_secrets()):
            assert secret not in caplog.text
            assert secret not in seen
            assert secret.encode() not in files

    async def test_a_refused_token_exchange_says_so_and_nothing_secret(
        self, machine: oauth_server.MachineAuthority, tmp_path: pathlib.Path
    ) -> None:
        """A stale ID token: the identity provider's status and error code, no token."""
        machine.client_secret, machine.id_token = "s", "the-current-id-token"
        stale = tmp_path / "id_token"
        stale.write_text("a-stale-id-token")
        settings = OAuthSettings(
            grant="identity_assertion",
            client_id=machine.client_id,
            client_secret="s",
            issuer=machine.base,
            idp_token_endpoint=f"{machine.base}/idp/token",
            idp_client_id="agentik-at-idp",
            id_token_file=str(stale),
        )
        config = McpServerConfig(
            transport=HttpServer(url=f"{machine.base}/mcp", oauth=settings), name="web"
        )
        with trio.fail_after(LIMIT):
            async with open_mcp_toolsets([config]) as (src,):
                assert src.state is McpState.FAILED
                error = src.health.last_error or ""
        assert "the identity provider refused the token exchange: HTTP 400 (invalid_grant)" in (
            error
        )
        assert "a-stale-id-token" not in error

    @staticmethod
    async def _adds_without_a_person(
        machine: oauth_server.MachineAuthority, settings: OAuthSettings, directory: pathlib.Path
    ) -> str:
        """Two turns that add, answered by the server alone; what the agent showed."""
        await trio.Path(directory).mkdir(exist_ok=True)
        database = directory / "agentik.db"
        config = McpServerConfig(
            transport=HttpServer(url=f"{machine.base}/mcp", oauth=settings), name="web"
        )
        with trio.fail_after(LIMIT):
            async with (
                open_sqlite_storage(database) as storage,
                _daemon(config, storage, database) as (agent, src, _),
            ):
                first = await agent.send("conv", "add them")
                second = await agent.send("conv", "add them again")
                assert await agent.pending_elicitations("conv") == ()
                health = repr(src.health)
        assert (_tool_result(first), _tool_result(second)) == ("3", "3")
        return "\n".join([health, *(m.content for m in (*first.messages, *second.messages))])


def test_the_http_transports_carry_the_url_of_a_url_question() -> None:
    """The native API and A2A show a URL question's page (AG-UI's CUSTOM event too);
    form questions are unchanged."""
    from agentik.server.a2a._views import elicitation_json as a2a_json
    from agentik.server.native._wire import elicitation_json as native_json

    form = ElicitationRequest(conversation_id="c", id="q", source="web", message="m", schema={})
    url = attrs.evolve(form, url="https://auth.example/authorize?x=1")
    assert native_json(url)["url"] == a2a_json(url)["url"] == "https://auth.example/authorize?x=1"
    assert "url" not in native_json(form)
    assert "url" not in a2a_json(form)

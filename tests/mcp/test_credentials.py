"""MCP credentials: which are known, how they are masked, and where.

Hypothesis draws credentials and texts that quote them (anywhere, several
times, inside JSON values) for ``McpCredentials``; the listing, the questions
and the tool results of a real server (``echo_server`` over HTTP on
127.0.0.1, with a static ``Authorization`` header) are checked through a real
agent; the mcp SDK's loggers are checked through logging itself.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from agentik import (
    ChatAgent,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    ToolCall,
    in_memory_storage,
    open_chat_agent,
)
from agentik._errors import ToolError
from agentik.agent import ElicitationAsked
from agentik.mcp import (
    HttpServer,
    McpServerConfig,
    McpTokenVault,
    McpToolset,
    OAuthSettings,
    StdioServer,
    open_mcp_toolsets,
)
from agentik.mcp._credentials import KEPT, McpCredentials, configured
from tests.mcp import echo_server
from tests.mcp.recording import serving
from tests.mcp.test_stdio import LIMIT

TOKEN = "static-token-" + "q" * 20
_secrets = st.text(
    st.characters(codec="utf-8", exclude_characters="*", exclude_categories=("Cs",)),
    min_size=4,
    max_size=40,
)
_header_values = st.text(
    st.characters(codec="utf-8", exclude_characters="*", categories=("L", "N", "P", "S")),
    min_size=4,
    max_size=40,
)
"""A header's value is one word here: ``Scheme credentials`` is masked as credentials."""


def _http(**changes: object) -> McpServerConfig:
    return McpServerConfig(transport=HttpServer(url="http://127.0.0.1:1/mcp", **changes))  # type: ignore[arg-type]


class TestConfigured:
    def test_secret_headers_and_the_url_password_are_credentials(self) -> None:
        """Header values by name (the scheme left out, as for a model's key); other
        headers are not."""
        config = McpServerConfig(
            transport=HttpServer(
                url="https://user:pa55word@example.test/mcp",
                headers={
                    "Authorization": "Bearer abc-def-123",
                    "X-Goog-Api-Key": "goog-key-1",
                    "X-Auth-Token": "tok-en-456",
                    "X-Trace": "not-a-secret",
                },
            )
        )
        found = set(configured(config))
        assert {"abc-def-123", "goog-key-1", "tok-en-456", "pa55word"} <= found
        assert "not-a-secret" not in found
        assert "Bearer abc-def-123" not in found

    def test_oauth_secrets_and_their_basic_forms_are_credentials(self) -> None:
        settings = OAuthSettings(
            grant="client_credentials",
            client_id="id with space",
            client_secret="s3cr/t+",
            idp_client_id="idp",
            idp_client_secret="idp-secret",
        )
        found = set(configured(_http(oauth=settings)))
        assert {"s3cr/t+", "idp-secret"} <= found
        sdk = base64.b64encode(b"id%20with%20space:s3cr%2Ft%2B").decode()
        httpx2 = base64.b64encode(b"idp:idp-secret").decode()
        assert {sdk, httpx2} <= found

    def test_stdio_env_values_named_like_secrets_are_credentials(self) -> None:
        transport = StdioServer(
            command="x", env={"GITHUB_TOKEN": "ghp-123456", "API_KEY": "k-98765", "LANG": "C.UTF-8"}
        )
        found = set(configured(McpServerConfig(transport=transport)))
        assert found == {"ghp-123456", "k-98765"}


def _strings(value: object) -> list[str]:
    """Every string of a JSON value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in (key, *_strings(item))]
    return []


class TestMasking:
    @settings(max_examples=200)
    @given(
        fixed=st.lists(_header_values, max_size=3),
        seen=st.lists(_secrets, max_size=5),
        around=st.lists(st.text(max_size=20), min_size=1, max_size=6),
    )
    def test_no_credential_survives_in_text_or_json(
        self, fixed: list[str], seen: list[str], around: list[str]
    ) -> None:
        """Whatever the credentials and wherever a text quotes them (also inside JSON
        keys and values), the masked text shows none, and text without them is kept."""
        headers = {f"X-Api-Key-{i}": value for i, value in enumerate(fixed)}
        credentials = McpCredentials(_http(headers=headers))
        credentials.add(*seen)
        secrets = [*fixed, *seen]
        quoted = [secrets[i % len(secrets)] if secrets else "" for i in range(len(around))]
        text = "".join(a + q for a, q in zip(around, quoted, strict=True))
        masked = credentials.text(text)
        value = json.loads(json.dumps({text: [text, {"k": text}, 1, None]}))
        shown = [masked, *_strings(credentials.structure(value))]
        for secret in secrets:  # no secret holds "*": none can span a mask
            assert not [s for s in shown if secret in s]
        plain = "".join(around)
        if not any(s in plain for s in (*fixed, *seen) if len(s) >= 4):
            assert credentials.text(plain) == plain

    def test_the_newest_credentials_are_kept(self) -> None:
        credentials = McpCredentials(_http(headers={"Authorization": "Bearer fixed-token"}))
        tokens = [f"token-{i:04d}" for i in range(KEPT + 10)]
        credentials.add(*tokens)
        credentials.add(tokens[0])  # seen again: the newest
        shown = credentials.text(" ".join(tokens))
        assert "token-0000" not in shown
        assert "token-0001" in shown  # the oldest, dropped
        assert f"token-{KEPT + 9:04d}" not in shown
        assert credentials.text("fixed-token") == "***"

    def test_a_tool_error_is_masked_without_its_causes(self) -> None:
        credentials = McpCredentials(_http(headers={"Authorization": "Bearer tok-12345"}))
        clean = ToolError("nothing here")
        assert credentials.tool_error(clean) is clean
        try:
            raise ToolError("said tok-12345") from ValueError("tok-12345")
        except ToolError as error:
            masked = credentials.tool_error(error)
        assert str(masked) == "said ***"
        assert masked.__cause__ is None

    async def test_tokens_and_client_secrets_through_the_storage_are_learned(self) -> None:
        vault = McpTokenVault(in_memory_storage(), b"A" * 43 + b"=")
        credentials = McpCredentials(_http())
        storage = credentials.watch(vault.storage("s"))
        await storage.set_tokens(OAuthToken(access_token="acc-1234", refresh_token="ref-5678"))
        await storage.set_client_info(
            OAuthClientInformationFull(client_id="cid", client_secret="csec-9012")
        )
        again = McpCredentials(_http())  # a new process reads them back
        loaded = again.watch(vault.storage("s"))
        await loaded.get_tokens()
        await loaded.get_client_info()
        for learned in (credentials, again):
            assert learned.text("acc-1234 ref-5678 csec-9012") == "*** *** ***"


def test_the_sdks_loggers_show_no_credential(caplog: pytest.LogCaptureFixture) -> None:
    """The SDK logs whole messages at DEBUG; a live toolset's credentials are masked in
    them, in the message and in a traceback; other loggers are not touched."""
    caplog.set_level(logging.DEBUG)
    credentials = McpCredentials(_http(headers={"Authorization": "Bearer tok-sdk-777"}))
    sdk = logging.getLogger("mcp.client.streamable_http")
    sdk.debug("SSE message: %s", {"result": "you sent Bearer tok-sdk-777"})
    try:
        raise ValueError("parse error near tok-sdk-777")
    except ValueError:
        sdk.exception("Error parsing SSE message")
    logging.getLogger("client").warning("dropping tool %r", "tok-sdk-777")
    assert "tok-sdk-777" not in caplog.text
    assert "you sent Bearer ***" in caplog.text
    assert "parse error near ***" in caplog.text
    del credentials


def _asks(request: ModelRequest) -> ModelResponse:
    last = request.messages[-1]
    if last.role.value == "user":
        return ModelResponse(tool_calls=(ToolCall(id="c1", name="web_ask", arguments="{}"),))
    return ModelResponse(text=last.content)


@asynccontextmanager
async def _echoing() -> AsyncIterator[McpToolset]:
    app = echo_server.build(lambda: [TOKEN], quoting=TOKEN).streamable_http_app(host="127.0.0.1")
    async with serving(app) as base:
        config = McpServerConfig(
            transport=HttpServer(url=f"{base}/mcp", headers={"Authorization": f"Bearer {TOKEN}"}),
            name="web",
        )
        async with open_mcp_toolsets([config]) as (src,):
            yield src


async def test_the_listing_shows_no_credential() -> None:
    """Instructions (the catalog row), tool descriptions and parameter schemas are the
    server's words too: masked; a tool whose name shows a credential is left out."""
    with trio.fail_after(LIMIT):
        async with _echoing() as src:
            contribution = src.contribution
            reports = src.health.reports
    shown = json.dumps(
        [
            contribution.description,
            *((t.name, t.description, t.parameters) for t in contribution.tools),
            reports,
        ]
    )
    assert TOKEN not in shown
    assert "1 tool(s) left out: their names show a credential" in reports
    assert "web_echo" in shown
    assert "Instructions that quote ***" in shown
    assert "A tool whose description quotes ***" in shown
    assert "a parameter that quotes ***" in shown


async def test_a_question_the_server_asks_shows_no_credential() -> None:
    """An elicitation quoting the header: masked in the pending question and in the
    stream's event; the person's answer still reaches the server."""
    with trio.fail_after(LIMIT):
        async with (
            _echoing() as src,
            open_chat_agent(
                model=ScriptedModel(_asks), storage=in_memory_storage(), toolsets=[src]
            ) as agent,
        ):
            events, pending = await _streamed_question(agent)
    assert TOKEN not in repr(events)
    assert TOKEN not in repr(pending)
    asked = [e for e in events if isinstance(e, ElicitationAsked)]
    assert asked, events
    assert asked[0].request.message.startswith("you sent Authorization: Bearer ***")
    assert "asked: decline" in repr(events)


async def _streamed_question(agent: ChatAgent) -> tuple[list[object], list[object]]:
    events: list[object] = []
    pending: list[object] = []
    async with agent.stream("q", "ask me") as stream:
        async for event in stream:
            events.append(event)
            if isinstance(event, ElicitationAsked):
                pending += await agent.pending_elicitations("q")
                await agent.answer_elicitation("q", event.request.id, action="decline")
    return events, pending

"""The client under test for the MCP conformance suite (``@modelcontextprotocol/conformance``).

Run by the suite as ``python conformance_client.py <server-url>`` with
``MCP_CONFORMANCE_SCENARIO`` (and, for some, ``MCP_CONFORMANCE_CONTEXT``)
set. It uses agentik's public API only, the way an application would:
the server becomes a toolset (``open_mcp_toolsets``); for the auth
scenarios it is configured with ``OAuthSettings`` and an operator's
``login`` comes first (this script plays the browser: it opens the
authorization URL and follows its redirect to the 127.0.0.1 callback);
then a real agent turn runs (``open_chat_agent`` with a scripted model that
calls every tool of the toolset once, with arguments made from its schema),
while this script, as the person, accepts every question a tool asks
(elicitation) with no content of its own, so the schema's defaults apply,
and opens the URL of every URL-mode question (a step-up authorization
mid-call) in its browser. For ``private_key_jwt`` the operator's key file
is the suite's key, written 0600 to a temporary directory. For cross-app
access (SEP-990) the operator's ID token file holds the suite's ID token,
and the authorization server's issuer, which the operator configures, is
read from the server's protected-resource metadata as an operator would.

Exit code 0 when the turn finished, 1 (with the reason on stderr) when the
server could not be used.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import httpx2
import trio

from agentik import (
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    ToolCall,
    TurnResult,
    in_memory_storage,
    open_chat_agent,
)
from agentik.mcp import (
    HttpServer,
    McpServerConfig,
    McpState,
    McpTokenVault,
    OAuthSettings,
    login,
    open_mcp_toolsets,
    token_key,
)

_EXAMPLES: dict[str, object] = {
    "integer": 1,
    "number": 1,
    "string": "x",
    "boolean": True,
    "array": [],
    "object": {},
}


def _private(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as file:
        file.write(text)
    return path


async def _issuer_of(url: str) -> str:
    """The authorization server the MCP server names (its protected-resource metadata)."""
    async with httpx2.AsyncClient() as http:
        challenge = (await http.post(url, json={})).headers.get("www-authenticate", "")
        metadata = challenge.split('resource_metadata="', 1)[1].split('"', 1)[0]
        servers = (await http.get(metadata)).json()["authorization_servers"]
    return str(servers[0])


async def _oauth(
    url: str, scenario: str, context: dict[str, object], keys: str
) -> OAuthSettings | None:
    if not scenario.startswith("auth/"):
        return None
    client_id = context.get("client_id")
    secret = context.get("client_secret")
    if "idp_id_token" in context:
        return OAuthSettings(
            grant="identity_assertion",
            client_id=str(client_id),
            client_secret=str(secret),
            token_endpoint_auth="client_secret_basic",
            issuer=await _issuer_of(url),
            idp_token_endpoint=str(context["idp_token_endpoint"]),
            idp_client_id=str(context["idp_client_id"]),
            id_token_file=_private(keys, "id_token", str(context["idp_id_token"])),
        )
    if "private_key_pem" in context:
        return OAuthSettings(
            grant="client_credentials",
            client_id=str(client_id),
            private_key_file=_private(keys, "client.pem", str(context["private_key_pem"])),
            signing_alg=str(context.get("signing_algorithm", "RS256")),
        )
    if scenario.startswith("auth/client-credentials"):
        return OAuthSettings(
            grant="client_credentials",
            client_id=str(client_id),
            client_secret=str(secret),
        )
    return OAuthSettings(
        client_id=str(client_id) if client_id else None,
        client_secret=str(secret) if secret else None,
        client_metadata_url="https://conformance-test.local/client-metadata.json"
        if "cimd" in scenario
        else None,
    )


def _arguments(schema: dict[str, object]) -> str:
    properties = schema.get("properties")
    required = schema.get("required")
    arguments: dict[str, object] = {}
    if isinstance(properties, dict) and isinstance(required, list):
        for name in required:
            prop = properties.get(name)
            kind = prop.get("type") if isinstance(prop, dict) else None
            arguments[name] = _EXAMPLES.get(kind if isinstance(kind, str) else "string", "x")
    return json.dumps(arguments)


async def _browse(url: str) -> None:
    """The operator's browser: open the authorization URL, follow its redirect back."""
    async with httpx2.AsyncClient() as browser:
        answer = await browser.get(url)
        if "location" in answer.headers:
            await browser.get(answer.headers["location"])


async def main(url: str) -> int:
    with tempfile.TemporaryDirectory() as keys:
        return await _scenario(url, keys)


async def _scenario(url: str, keys: str) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    oauth = await _oauth(url, scenario, context, keys)
    config = McpServerConfig(
        transport=HttpServer(url=url, oauth=oauth), name="conformance", connect_timeout=20.0
    )
    storage = in_memory_storage()
    vault = McpTokenVault(storage, token_key(None))
    if oauth is not None and oauth.grant == "authorization_code":
        async with trio.open_nursery() as nursery:

            async def show(authorization_url: str) -> None:
                nursery.start_soon(_browse, authorization_url)

            await login(config, vault, show)
    async with open_mcp_toolsets([config], tokens=vault) as (source,):
        if source.state is not McpState.READY:
            print(f"not ready: {source.health.last_error}", file=sys.stderr)
            return 1
        tools = source.contribution.tools

        def respond(request: ModelRequest) -> ModelResponse:
            if request.messages[-1].role.value == "user":
                calls = tuple(
                    ToolCall(id=f"call-{i}", name=tool.name, arguments=_arguments(tool.parameters))
                    for i, tool in enumerate(tools)
                )
                return ModelResponse(tool_calls=calls)
            return ModelResponse(text="done")

        async with open_chat_agent(
            model=ScriptedModel(respond), storage=storage, toolsets=[source]
        ) as agent:
            results: list[TurnResult] = []
            async with trio.open_nursery() as nursery:

                async def turn() -> None:
                    text = f"scenario {scenario}: use the tools"
                    results.append(await agent.send("conformance", text))
                    nursery.cancel_scope.cancel()

                nursery.start_soon(turn)
                answered: set[str] = set()
                while True:  # the person: accept every question with its defaults
                    for question in await agent.pending_elicitations("conformance"):
                        if question.id in answered:
                            continue  # a URL question waits for the browser's redirect
                        answered.add(question.id)
                        print(f"asked: {question.message}")
                        await agent.answer_elicitation("conformance", question.id, content={})
                        if question.url is not None:
                            nursery.start_soon(_browse, question.url)
                    await trio.sleep(0.05)
            (result,) = results
        for message in result.messages:
            if message.role.value == "tool":
                print(f"tool result: {message.content}")
        print(f"turn {result.status}")
    return 0


if __name__ == "__main__":
    sys.exit(trio.run(main, sys.argv[1]))

"""A careless MCP server for the tests: its tools quote the credentials they received.

A server (or a proxy in front of it) that echoes the request's headers puts
the client's access token in a tool result; one that also quotes what its
authorization server knows shows client secrets and assertions. ``build``
makes such a server with the mcp SDK: ``echo`` answers with the
``Authorization`` header it got and ``known()`` (the credentials the test's
authorization server saw), ``echo_fail`` fails with the same text (an
``isError`` result), ``echo_resource`` returns it inside an embedded text
resource, and ``ask`` asks the person a question quoting it (elicitation).
``quoting`` makes the listing quote a text too (instructions, a description, a
tool's name).
"""

# No ``from __future__ import annotations``: the SDK reads ``ask``'s annotation at
# decoration, and its resolver is local to ``build``.
from collections.abc import Callable, Iterable
from typing import Annotated, Any

from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.types import EmbeddedResource, TextResourceContents
from pydantic import BaseModel, Field


class Answer(BaseModel):
    ok: bool = True


def build(
    known: Callable[[], Iterable[str]] = tuple, *, quoting: str | None = None, **options: Any
) -> MCPServer:
    """The server; ``options`` go to ``MCPServer`` (``auth=`` behind OAuth). With
    ``quoting``, its instructions, a tool's name, and a tool ``described``'s
    description and parameter, quote that text too."""
    if quoting is not None:
        options["instructions"] = f"Instructions that quote {quoting}"
    server = MCPServer("echo test server", **options)

    if quoting is not None:

        @server.tool(name=quoting)
        def named() -> str:
            """A tool named after the quoted text."""
            return "named"

        @server.tool(description=f"A tool whose description quotes {quoting}")
        def described(
            value: Annotated[str, Field(description=f"a parameter that quotes {quoting}")] = "",
        ) -> str:
            return "described"

    def quote(ctx: Context) -> str:
        header = (ctx.headers or {}).get("authorization", "(none)")
        return f"you sent Authorization: {header}; I also know: {' '.join(known())}"

    @server.tool()
    def echo(ctx: Context) -> str:
        """Quote the Authorization header of this request, and what the server knows."""
        return quote(ctx)

    @server.tool()
    def echo_fail(ctx: Context) -> str:
        """Fail, quoting the Authorization header."""
        raise ToolError(quote(ctx))

    @server.tool()
    def echo_resource(ctx: Context) -> EmbeddedResource:
        """Return the quote inside an embedded text resource."""
        contents = TextResourceContents(uri="echo://quote", text=quote(ctx))
        return EmbeddedResource(type="resource", resource=contents)

    def question(ctx: Context) -> Elicit[Answer]:
        return Elicit(quote(ctx), Answer)

    @server.tool()
    def ask(answer: Annotated[ElicitationResult[Answer], Resolve(question)]) -> str:
        """Ask the person a question that quotes the Authorization header."""
        return f"asked: {answer.action}"

    return server

"""A tiny MCP server for the tests, over stdio (run as a script) or HTTP (``build()``).

Tools: ``add``; ``book`` (asks the person: elicitation); ``where`` (its
cwd, an environment variable, the X-Test header); ``fail`` (raises: an
isError result); ``hang`` (never answers); ``grow``/``shrink`` (add or
remove a tool, then announce the change both ways:
``subscriptions/listen`` for 2026-07-28 sessions, the
``tools/list_changed`` notification for handshake ones); stdio only:
``crash`` (the process exits), ``freeze`` (the whole process stops:
SIGSTOP), ``garbage`` (writes a non-JSON line to stdout).

With ``TINY_PID_DIR`` set, each start writes ``<pid>`` there as an empty
file, so tests can count launches and check that a process is gone.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
from typing import Annotated, Any

import anyio
from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from pydantic import BaseModel

_PROTOCOL_OUT = -1
"""The protocol pipe itself (set when run as a script): the SDK diverts ``sys.stdout``
(and fd 1) to stderr while serving."""


class Booking(BaseModel):
    name: str
    guests: int = 2


def _ask_booking() -> Elicit[Booking]:
    # A resolver: mid-call on handshake sessions, input-required rounds on 2026-07-28 ones.
    return Elicit("Who is the booking for?", Booking)


def build(**options: Any) -> MCPServer:
    """The server; ``options`` go to ``MCPServer`` (``auth=`` for the OAuth tests)."""
    server = MCPServer(
        "tiny test server", instructions="A tiny MCP server\nfor the tests.", **options
    )

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def fail(message: str) -> str:
        """Fail with the given message."""
        raise ToolError(message)

    @server.tool()
    async def hang() -> str:
        """Never answer."""
        await anyio.sleep(3600)
        return "woke up"

    @server.tool()
    async def grow(name: str, ctx: Context) -> str:
        """Add a tool called ``name`` that echoes its text."""

        def echo(text: str) -> str:
            return f"{name}: {text}"

        server.add_tool(echo, name=name, description=f"Echo, added as {name}.")
        await _announce(ctx)
        return f"added {name}"

    @server.tool()
    async def shrink(name: str, ctx: Context) -> str:
        """Remove the tool called ``name``."""
        server.remove_tool(name)
        await _announce(ctx)
        return f"removed {name}"

    @server.tool()
    def where(variable: str, ctx: Context) -> str:
        """Report the working directory, an environment variable and the X-Test header."""
        header = (ctx.headers or {}).get("x-test")
        return f"cwd={os.getcwd()} {variable}={os.environ.get(variable)} x-test={header}"

    @server.tool()
    def book(answer: Annotated[ElicitationResult[Booking], Resolve(_ask_booking)]) -> str:
        """Ask the person who the booking is for (elicitation), then confirm it."""
        if isinstance(answer, AcceptedElicitation):
            return f"booked for {answer.data.name}, {answer.data.guests} guests"
        return f"not booked: {answer.action}"

    @server.tool()
    def crash() -> str:
        """Exit the server process at once."""
        os._exit(3)

    @server.tool()
    def freeze() -> str:
        """Stop the whole server process (SIGSTOP): it will never answer anything again."""
        os.kill(os.getpid(), signal.SIGSTOP)
        return "thawed"

    @server.tool()
    def garbage() -> str:
        """Write a line that is not JSON-RPC to stdout, then answer normally."""
        os.write(_PROTOCOL_OUT, b"this is not json\n")
        return "sent garbage"

    return server


async def _announce(ctx: Context) -> None:
    await ctx.notify_tools_changed()
    # A 2026-07-28 session has no unsolicited notifications; handshake ones need it.
    with contextlib.suppress(Exception):
        await ctx.session.send_tool_list_changed()


if __name__ == "__main__":
    _PROTOCOL_OUT = os.dup(1)
    if pid_dir := os.environ.get("TINY_PID_DIR"):
        (pathlib.Path(pid_dir) / str(os.getpid())).touch()
    build().run()

"""Why a connection to an MCP server ended, or a call failed, in one line.

Whatever the SDK raises for a broken server (OSError, MCPError,
ValidationError, groups of them) is described here for the log, ``/health``
and the model's error results; an agentik login error inside it is found and
said plainly.
"""

from __future__ import annotations

from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from agentik._errors import AgentikError, ToolError
from agentik._groups import innermost
from agentik.mcp._auth import LoginError, LoginRequired
from agentik.mcp._naming import one_line
from agentik.mcp._transport import StderrTail


class Fault(Exception):
    """A connection fault described in words for the log and ``/health``."""


def find_login_required(
    exc: BaseException | None, kind: type[AgentikError] = LoginRequired
) -> AgentikError | None:
    """The ``kind`` error behind ``exc``: the SDK wraps it in groups and its own errors."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, kind):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                if (found := find_login_required(inner, kind)) is not None:
                    return found
        exc = exc.__cause__ or exc.__context__
    return None


def with_stderr(why: str, stderr: StderrTail) -> str:
    """The server's last words (a traceback's last line, usually) make a fault clear."""
    return f"{why}; its stderr ended with: {stderr.last}" if stderr.last else why


def describe(exc: BaseException) -> str:
    """One line saying what went wrong, unwrapping the groups the SDK's task groups raise."""
    exc = innermost(exc)
    if isinstance(exc, Fault):
        return str(exc)
    text = str(exc) or type(exc).__name__
    return one_line(f"{type(exc).__name__}: {text}" if str(exc) else text, limit=300)


def call_failure(server: str, mcp_name: str, exc: Exception, refusal: str | None) -> ToolError:
    """The error result of a call to ``mcp_name`` that raised ``exc``; ``refusal``:
    why a step-up authorization for it did not happen, if one was refused."""
    if isinstance(exc, MCPError):
        if exc.code == CONNECTION_CLOSED:
            return ToolError(
                f"mcp server {server!r} closed the connection during {mcp_name!r}; "
                "it is being restarted"
            )
        if refusal is not None:  # the server refused it for want of a scope
            return ToolError(f"{refusal} (calling {mcp_name!r})")
        return ToolError(f"mcp server {server!r} refused {mcp_name!r}: {exc}")
    if (login := find_login_required(exc)) is not None:
        return ToolError(f"{login} (calling {mcp_name!r})")
    if (failed := find_login_required(exc, LoginError)) is not None:
        return ToolError(
            f"mcp server {server!r}: the authorization for {mcp_name!r} failed: {failed}"
        )
    return ToolError(f"mcp server {server!r} failed calling {mcp_name!r}: {describe(exc)}")

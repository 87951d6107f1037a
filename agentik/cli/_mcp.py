"""``agentik mcp login NAME``: an operator completes a server's OAuth authorization once.

The authorization URL is printed; the operator opens it in a browser (on
this machine, or on another one with the redirect port forwarded), approves,
and the browser's redirect comes back to a one-shot listener on 127.0.0.1.
The tokens are stored encrypted in the configured database, where
``agentik serve`` finds them (and refreshes them) from then on.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from agentik.server import ServerConfig


def add_mcp_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mcp = commands.add_parser("mcp", help="MCP servers: log in to one that uses OAuth")
    actions = mcp.add_subparsers(dest="mcp_command", metavar="ACTION")
    login = actions.add_parser(
        "login", help="authorize agentik at an OAuth-protected MCP server (prints a URL to open)"
    )
    login.add_argument("name", metavar="NAME", help="the server's name in [[mcp.servers]]")
    login.add_argument("--config", "-c", help="TOML config file (default: ./agentik.toml if any)")
    login.add_argument(
        "--database", "-d", help="SQLite database path (default: config, then ./agentik.db)"
    )
    login.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds to wait for the browser's redirect (default: 300)",
    )


def run_mcp(args: argparse.Namespace) -> int:
    if args.mcp_command != "login":
        print("agentik mcp: expected an action: login NAME", file=sys.stderr)
        return 2
    from agentik.server import load_config

    overrides = {("storage", "database"): args.database} if args.database else {}
    config = load_config(Path(args.config) if args.config else None, overrides=overrides)
    names = [server.name for server in config.mcp_servers]
    if args.name not in names:
        known = ", ".join(repr(n) for n in names if n) or "none"
        print(
            f"agentik mcp login: no mcp server named {args.name!r} (configured: {known})",
            file=sys.stderr,
        )
        return 2
    return trio.run(_login, config, args.name, args.timeout)


async def _login(config: ServerConfig, name: str, wait: float) -> int:
    from agentik.mcp import LoginError, McpTokenVault, login, token_key
    from agentik.storage import is_postgres_url, open_storage

    server = next(s for s in config.mcp_servers if s.name == name)

    async def show(url: str) -> None:
        print(f"Open this URL in a browser to authorize agentik at {name!r}:\n\n  {url}\n")
        print(f"Waiting up to {wait:g}s for the redirect to 127.0.0.1 ...", flush=True)

    # A SQLite file keeps the token key beside it; nodes on PostgreSQL share
    # AGENTIK_MCP_TOKEN_KEY instead (docs/mcp.md).
    key_file = None if is_postgres_url(config.database) else config.database
    async with open_storage(config.database) as storage:
        vault = McpTokenVault(storage, token_key(key_file))
        try:
            with trio.move_on_after(wait) as waited:
                tools = await login(server, vault, show)
        except LoginError as error:
            print(f"agentik mcp login: {error}", file=sys.stderr)
            return 1
    if waited.cancelled_caught:
        print(f"agentik mcp login: no redirect came back within {wait:g}s", file=sys.stderr)
        return 1
    print(
        f"Logged in to mcp server {name!r} ({tools} tools); "
        f"the tokens are stored encrypted in {config.database}."
    )
    return 0

"""``open_mcp_toolsets``: every configured MCP server as a running toolset source.

Structured concurrency: the manager tasks live in a nursery inside the
``async with`` block and are cancelled when it ends, which closes every
server (stdio servers get their stdin closed, then the SDK's bounded
terminate/kill sequence). The block is entered only once each server's first
attempt has an outcome, so the agent starts with the catalog already known.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

import trio

from agentik.mcp._config import McpServerConfig
from agentik.mcp._source import McpToolset
from agentik.mcp._tokens import McpTokenVault


@asynccontextmanager
async def open_mcp_toolsets(
    configs: Iterable[McpServerConfig], *, tokens: McpTokenVault | None = None
) -> AsyncIterator[tuple[McpToolset, ...]]:
    """Start one manager task per server; yield the sources, in config order.

    ``tokens`` keeps the OAuth tokens of servers configured with ``oauth``
    (``McpTokenVault(storage, token_key(database))``);
    without it they last as long as the process.

    Pass the sources as ``toolsets=`` to ``open_chat_agent`` and read their
    ``health`` for ``/health``. A server that cannot start does not stop the
    others: its source reports the failure and keeps retrying with backoff.
    """
    configs = tuple(configs)
    taken = {config.name for config in configs if config.name is not None}
    sources = tuple(McpToolset(config, taken=taken, tokens=tokens) for config in configs)
    async with trio.open_nursery() as nursery:
        for source in sources:
            nursery.start_soon(source.run, name=f"mcp server {source.config.name or '?'}")
        for source in sources:
            await source.wait_settled()
        try:
            yield sources
        finally:
            nursery.cancel_scope.cancel()

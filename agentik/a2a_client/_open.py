"""``open_a2a_toolsets``: every configured remote A2A agent as a toolset source.

Structured concurrency: the card readers live in a nursery inside the
``async with`` block and are cancelled when it ends; the HTTP client they
share is closed after them. The block is entered once each agent's first
card read has an outcome, so the agent starts with the catalog known; an
agent that cannot be reached does not stop the others (its source says so
in ``health``, its tool answers with an error, and its card is read again
with backoff).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

import httpx2
import trio

from agentik.a2a_client._calls import CallLedger
from agentik.a2a_client._config import A2AAgentConfig, A2AConfigError
from agentik.a2a_client._source import A2AToolset
from agentik.storage import SecretStore, StorageBundle


@asynccontextmanager
async def open_a2a_toolsets(
    configs: Iterable[A2AAgentConfig],
    *,
    storage: StorageBundle | SecretStore | None = None,
    http: httpx2.AsyncClient | None = None,
) -> AsyncIterator[tuple[A2AToolset, ...]]:
    """Read each agent's card; yield one source per agent, in config order.

    ``storage`` keeps the remote task of each running call (its
    ``secret_store``), so a turn resumed after a restart follows the task
    instead of sending again; without it, only within this process. ``http``
    is the client to send with (default: one made here and closed after).

    Pass the sources as ``toolsets=`` to ``open_chat_agent`` and read their
    ``health`` for ``/health``.

    Raises:
        A2AConfigError: two configs share a name.
    """
    configs = tuple(configs)
    names = [c.name for c in configs]
    for name in names:
        if names.count(name) > 1:
            raise A2AConfigError(f"a2a agent name {name!r} is used by two agents")
    calls = CallLedger(storage)
    async with _client(http) as client, trio.open_nursery() as nursery:
        sources = tuple(A2AToolset(c, http=client, calls=calls) for c in configs)
        for source in sources:
            nursery.start_soon(source.run, name=f"a2a agent {source.name}")
        for source in sources:
            await source.wait_settled()
        try:
            yield sources
        finally:
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def _client(given: httpx2.AsyncClient | None) -> AsyncIterator[httpx2.AsyncClient]:
    if given is not None:
        yield given
        return
    async with httpx2.AsyncClient(follow_redirects=True) as client:
        yield client

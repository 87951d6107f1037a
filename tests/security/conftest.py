"""Servers for the security tests: real HTTP on 127.0.0.1, a real SQLite file,
three owners (``alice`` and ``bob`` as named clients, the legacy
``auth_token`` as the default owner), and a model that records every request
it gets so a test can check exactly what the model saw.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import httpx2
import pytest
import trio

from agentik import ModelRequest, ModelResponse, Role, ScriptedModel
from agentik.models import demo_responder
from agentik.server import Client, ServerConfig, serve_agentik
from agentik.storage import StorageBundle, open_sqlite_storage

TOOLSETS = ("tests.server.sample_toolsets:clock",)
TOKENS = {
    "alice": "alice-token-4f1c9a0b7e2d",
    "bob": "bob-token-8d3e2f6a1c5b",
}
LEGACY = "legacy-token-0a9b8c7d6e5f"
"""``[server] auth_token``: the default owner, whose ids are stored as sent."""


@attrs.define
class Recorder:
    """The demo model (echo; calls a tool when named), recording each request."""

    requests: list[ModelRequest] = attrs.field(factory=list)
    short_summaries: bool = False
    """Answer summary requests with a short text of their own, as a real model
    would, instead of echoing the whole request (which leaves the next summary
    no room in a small budget)."""

    def respond(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if self.short_summaries and request.purpose == "summary":
            return ModelResponse(text=f"summary number {len(self.requests)}")
        return demo_responder(request)

    def seen(self) -> list[tuple[Role, str]]:
        """Every (role, content) of every request, system prompts included."""
        return [(m.role, m.content) for r in self.requests for m in r.messages]


@attrs.frozen
class Server:
    url: str
    config: ServerConfig
    storage: StorageBundle
    model: Recorder
    database: Path

    def client(self, token: str | None) -> httpx2.AsyncClient:
        """A client sending ``token`` (None: no Authorization header). Close it."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx2.AsyncClient(base_url=self.url, headers=headers, timeout=30)


@asynccontextmanager
async def start(nursery: trio.Nursery, database: Path, **changes: object) -> AsyncIterator[Server]:
    """Serve until the generator is closed; ``changes`` adjust the ``ServerConfig``."""
    config = attrs.evolve(
        ServerConfig(port=0, database=str(database), toolsets=TOOLSETS), **changes
    )
    recorder = Recorder()
    stop = trio.Event()
    async with open_sqlite_storage(database) as storage:

        async def run(task_status: trio.TaskStatus[str]) -> None:
            try:
                await serve_agentik(
                    config,
                    shutdown_trigger=stop.wait,
                    storage=storage,
                    model=ScriptedModel(recorder.respond),
                    task_status=task_status,
                )
            finally:
                done.set()

        done = trio.Event()
        url = await nursery.start(run)
        try:
            yield Server(url, config, storage, recorder, database)
        finally:
            stop.set()
            await done.wait()


OWNER_CLIENTS = tuple(Client(owner=owner, token=token) for owner, token in TOKENS.items())


@pytest.fixture
async def owners(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Server]:
    async with start(
        nursery, tmp_path / "owners.db", clients=OWNER_CLIENTS, auth_token=LEGACY
    ) as server:
        yield server

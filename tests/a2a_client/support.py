"""agentik calling agentik: a remote ``agentik serve`` (in this process, on
127.0.0.1, a real SQLite file, the A2A server as it ships) and a calling agent
whose model calls ``remote_send``.

The remote's model is ``tests.server.a2a_support.Script``: ``pay N`` calls a
tool that needs a person's approval (the task goes INPUT_REQUIRED), ``slow``
waits for ``Script.release``, anything else is echoed ``You said: <text>``.

The caller's model (``caller_model``): a user message ``T`` calls
``remote_send {"text": T}`` (with ``data`` when ``T`` starts with
``data:``), and after the result answers ``remote: <result>``.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from agentik import ModelRequest, ModelResponse, Role, ToolCall
from agentik.models import ScriptedModel
from agentik.server import ServerConfig, serve_agentik
from agentik.storage import open_sqlite_storage
from tests.server.a2a_support import Script


def caller_model(tool: str = "remote_send") -> ScriptedModel:
    def respond(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if last.role is Role.TOOL:
            return ModelResponse(text=f"remote: {last.content}")
        text = last.content
        arguments: dict[str, object] = {"text": text}
        if text.startswith("data:"):
            arguments["data"] = json.loads(text.removeprefix("data:"))
        seq = len(request.messages)
        return ModelResponse(tool_calls=(ToolCall(f"call-{seq}", tool, json.dumps(arguments)),))

    return ScriptedModel(respond)


def free_port() -> int:
    """A port free now, so a restarted remote serves at the same URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@attrs.define
class Remote:
    """A remote ``agentik serve``; ``stop()`` ends it (as a crash would: its
    running turns are interrupted, to resume when it serves again)."""

    database: Path
    port: int
    script: Script
    url: str = ""
    nursery: trio.Nursery | None = None
    _stop: trio.Event = attrs.Factory(trio.Event)
    _stopped: trio.Event = attrs.Factory(trio.Event)

    async def start(self, nursery: trio.Nursery, **changes: object) -> str:
        self._stop, self._stopped = trio.Event(), trio.Event()
        config = attrs.evolve(
            ServerConfig(
                port=self.port,
                database=str(self.database),
                toolsets=("tests.server.a2a_support:vault",),
            ),
            **changes,
        )

        async def run(task_status: trio.TaskStatus[str]) -> None:
            try:
                async with open_sqlite_storage(self.database) as storage:
                    await serve_agentik(
                        config,
                        shutdown_trigger=self._stop.wait,
                        interrupt_trigger=self._stop.wait,
                        storage=storage,
                        model=ScriptedModel(self.script.respond),
                        task_status=task_status,
                    )
            finally:
                self._stopped.set()

        self.url = await nursery.start(run)
        return self.url

    async def stop(self) -> None:
        self._stop.set()
        await self._stopped.wait()

    async def restart(self, **changes: object) -> None:
        """Stop (its turns interrupted) and serve again on the same file and port."""
        await self.stop()
        assert self.nursery is not None
        await self.start(self.nursery, **changes)


@asynccontextmanager
async def remote_agent(tmp_path: Path, **changes: object) -> AsyncIterator[Remote]:
    remote = Remote(tmp_path / "remote.db", free_port(), Script())
    async with trio.open_nursery() as nursery:
        remote.nursery = nursery
        await remote.start(nursery, **changes)
        try:
            yield remote
        finally:
            remote.script.release.set()
            await remote.stop()

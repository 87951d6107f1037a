"""Fixtures for the model-backend tests: the scripted server and a fake sleep."""

from __future__ import annotations

from collections.abc import AsyncIterator

import attrs
import pytest
import trio

from tests.models.chat_server import ChatServer


@pytest.fixture
async def chat_server(nursery: trio.Nursery) -> AsyncIterator[ChatServer]:
    """A scripted Chat Completions server; the test fails if any request was invalid."""
    server = ChatServer()
    await server.start(nursery)
    yield server
    assert server.problems == []


@attrs.define
class RecordedSleep:
    """Stands in for ``trio.sleep`` between retries: records the delay, waits no time."""

    delays: list[float] = attrs.field(factory=list)

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await trio.lowlevel.checkpoint()


@pytest.fixture
def sleep() -> RecordedSleep:
    return RecordedSleep()

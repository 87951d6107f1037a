"""Shared harness of the reliability tests: backends that reopen, a gate that
holds a turn at a chosen point, a message store that delegates to a real one
but stops at the gate, and the history checks every test ends with.

Nothing here replaces agentik code: ``GatedMessageStore`` forwards every call
to a real backend (in memory or SQLite on a real file) and only *waits* at the
points a test arms, so the turn loop, the conversation actor and the writer
under test are the real ones.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import outcome
import pytest
import trio

from agentik import ChatAgent, Message, Role, TurnError
from agentik.storage import (
    Pending,
    StorageBundle,
    in_memory_storage,
    open_sqlite_storage,
)
from tests.agent.helpers import assert_valid_history

BACKENDS = ["memory", "sqlite"]


@attrs.define
class Backend:
    """One storage backend that can be closed and opened again: SQLite on a
    real file under ``tmp_path``, or one in-memory bundle kept across opens."""

    kind: str
    path: Path
    _memory: StorageBundle | None = None

    @asynccontextmanager
    async def open(self) -> AsyncIterator[StorageBundle]:
        if self.kind == "memory":
            if self._memory is None:
                self._memory = in_memory_storage()
            yield self._memory
            return
        async with open_sqlite_storage(self.path) as bundle:
            yield bundle


@attrs.define
class Gate:
    """Holds whoever reaches the armed point until the test releases it.

    ``hit(name)`` is called by test tools, responders and the gated store at
    every point; only the first hit of the armed name waits.
    """

    armed: str | None = None
    reached: trio.Event = attrs.Factory(trio.Event)
    released: trio.Event = attrs.Factory(trio.Event)
    fired: bool = False

    def arm(self, name: str) -> None:
        self.armed = name

    def is_next(self, name: str) -> bool:
        return self.armed == name and not self.fired

    async def hit(self, name: str) -> None:
        if not self.is_next(name):
            await trio.lowlevel.checkpoint()
            return
        self.fired = True
        self.reached.set()
        await self.released.wait()

    def release(self) -> None:
        self.released.set()


@attrs.define
class GatedMessageStore:
    """A real message store with gate points:

    - ``load``: ``get_messages`` stops after yielding the first message;
    - ``submit``: ``submit`` of a tool message whose content is
      ``submit_content`` stops before the write is accepted (a full writer
      channel);
    - ``commit``: ``submit`` of an assistant message whose content is
      ``commit_content`` is accepted, but its ``Pending`` resolves only after
      the release (a slow commit).
    """

    inner: object
    gate: Gate
    nursery: trio.Nursery
    submit_content: str = ""
    commit_content: str = ""
    submits: collections.Counter[str] = attrs.Factory(collections.Counter)
    appends_accepted: int = 0
    """Writes (``append`` or ``submit``) the real store accepted, committed or not."""
    _accepted: trio.Event = attrs.Factory(trio.Event)

    async def append(
        self, conversation_id: str, message: Message, *, idempotency_key: str | None = None
    ) -> Message:
        pending = await self.submit(conversation_id, message, idempotency_key=idempotency_key)
        return await pending.wait()

    async def wait_appends_accepted(self, count: int) -> None:
        while self.appends_accepted < count:
            await self._accepted.wait()

    async def submit(
        self, conversation_id: str, message: Message, *, idempotency_key: str | None = None
    ) -> Pending[Message]:
        if message.role is Role.TOOL and message.content == self.submit_content:
            await self.gate.hit("submit")
        gated = (
            message.role is Role.ASSISTANT
            and message.content == self.commit_content
            and self.gate.is_next("commit")
        )
        self.submits[message.content] += 1
        inner: Pending[Message] = await self.inner.submit(  # type: ignore[attr-defined]
            conversation_id, message, idempotency_key=idempotency_key
        )
        self.appends_accepted += 1
        self._accepted.set()
        self._accepted = trio.Event()
        if not gated:
            return inner
        outer: Pending[Message] = Pending()

        async def forward() -> None:
            await self.gate.hit("commit")
            outer.set(await outcome.acapture(inner.wait))

        self.nursery.start_soon(forward)
        return outer

    async def get_messages(
        self, conversation_id: str, *, after_seq: int = 0, page_size: int = 500
    ) -> AsyncIterator[Message]:
        count = 0
        async for message in self.inner.get_messages(  # type: ignore[attr-defined]
            conversation_id, after_seq=after_seq, page_size=page_size
        ):
            yield message
            count += 1
            if count == 1:
                await self.gate.hit("load")

    async def token_stats(self, conversation_id: str) -> object:
        return await self.inner.token_stats(conversation_id)  # type: ignore[attr-defined]

    async def find_idempotency_key(self, conversation_id: str, key: str) -> int | None:
        found: int | None = await self.inner.find_idempotency_key(  # type: ignore[attr-defined]
            conversation_id, key
        )
        return found

    async def list_conversations(self, *, after: str | None = None, limit: int = 100) -> list[str]:
        found: list[str] = await self.inner.list_conversations(  # type: ignore[attr-defined]
            after=after, limit=limit
        )
        return found


def gated(bundle: StorageBundle, store: GatedMessageStore) -> StorageBundle:
    return StorageBundle(
        store,  # type: ignore[arg-type]
        bundle.working_memory_store,
        bundle.reflection_store,
        bundle.skill_store,
    )


async def history(storage: StorageBundle, conversation_id: str) -> list[Message]:
    return [m async for m in storage.message_store.get_messages(conversation_id)]


def shape(message: Message) -> tuple[object, ...]:
    """What the model sees of a message."""
    calls = tuple((c.id, c.name, c.arguments) for c in message.tool_calls)
    return (message.role, message.content, message.tool_call_id, calls)


def check_history(messages: list[Message], *, once: tuple[str, ...] = ()) -> None:
    """Valid for the model API (gapless seqs, every call answered exactly once)
    and each of the ``once`` user texts stored exactly once."""
    assert_valid_history(messages)
    users = collections.Counter(m.content for m in messages if m.role is Role.USER)
    for text in once:
        assert users[text] == 1, f"user message {text!r} stored {users[text]} times"


def rss_bytes() -> int:
    """Resident set size of this process, from /proc/self/statm."""
    import os

    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


async def go_fails_then_next(
    chat: ChatAgent, disarm: Callable[[], None], asked: Callable[[], list[str]]
) -> None:
    """Conversation "c": "warmup" answers; "go" fails with ``store_error`` (the
    test's fault is armed during it); once ``disarm`` cleared the fault,
    "next" answers, and it is all the model is asked about (``asked``: the
    last message of each model request so far): the failed turn is not
    resumed behind its caller."""
    await chat.send("c", "warmup")
    with pytest.raises(TurnError) as info:
        await chat.send("c", "go")
    assert info.value.code == "store_error"
    disarm()
    before = len(asked())
    assert (await chat.send("c", "next")).text == "answer to next"
    assert asked()[before:] == ["next"]

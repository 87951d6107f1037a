"""A Hypothesis state machine drives the in-memory backend and a SQL backend
(SQLite, and PostgreSQL) with the same random operations and asserts every
answer is the same.

Both backends get equal fake clocks that tick once per write, so even the
timestamps must agree. Hypothesis' stateful runner is synchronous, so the two
bundles live in a trio run on a helper thread, reached through
``trio.from_thread.run`` (a portal).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import outcome
import trio
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from agentik import Message, Role, Skill, StoreError, TokenUsage, ToolCall
from agentik.storage import (
    ConversationSnapshot,
    Storage,
    StorageBundle,
    in_memory_storage,
    open_postgres_storage,
    open_sqlite_storage,
)
from tests.postgres import fresh_schema

T = TypeVar("T")
START = datetime(2026, 1, 1, tzinfo=UTC)


class TickingClock:
    """1 ms later on every call; each backend gets its own."""

    def __init__(self) -> None:
        self._ticks = 0

    def __call__(self) -> datetime:
        self._ticks += 1
        return START + timedelta(milliseconds=self._ticks)


OpenSql = Callable[[Path, TickingClock], AbstractAsyncContextManager[StorageBundle]]


def sqlite_in(folder: Path, clock: TickingClock) -> AbstractAsyncContextManager[StorageBundle]:
    return open_sqlite_storage(folder / "db", clock=clock)


class Portal:
    """Both bundles, open in a trio run on a helper thread."""

    def __init__(self, folder: Path, open_sql: OpenSql = sqlite_in) -> None:
        self._open_sql = open_sql
        self.bundles: tuple[StorageBundle, StorageBundle] | None = None
        self._ready = threading.Event()
        self._result: outcome.Outcome[None] | None = None
        self._thread = threading.Thread(target=self._host, args=(folder,), daemon=True)
        self._thread.start()
        self._ready.wait(timeout=30)
        if self.bundles is None:
            self._thread.join(timeout=30)
            assert self._result is not None
            self._result.unwrap()
            raise RuntimeError("the trio host did not start")

    def _host(self, folder: Path) -> None:
        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            async with self._open_sql(folder, TickingClock()) as sql:
                self.bundles = (in_memory_storage(clock=TickingClock()), sql)
                self._ready.set()
                await self._stop.wait()

        self._result = outcome.capture(trio.run, main)  # the test thread unwraps it
        self._ready.set()

    def run(self, afn: Callable[[], Awaitable[T]]) -> T:
        return trio.from_thread.run(afn, trio_token=self._token)

    def close(self) -> None:
        if self.bundles is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(timeout=30)
        assert self._result is not None, "the trio host is still running"
        self._result.unwrap()


conversations = st.sampled_from(["a", "b", "é\x00🦜"])
keys = st.none() | st.sampled_from(["k1", "k2"])
small_texts = st.text(max_size=12)
tool_calls = st.builds(ToolCall, id=small_texts, name=small_texts, arguments=small_texts)
usages = st.none() | st.builds(
    TokenUsage,
    prompt_tokens=st.integers(0, 2**40),
    completion_tokens=st.integers(0, 2**40),
)
messages = st.builds(
    Message,
    role=st.sampled_from(Role),
    content=small_texts,
    tool_calls=st.lists(tool_calls, max_size=2).map(tuple),
    tool_call_id=st.none() | small_texts,
    usage=usages,
)
ids = st.lists(st.integers(1, 12), max_size=4)
skill_names = st.sampled_from(["alpha", "beta", "gamma"])


class BackendsAgree(RuleBasedStateMachine):
    open_sql: OpenSql = staticmethod(sqlite_in)  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self._folder = Path(tempfile.mkdtemp(prefix="agentik-agree-"))
        self._portal = Portal(self._folder, type(self).open_sql)

    def teardown(self) -> None:
        try:
            self._portal.close()
        finally:
            shutil.rmtree(self._folder, ignore_errors=True)

    def agree(self, operation: Callable[[StorageBundle], Awaitable[object]]) -> None:
        """Run ``operation`` on both backends; their results (or errors) must match."""
        assert self._portal.bundles is not None
        results = []
        for bundle in self._portal.bundles:

            async def call(bundle: StorageBundle = bundle) -> object:
                return await operation(bundle)

            results.append(outcome.capture(self._portal.run, call))
        memory, sqlite = results
        if isinstance(memory, outcome.Error) or isinstance(sqlite, outcome.Error):
            assert type(getattr(memory, "error", None)) is type(getattr(sqlite, "error", None)), (
                f"in-memory: {memory!r}, sqlite: {sqlite!r}"
            )
            assert isinstance(getattr(memory, "error", None), StoreError | ValueError), memory
        else:
            assert memory.unwrap() == sqlite.unwrap()

    # --- messages ---

    @rule(conversation=conversations, message=messages, key=keys)
    def append(self, conversation: str, message: Message, key: str | None) -> None:
        self.agree(lambda b: b.message_store.append(conversation, message, idempotency_key=key))

    @rule(conversation=conversations, message=messages, key=keys)
    def submit(self, conversation: str, message: Message, key: str | None) -> None:
        async def submit_and_wait(b: StorageBundle) -> Message:
            pending = await b.message_store.submit(conversation, message, idempotency_key=key)
            return await pending.wait()

        self.agree(submit_and_wait)

    @rule(conversation=conversations, after=st.integers(-1, 8), page_size=st.integers(1, 4))
    def get_messages(self, conversation: str, after: int, page_size: int) -> None:
        async def read(b: StorageBundle) -> list[Message]:
            pages = b.message_store.get_messages(conversation, after_seq=after, page_size=page_size)
            return [m async for m in pages]

        self.agree(read)

    @rule(conversation=conversations)
    def token_stats(self, conversation: str) -> None:
        self.agree(lambda b: b.message_store.token_stats(conversation))

    @rule(conversation=conversations, key=st.sampled_from(["k1", "k2"]))
    def find_key(self, conversation: str, key: str) -> None:
        self.agree(lambda b: b.message_store.find_idempotency_key(conversation, key))

    @rule(after=st.none() | conversations | st.just(""), limit=st.integers(0, 4))
    def list_conversations(self, after: str | None, limit: int) -> None:
        self.agree(lambda b: b.message_store.list_conversations(after=after, limit=limit))

    # --- summaries and snapshots ---

    @rule(conversation=conversations, through=st.integers(-1, 10), text=small_texts)
    def summary_submit(self, conversation: str, through: int, text: str) -> None:
        async def submit_and_wait(b: StorageBundle) -> object:
            store = b.message_store
            return await (await store.submit_summary(conversation, through, text)).wait()

        self.agree(submit_and_wait)

    @rule(conversation=conversations)
    def summary_latest(self, conversation: str) -> None:
        async def latest(b: StorageBundle) -> object:
            store = b.message_store
            return await store.latest_summary(conversation)

        self.agree(latest)

    @rule(conversation=conversations, after=st.integers(0, 8), limit=st.integers(1, 4))
    def summary_list(self, conversation: str, after: int, limit: int) -> None:
        async def listed(b: StorageBundle) -> object:
            store = b.message_store
            return await store.list_summaries(conversation, after_seq=after, limit=limit)

        self.agree(listed)

    @rule(conversation=conversations, after=st.integers(-1, 8), page_size=st.integers(1, 4))
    def snapshot(self, conversation: str, after: int, page_size: int) -> None:
        """A backend's one-read snapshot equals its parts as it answers them one
        by one, and every backend agrees on both."""

        async def load(b: StorageBundle) -> tuple[ConversationSnapshot, ConversationSnapshot]:
            store = b.message_store
            assert isinstance(b, Storage)
            pages = store.get_messages(conversation, after_seq=after, page_size=page_size)
            messages = [m async for m in pages][:page_size]
            memory = await b.working_memory_store.list(conversation)
            summary = await b.message_store.latest_summary(conversation)
            parts = ConversationSnapshot(tuple(messages), tuple(memory), summary)
            snapshot = await b.message_store.load_conversation(
                conversation, page_size=page_size, after_seq=after
            )
            assert snapshot == parts, "the one-read snapshot differs from its parts"
            return snapshot, parts

        self.agree(load)

    # --- working memory ---

    @rule(conversation=conversations, text=small_texts)
    def memory_append(self, conversation: str, text: str) -> None:
        self.agree(lambda b: b.working_memory_store.append(conversation, text))

    @rule(conversation=conversations)
    def memory_list(self, conversation: str) -> None:
        self.agree(lambda b: b.working_memory_store.list(conversation))

    @rule(conversation=conversations, after=st.integers(0, 12), limit=st.integers(1, 4))
    def memory_list_archived(self, conversation: str, after: int, limit: int) -> None:
        async def listed(b: StorageBundle) -> object:
            store = b.working_memory_store
            return await store.list_archived(conversation, after_id=after, limit=limit)

        self.agree(listed)

    @rule(conversation=conversations, entry_ids=ids, summary=small_texts)
    def memory_compact(self, conversation: str, entry_ids: list[int], summary: str) -> None:
        self.agree(lambda b: b.working_memory_store.compact(conversation, entry_ids, summary))

    @rule(conversation=conversations, entry_ids=ids)
    def memory_archive(self, conversation: str, entry_ids: list[int]) -> None:
        self.agree(lambda b: b.working_memory_store.archive(conversation, entry_ids))

    # --- reflections ---

    @rule(conversation=conversations, text=small_texts)
    def reflection_insert(self, conversation: str, text: str) -> None:
        self.agree(lambda b: b.reflection_store.insert(conversation, text))

    @rule(limit=st.integers(0, 5))
    def reflection_recent(self, limit: int) -> None:
        self.agree(lambda b: b.reflection_store.list_recent(limit))

    @rule()
    def reflection_count(self) -> None:
        self.agree(lambda b: b.reflection_store.count())

    @rule(conversation=conversations)
    def reflection_list(self, conversation: str) -> None:
        self.agree(lambda b: b.reflection_store.list_for_conversation(conversation))

    @rule(milliseconds=st.integers(0, 30))
    def reflection_delete(self, milliseconds: int) -> None:
        cutoff = START + timedelta(milliseconds=milliseconds)
        self.agree(lambda b: b.reflection_store.delete_older_than(cutoff))

    # --- skills ---

    @rule(name=skill_names, description=small_texts, body=small_texts)
    def skill_upsert(self, name: str, description: str, body: str) -> None:
        skill = Skill(name=name, description=description, body=body)
        self.agree(lambda b: b.skill_store.upsert(skill))

    @rule(name=skill_names)
    def skill_remove(self, name: str) -> None:
        self.agree(lambda b: b.skill_store.remove(name))

    @rule(name=skill_names)
    def skill_read(self, name: str) -> None:
        self.agree(lambda b: b.skill_store.get(name))
        self.agree(lambda b: b.skill_store.exists(name))

    @rule()
    def skill_lists(self) -> None:
        self.agree(lambda b: b.skill_store.all())
        self.agree(lambda b: b.skill_store.catalog())


BackendsAgree.TestCase.settings = settings(max_examples=25, stateful_step_count=30, deadline=None)
test_backends_agree = BackendsAgree.TestCase


def test_postgres_agrees_with_memory(postgres_dsn: str) -> None:
    """The same machine with PostgreSQL (a fresh schema per example) as the SQL backend."""

    def postgres_in(
        folder: Path, clock: TickingClock
    ) -> AbstractAsyncContextManager[StorageBundle]:
        return open_postgres_storage(postgres_dsn, schema=fresh_schema(), readers=2, clock=clock)

    class PostgresAgrees(BackendsAgree):
        open_sql = staticmethod(postgres_in)

    run_state_machine_as_test(
        PostgresAgrees,
        settings=settings(max_examples=15, stateful_step_count=30, deadline=None),
    )

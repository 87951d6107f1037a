"""The store contract (agentik.testing) run against every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest

from agentik import SkillSummary, StoreError
from agentik.storage import (
    KeyedTurn,
    SkillStore,
    StorageBundle,
    WorkingMemoryStore,
    in_memory_storage,
    open_sqlite_storage,
)
from agentik.storage._secrets import check_secret
from agentik.testing import (
    MakeBundle,
    check_message_store,
    check_reflection_store,
    check_secret_store,
    check_skill_store,
    check_working_memory_store,
)
from tests.postgres import bundles
from tests.storage.conftest import memory_bundle

CHECKS = [
    check_message_store,
    check_working_memory_store,
    check_reflection_store,
    check_skill_store,
    check_secret_store,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
async def test_in_memory_backend(check: Callable[[MakeBundle], Awaitable[None]]) -> None:
    """The in-memory backend keeps the whole contract."""
    await check(memory_bundle)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
async def test_sqlite_backend(
    check: Callable[[MakeBundle], Awaitable[None]], sqlite_bundles: MakeBundle
) -> None:
    """The SQLite backend keeps the whole contract, each case in a fresh file."""
    await check(sqlite_bundles)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
async def test_postgres_backend(
    check: Callable[[MakeBundle], Awaitable[None]], postgres_dsn: str
) -> None:
    """The PostgreSQL backend keeps the whole contract, each case in a fresh schema."""
    await check(bundles(postgres_dsn))


class _UnsortedSkillStore:
    """A skill store that forgets to sort its catalog: the contract must notice."""

    def __init__(self, inner: SkillStore) -> None:
        self._inner = inner

    async def catalog(self) -> list[SkillSummary]:
        return list(reversed(await self._inner.catalog()))

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


async def test_the_contract_catches_a_broken_backend() -> None:
    """check_skill_store fails, naming the case, for a catalog out of order."""

    @asynccontextmanager
    async def broken() -> AsyncIterator[StorageBundle]:
        bundle = in_memory_storage()
        yield attrs.evolve(bundle, skill_store=_UnsortedSkillStore(bundle.skill_store))

    with pytest.raises(AssertionError, match=r"^store contract case _skills_upsert_and_read: "):
        await check_skill_store(broken)


class _SecretsAsNotes:
    """Secrets kept as working-memory notes of a conversation named after them (how
    the MCP token vault was kept until schema 5): the contract must notice."""

    def __init__(self, notes: WorkingMemoryStore) -> None:
        self._notes = notes

    async def get_secret(self, name: str) -> str | None:
        check_secret(name)
        entries = await self._notes.list(name)
        return entries[-1].text if entries else None

    async def put_secret(self, name: str, value: str) -> None:
        check_secret(name, value)
        entries = await self._notes.list(name)
        if entries:
            await self._notes.compact(name, [e.id for e in entries], value)
        else:
            await self._notes.append(name, value)

    async def delete_secret(self, name: str) -> bool:
        check_secret(name)
        entries = await self._notes.list(name)
        return await self._notes.archive(name, [e.id for e in entries]) > 0


async def test_the_contract_catches_secrets_kept_in_a_conversation() -> None:
    """check_secret_store fails for secrets that a conversation id can reach."""

    @asynccontextmanager
    async def broken() -> AsyncIterator[StorageBundle]:
        bundle = in_memory_storage()
        yield attrs.evolve(bundle, secret_store=_SecretsAsNotes(bundle.working_memory_store))

    with pytest.raises(
        AssertionError,
        match=r"^store contract case _secrets_are_apart_from_conversations: "
        r"a secret shows as a note",
    ):
        await check_secret_store(broken)


async def test_every_backend_keeps_secrets(tmp_path: Path, postgres_dsn: str) -> None:
    """The three bundles agentik opens have a secret store (the contract skips a
    bundle without one, so this is checked apart)."""
    assert in_memory_storage().secret_store is not None
    async with open_sqlite_storage(tmp_path / "s.db") as bundle:
        assert bundle.secret_store is not None
    async with bundles(postgres_dsn)() as bundle:
        assert bundle.secret_store is not None


async def test_sqlite_open_errors_are_store_errors(tmp_path: Path) -> None:
    """A path that cannot be opened gives a StoreError naming it."""
    with pytest.raises(StoreError, match=r"^cannot open the database '.*missing/db': "):
        async with open_sqlite_storage(tmp_path / "missing" / "db"):
            pass


class _TurnsPastTheUserMessage:
    """A key index whose turns run on into the next turn: the contract must notice."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    async def list_keyed_turns(self, conversation_id: str, **kwargs: object) -> list[KeyedTurn]:
        turns: list[KeyedTurn] = await self._inner.list_keyed_turns(  # type: ignore[attr-defined]
            conversation_id, **kwargs
        )
        longer = []
        for turn in turns:
            following = [
                m
                async for m in self._inner.get_messages(  # type: ignore[attr-defined]
                    conversation_id, after_seq=turn.seq + len(turn.messages) - 1
                )
            ][:1]
            longer.append(attrs.evolve(turn, messages=(*turn.messages, *following)))
        return longer

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


class _OnlyTheOldKeyIndex:
    """A message store written before list_keyed_turns existed."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        if name in ("list_keyed_turns", "count_idempotency_keys"):
            raise AttributeError(name)
        return getattr(self._inner, name)


@pytest.mark.parametrize(
    ("wrapper", "message"),
    [
        (_TurnsPastTheUserMessage, r"^store contract case _list_keyed_turns: "),
        (
            _OnlyTheOldKeyIndex,
            r"^store contract case _implements_the_full_protocol: the message store lacks"
            r" count_idempotency_keys, list_keyed_turns of FullMessageStore",
        ),
    ],
)
async def test_the_contract_checks_keyed_turns(
    wrapper: Callable[[object], object], message: str
) -> None:
    """A turn that runs past the next user message, or half of the protocol, fails."""

    @asynccontextmanager
    async def broken() -> AsyncIterator[StorageBundle]:
        bundle = in_memory_storage()
        yield attrs.evolve(bundle, message_store=wrapper(bundle.message_store))

    with pytest.raises(AssertionError, match=message):
        await check_message_store(broken)


@pytest.mark.parametrize(
    ("breakage", "case"),
    [
        ("parts not read", "_parts_round_trip"),
        ("blobs never deleted", "_delete_removes_the_conversation_whole"),
        ("blobs deleted while used", "_blobs_are_kept_once"),
    ],
)
async def test_the_contract_catches_parts_lost_or_blobs_kept(
    breakage: str, case: str, sqlite_bundles: MakeBundle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check_message_store fails, naming the parts case, for a SQLite store
    that drops parts, keeps blobs past their last use, or drops them early."""
    from agentik.storage import _sql_messages
    from agentik.storage.sqlite._queries import QUERIES as lq

    if breakage == "parts not read":
        monkeypatch.setattr(_sql_messages, "parts_of", lambda column, blobs: ())
    elif breakage == "blobs never deleted":
        monkeypatch.setattr(lq, "_drop_blob_if_unused", lambda connection, hash_: None)
    else:

        def drop(connection: object, hash_: str) -> None:
            lq.d.changed(connection, "DELETE FROM blob_use WHERE hash = ?", (hash_,))
            lq.d.changed(connection, "DELETE FROM blob WHERE hash = ?", (hash_,))

        monkeypatch.setattr(lq, "_drop_blob_if_unused", drop)
    with pytest.raises(AssertionError, match=rf"^store contract case {case}: "):
        await check_message_store(sqlite_bundles)

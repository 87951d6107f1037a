"""The lifecycle part of the store contract can fail: a SQLite delete that
forgets one table is caught, and every table keyed by conversation is one
the delete empties (a table added later must join ``CONVERSATION_TABLES``)."""

from __future__ import annotations

from pathlib import Path

import apsw
import attrs
import psycopg
import pytest
import trio
from hypothesis import HealthCheck, given, settings

from agentik.storage import (
    ArchivedMessage,
    ArchivedNote,
    ArchivedReflection,
    ArchiveRecord,
    StorageBundle,
    in_memory_storage,
    open_postgres_storage,
    open_sqlite_storage,
)
from agentik.storage.sqlite._queries import QUERIES as lq
from agentik.testing import MakeBundle, check_message_store
from tests.postgres import bundles, fresh_schema
from tests.storage.archives import TEXT, conversations


@pytest.mark.parametrize("forgotten", lq.conversation_tables)
async def test_a_delete_that_forgets_a_table_fails_the_contract(
    forgotten: str, sqlite_bundles: MakeBundle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check_message_store fails, naming the delete case, for each table left behind."""
    kept = tuple(t for t in lq.conversation_tables if t != forgotten)
    monkeypatch.setattr(lq, "conversation_tables", kept)
    with pytest.raises(
        AssertionError, match=r"^store contract case _delete_removes_the_conversation_whole: "
    ):
        await check_message_store(sqlite_bundles)


async def test_every_table_keyed_by_conversation_is_deleted(tmp_path: Path) -> None:
    """The migrated schema's tables with a conversation_id column are exactly
    the ones a delete empties."""
    path = tmp_path / "schema.db"
    async with open_sqlite_storage(path):
        pass
    connection = apsw.Connection(str(path))
    try:
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        keyed = {
            table
            for table in tables
            if any(
                column[1] == "conversation_id"
                for column in connection.execute(f"PRAGMA table_info({table})")
            )
        }
    finally:
        connection.close()
    assert keyed == set(lq.conversation_tables)


def _lacks_of_full(bundle: StorageBundle) -> list[str]:
    """What the bundle lacks of a full ``Storage``: its type, or a method of the
    full protocols (``agentik.testing._members``)."""
    from agentik.storage import FullMessageStore, FullWorkingMemoryStore, Storage
    from agentik.testing._members import missing_members

    if not isinstance(bundle, Storage) or bundle.degraded:
        return [f"a full Storage (got {type(bundle).__name__})"]
    return missing_members(bundle.message_store, FullMessageStore) + missing_members(
        bundle.working_memory_store, FullWorkingMemoryStore
    )


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_agentiks_backends_offer_the_full_protocol(
    backend: str, sqlite_bundles: MakeBundle
) -> None:
    """agentik's own backends yield a ``Storage`` whose stores have every
    method of the full protocols (a method moved out of its class by a merge
    would fail here, and in the contract's first full case)."""
    if backend == "memory":
        missing = _lacks_of_full(in_memory_storage())
    else:
        async with sqlite_bundles() as bundle:
            missing = _lacks_of_full(bundle)
    assert missing == [], f"the {backend} backend lacks {missing}"


# --- PostgreSQL: the same contract, the same whole-table check ---------------

_PG_TABLES = (
    "message",
    "memory_entry",
    "reflection",
    "approval",
    "turn_failure",
    "turn_output",
    "summary",
    "blob_use",
)


@pytest.mark.parametrize("forgotten", _PG_TABLES)
async def test_a_postgres_delete_that_forgets_a_table_fails_the_contract(
    forgotten: str, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As for SQLite: each table the delete leaves behind fails the contract."""
    from agentik.storage.postgres._queries import QUERIES as pq

    assert set(pq.conversation_tables) == set(_PG_TABLES)
    kept = tuple(t for t in pq.conversation_tables if t != forgotten)
    monkeypatch.setattr(pq, "conversation_tables", kept)
    with pytest.raises(
        AssertionError, match=r"^store contract case _delete_removes_the_conversation_whole: "
    ):
        await check_message_store(bundles(postgres_dsn))


async def test_every_postgres_table_keyed_by_conversation_is_deleted_or_kept_on_purpose(
    postgres_dsn: str,
) -> None:
    """The migrated PostgreSQL schema's tables with a conversation_id column
    are the ones a delete empties, plus those it keeps on purpose (none since
    ownership is by shard, ``agentik_shard``, keyed by shard: a delete
    leaves the node owning the conversation, docs/scale-out.md)."""
    from agentik.storage.postgres import _queries
    from agentik.storage.postgres._queries import QUERIES as pq

    schema = fresh_schema()
    async with open_postgres_storage(postgres_dsn, schema=schema, readers=1):
        pass

    def keyed_tables() -> set[str]:
        with psycopg.connect(postgres_dsn) as connection:
            rows = connection.execute(
                "SELECT table_name FROM information_schema.columns"
                " WHERE table_schema = %s AND column_name = 'conversation_id'",
                (schema,),
            ).fetchall()
        return {str(row[0]) for row in rows}

    keyed = await trio.to_thread.run_sync(keyed_tables)
    assert not set(pq.conversation_tables) & set(_queries.KEPT_TABLES)
    assert keyed == set(pq.conversation_tables) | set(_queries.KEPT_TABLES)
    assert _queries.KEPT_TABLES == ()


async def test_postgres_offers_the_full_protocol(postgres_dsn: str) -> None:
    async with bundles(postgres_dsn)() as bundle:
        missing = _lacks_of_full(bundle)
    assert missing == [], f"the PostgreSQL backend lacks {missing}"


def _no_ids(records: list[ArchiveRecord]) -> list[ArchiveRecord]:
    """Note and reflection ids are the store's own (an import makes new ones)."""
    out: list[ArchiveRecord] = []
    for record in records:
        if isinstance(record, ArchivedNote):
            record = attrs.evolve(record, entry=attrs.evolve(record.entry, id=0))
        elif isinstance(record, ArchivedReflection):
            reflection = attrs.evolve(record.reflection, id=0)
            record = attrs.evolve(record, reflection=reflection)
        out.append(record)
    return out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=conversations(), conversation_id=TEXT.filter(bool))
async def test_postgres_exports_what_sqlite_exports(
    records: list[ArchiveRecord],
    conversation_id: str,
    postgres_dsn: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Any valid conversation (any text, U+0000 included; any times; usage,
    tool calls, keys, decided and waiting approvals, chained summaries):
    PostgreSQL and SQLite export the same records after the import, and on
    PostgreSQL export, delete, import, export gives them back unchanged."""
    path = tmp_path_factory.mktemp("agree") / "store.db"
    async with bundles(postgres_dsn)() as pg, open_sqlite_storage(path) as lite:
        exports = []
        for bundle in (pg, lite):
            store = bundle.message_store
            assert await store.import_conversation(conversation_id, records) == sum(
                isinstance(r, ArchivedMessage) for r in records
            )
            exports.append([r async for r in store.export_conversation(conversation_id)])
        assert _no_ids(exports[0]) == _no_ids(exports[1])
        store = pg.message_store
        assert await store.delete_conversation(conversation_id) == bool(records)
        await store.import_conversation(conversation_id, exports[0])
        again = [r async for r in store.export_conversation(conversation_id)]
        assert _no_ids(again) == _no_ids(exports[0])

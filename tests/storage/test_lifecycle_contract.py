"""The lifecycle part of the store contract can fail: a SQLite delete that
forgets one table is caught, and every table keyed by conversation is one
the delete empties (a table added later must join ``CONVERSATION_TABLES``)."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from agentik.storage import open_sqlite_storage
from agentik.storage.sqlite import _lifecycle_queries as lq
from agentik.testing import MakeBundle, check_message_store


@pytest.mark.parametrize("forgotten", lq.CONVERSATION_TABLES)
async def test_a_delete_that_forgets_a_table_fails_the_contract(
    forgotten: str, sqlite_bundles: MakeBundle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check_message_store fails, naming the delete case, for each table left behind."""
    kept = tuple(t for t in lq.CONVERSATION_TABLES if t != forgotten)
    monkeypatch.setattr(lq, "CONVERSATION_TABLES", kept)
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
    assert keyed == set(lq.CONVERSATION_TABLES)

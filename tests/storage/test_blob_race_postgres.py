"""Two nodes on one PostgreSQL database, one deleting the last conversation
that uses an image while the other stores the same image for another
conversation: the blob must stay (the foreign key from ``blob_use`` makes
the delete's clean-up fail in its own savepoint and keep it), and the
delete itself succeeds."""

from __future__ import annotations

import psycopg
import trio

from agentik import ImagePart, Message, Role
from agentik._parts import blob_hash
from agentik.storage import open_postgres_storage
from tests.postgres import fresh_schema

IMAGE = ImagePart(data=b"\x89PNG shared", media_type="image/png")
IMAGE_HASH = blob_hash(b"\x89PNG shared")


def _lock_waiters(connection: psycopg.Connection) -> int:
    row = connection.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
    assert row is not None
    return int(row[0])


async def test_a_delete_racing_a_store_of_the_same_blob_keeps_it(postgres_dsn: str) -> None:
    schema = fresh_schema()
    async with open_postgres_storage(postgres_dsn, schema=schema, readers=1) as storage:
        store = storage.message_store
        await store.append("X", Message(Role.USER, "mine", parts=(IMAGE,)))
        with (
            psycopg.connect(postgres_dsn, options=f"-c search_path={schema}") as other,
            psycopg.connect(postgres_dsn, autocommit=True) as watch,
        ):
            # The other node stores the same image for Y: not committed yet.
            other.execute(
                "INSERT INTO blob (hash, data) VALUES (%s, %s) ON CONFLICT (hash) DO NOTHING",
                (IMAGE_HASH, IMAGE.data),
            )
            other.execute(
                "INSERT INTO blob_use (conversation_id, hash) VALUES (%s, %s)", (b"Y", IMAGE_HASH)
            )
            deleted: list[bool] = []
            async with trio.open_nursery() as nursery:

                async def delete() -> None:
                    deleted.append(await store.delete_conversation("X"))

                nursery.start_soon(delete)
                with trio.fail_after(30):
                    # Until the delete waits for the other node's lock (PostgreSQL
                    # says so in pg_locks; nothing in trio can).
                    while _lock_waiters(watch) == 0:  # noqa: ASYNC110
                        await trio.sleep(0.01)
                other.commit()
            assert deleted == [True]
        assert await store.count_blobs() == 1, "a blob another node stored was deleted"
        found = psycopg.connect(postgres_dsn, options=f"-c search_path={schema}")
        with found:
            row = found.execute("SELECT data FROM blob WHERE hash = %s", (IMAGE_HASH,)).fetchone()
        assert row is not None and bytes(row[0]) == IMAGE.data
        assert [m async for m in store.get_messages("X")] == []

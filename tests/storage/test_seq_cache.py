"""The writer's seq cache: a burst of new conversations is looked up at once,
and agrees with one lookup each."""

from __future__ import annotations

import os
import tempfile

import apsw
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import Message, Role, open_sqlite_storage
from agentik.storage.sqlite._queries import SeqCache, _max_seq

_STORABLE = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=6)
"""Any text SQLite can hold: a NUL, a control character, any script."""


async def _fill(path: str, counts: dict[str, int]) -> None:
    async with open_sqlite_storage(path) as storage:
        for cid, count in counts.items():
            for i in range(count):
                await storage.message_store.append(cid, Message(Role.USER, f"{i}"))


@settings(max_examples=40, deadline=None)
@given(
    counts=st.dictionaries(_STORABLE, st.integers(0, 3), max_size=8),
    unknown=st.lists(_STORABLE, max_size=4),
    cached=st.lists(_STORABLE, max_size=3),
)
def test_prefetch_agrees_with_one_lookup_each(
    counts: dict[str, int], unknown: list[str], cached: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "db")
        trio.run(_fill, path, counts)
        connection = apsw.Connection(path)
        try:
            cache = SeqCache()
            for cid in cached:  # some already known: prefetch leaves them be
                cache.next_seq(connection, cid)
            expected = {
                cid: _max_seq(connection, cid) + 1 + cached.count(cid)
                for cid in {*counts, *unknown, *cached}
            }
            cache.prefetch(connection, {*counts, *unknown, *cached})
            got = {cid: cache.next_seq(connection, cid) for cid in expected}
            assert got == expected
        finally:
            connection.close()


def test_a_rolled_back_request_forgets_what_it_prefetched(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "db")
    trio.run(_fill, path, {"a": 2, "b": 0})
    connection = apsw.Connection(path)
    cache = SeqCache()
    cache.prefetch(connection, {"a", "b"})
    cache.undo()
    # Another writer adds to "a" meanwhile: the cache must look again.
    connection.execute(
        "INSERT INTO message (conversation_id, seq, role, content, created_us)"
        " VALUES ('a', 3, 'user', 'x', 0)"
    )
    assert cache.next_seq(connection, "a") == 4
    connection.close()


async def test_a_burst_of_new_conversations_numbers_each_from_one(
    tmp_path: os.PathLike[str],
) -> None:
    async with open_sqlite_storage(os.path.join(tmp_path, "db")) as storage:
        store = storage.message_store
        stored: dict[str, list[int]] = {}

        async def two(cid: str) -> None:
            first = await store.submit(cid, Message(Role.USER, "hi"))
            second = await store.submit(cid, Message(Role.ASSISTANT, "yo"))
            stored[cid] = [(await first.wait()).seq, (await second.wait()).seq]  # type: ignore[list-item]

        async with trio.open_nursery() as nursery:
            for i in range(300):
                nursery.start_soon(two, f"conv {i} ✓")
        assert stored == {f"conv {i} ✓": [1, 2] for i in range(300)}

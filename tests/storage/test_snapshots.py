"""The grouped history reads (``conversation_snapshots``; SQLite: one
statement, one JSON value; PostgreSQL: three statements for the burst)
against the plain queries they replaced, as the oracle."""

from __future__ import annotations

import itertools
import os
import tempfile

import apsw
import psycopg
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import Message, Role, TokenUsage, ToolCall, open_sqlite_storage
from agentik.storage import ConversationSnapshot, StorageBundle, open_postgres_storage
from agentik.storage.postgres._queries import QUERIES as POSTGRES
from agentik.storage.sqlite._queries import QUERIES
from tests.postgres import fresh_schema

_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
"""Any text SQLite holds: NUL, control characters, quotes, backslashes, emoji."""
_IDS = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=4)

_MESSAGES = st.one_of(
    st.builds(lambda t: Message(Role.USER, t), _TEXT),
    st.builds(
        lambda t, name, args: Message(
            Role.ASSISTANT, t, (ToolCall("call-1", name, args),), usage=TokenUsage(3, 4)
        ),
        _TEXT,
        _TEXT.filter(bool),
        _TEXT,
    ),
    st.builds(lambda t: Message(Role.TOOL, t, tool_call_id="call-1"), _TEXT),
)


def _oracle(connection: apsw.Connection, cid: str, limit: int, after: int) -> ConversationSnapshot:
    with connection:
        messages = QUERIES.message_page(connection, cid, after, limit)
        notes = QUERIES.list_memory(connection, cid)
        summary = QUERIES.latest_summary(connection, cid)
    return ConversationSnapshot(tuple(messages), tuple(notes), summary)


Content = dict[str, tuple[list[Message], list[str], bool]]
"""Per conversation: its messages, its notes, and whether it has a summary."""

_CONTENT = st.dictionaries(
    _IDS,
    st.tuples(
        st.lists(_MESSAGES, max_size=5),
        st.lists(_TEXT.filter(bool), max_size=3),
        st.booleans(),
    ),
    max_size=5,
)
_REQUESTS = st.lists(
    st.tuples(_IDS, st.sampled_from([1, 2, 500]), st.integers(0, 4)), min_size=1, max_size=8
)


async def _fill(storage: StorageBundle, content: Content, prefix: str = "") -> None:
    store = storage.message_store
    for cid, (messages, notes, summarized) in content.items():
        for message in messages:
            await store.append(prefix + cid, message)
        for note in notes:
            await storage.working_memory_store.append(prefix + cid, note)
        if summarized and messages:
            summary = store.submit_summary(prefix + cid, 1, "so far \x00 ✓")  # type: ignore[attr-defined]
            await (await summary).wait()


def _asked(
    content: Content, requests: list[tuple[str, int, int]], prefix: str = ""
) -> list[tuple[str, int, int]]:
    """The requests, every other one for a conversation that has content
    (the rest mostly for none: a new conversation), the same one repeated
    among them."""
    known = list(content)
    return [
        (prefix + (known[i % len(known)] if known and i % 2 else cid), limit, after)
        for i, (cid, limit, after) in enumerate(requests)
    ]


@settings(max_examples=40, deadline=None)
@given(content=_CONTENT, requests=_REQUESTS)
def test_one_statement_reads_what_the_plain_queries_read(
    content: Content, requests: list[tuple[str, int, int]]
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "db")

        async def fill() -> None:
            async with open_sqlite_storage(path) as storage:
                await _fill(storage, content)

        trio.run(fill)
        asked = _asked(content, requests)
        connection = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
        try:
            got = QUERIES.conversation_snapshots(connection, asked)
            assert got == [_oracle(connection, *request) for request in asked]
        finally:
            connection.close()


_EXAMPLE = itertools.count()


@settings(max_examples=25, deadline=None)
@given(content=_CONTENT, requests=_REQUESTS)
def test_postgres_reads_a_burst_as_the_plain_queries_read(
    postgres_dsn: str, content: Content, requests: list[tuple[str, int, int]]
) -> None:
    schema = _schema(postgres_dsn)
    prefix = f"x{next(_EXAMPLE)}-"  # each example's conversations are its own

    async def fill() -> None:
        async with open_postgres_storage(postgres_dsn, schema=schema, readers=1) as storage:
            await _fill(storage, content, prefix)

    trio.run(fill)
    asked = _asked(content, requests, prefix)
    with psycopg.connect(postgres_dsn, autocommit=True) as connection:
        connection.execute(f'SET search_path TO "{schema}"')
        got = POSTGRES.conversation_snapshots(connection, asked)
        assert got == [POSTGRES.conversation_snapshot(connection, *request) for request in asked]


_SCHEMAS: dict[str, str] = {}


def _schema(dsn: str) -> str:
    """One schema for the examples of the PostgreSQL test (made by the first)."""
    return _SCHEMAS.setdefault(dsn, fresh_schema())

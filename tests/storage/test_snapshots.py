"""SQLite's grouped history read (``conversation_snapshots``: one statement,
one JSON value) against the plain queries it replaced, as the oracle."""

from __future__ import annotations

import os
import tempfile

import apsw
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import Message, Role, TokenUsage, ToolCall, open_sqlite_storage
from agentik.storage import ConversationSnapshot
from agentik.storage.sqlite._queries import QUERIES

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


@settings(max_examples=40, deadline=None)
@given(
    content=st.dictionaries(
        _IDS,
        st.tuples(
            st.lists(_MESSAGES, max_size=5),
            st.lists(_TEXT.filter(bool), max_size=3),
            st.booleans(),
        ),
        max_size=5,
    ),
    requests=st.lists(
        st.tuples(_IDS, st.sampled_from([1, 2, 500]), st.integers(0, 4)), min_size=1, max_size=8
    ),
)
def test_one_statement_reads_what_the_plain_queries_read(
    content: dict[str, tuple[list[Message], list[str], bool]],
    requests: list[tuple[str, int, int]],
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "db")

        async def fill() -> None:
            async with open_sqlite_storage(path) as storage:
                store = storage.message_store
                for cid, (messages, notes, summarized) in content.items():
                    for message in messages:
                        await store.append(cid, message)
                    for note in notes:
                        await storage.working_memory_store.append(cid, note)
                    if summarized and messages:
                        summary = store.submit_summary(cid, 1, "so far \x00 ✓")  # type: ignore[attr-defined]
                        await (await summary).wait()

        trio.run(fill)
        known = list(content)
        asked = [
            (known[i % len(known)] if known and i % 2 else cid, limit, after)
            for i, (cid, limit, after) in enumerate(requests)
        ]
        connection = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
        try:
            got = QUERIES.conversation_snapshots(connection, asked)
            assert got == [_oracle(connection, *request) for request in asked]
        finally:
            connection.close()

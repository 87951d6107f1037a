"""A message row damaged on disk (a flipped byte, a page patched by hand) is
read back as a ``StoreError`` naming the damage, never as whatever the
decoding happened to raise (``UnicodeDecodeError``, ``ValueError: 'x' is not
a valid Role``, a cattrs error): the error every caller already handles (the
CLI prints it as one line, the server answers it as a storage failure).

The damage is written past SQLite's own checks, as a damaged page would be:
``ignore_check_constraints`` for the role, and ``CAST(x'..' AS TEXT)`` for
text that is not UTF-8 (STRICT tables still hold each column's SQL type).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import apsw
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik import Message, Role, StoreError, TokenUsage, ToolCall
from agentik.storage import open_sqlite_storage

TEXT_COLUMNS = ("role", "content", "tool_calls", "tool_call_id", "parts")
"""The columns whose text a reader decodes."""
INTEGER_COLUMNS = ("created_us", "prompt_tokens", "completion_tokens", "seq")

DAMAGE_TEXT = st.one_of(
    st.binary(min_size=1, max_size=40).map(lambda b: ("blob", b)),
    st.text(max_size=40).map(lambda t: ("text", t)),
)
DAMAGE_INTEGER = st.integers(-(2**63), 2**63 - 1)


def seed(path: Path) -> None:
    async def write() -> None:
        async with open_sqlite_storage(path) as storage:
            store = storage.message_store
            await store.append("c", Message(Role.USER, "hello"))
            call = ToolCall(id="call-1", name="echo", arguments='{"text": "hi"}')
            await store.append("c", Message(Role.ASSISTANT, "", (call,), usage=TokenUsage(3, 4)))
            await store.append("c", Message(Role.TOOL, "hi", tool_call_id="call-1"))

    trio.run(write)


def damage(path: Path, column: str, value: object) -> None:
    connection = apsw.Connection(str(path))
    try:
        connection.execute("PRAGMA ignore_check_constraints = ON")
        if isinstance(value, tuple) and value[0] == "blob":
            sql = f"UPDATE message SET {column} = CAST(? AS TEXT) WHERE seq = 2"
            value = value[1]
        elif isinstance(value, tuple):
            sql = f"UPDATE message SET {column} = ? WHERE seq = 2"
            value = value[1]
        else:
            sql = f"UPDATE message SET {column} = ? WHERE seq = 2"
        # A unique seq or a NOT NULL column SQLite still guards: left undamaged.
        with contextlib.suppress(apsw.ConstraintError):
            connection.execute(sql, (value,))
    finally:
        connection.close()


READS = ("pages", "load")
"""``get_messages`` (a page at a time) and ``load_conversation`` (the agent's
load: on SQLite one statement whose answer is one JSON value)."""


def read_back(path: Path, how: str) -> tuple[Message, ...]:
    async def read() -> tuple[Message, ...]:
        async with open_sqlite_storage(path) as storage:
            store = storage.message_store
            if how == "pages":
                return tuple([m async for m in store.get_messages("c")])
            return (await store.load_conversation("c")).messages

    return trio.run(read)


@pytest.mark.parametrize("how", READS)
def test_a_role_no_code_knows_is_a_store_error(tmp_path: Path, how: str) -> None:
    path = tmp_path / "db"
    seed(path)
    damage(path, "role", ("text", "\x00ser"))
    with pytest.raises(StoreError, match="stored message #2 is damaged: ValueError"):
        read_back(path, how)


@pytest.mark.parametrize("how", READS)
def test_text_that_is_not_utf8_is_a_store_error(tmp_path: Path, how: str) -> None:
    path = tmp_path / "db"
    seed(path)
    damage(path, "content", ("blob", b"\x80abc"))
    with pytest.raises(StoreError, match="not UTF-8"):
        read_back(path, how)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.data(),
    column=st.sampled_from(TEXT_COLUMNS + INTEGER_COLUMNS),
    how=st.sampled_from(READS),
)
def test_any_damaged_column_reads_back_or_is_a_store_error(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, column: str, how: str
) -> None:
    path = tmp_path_factory.mktemp("damaged") / "db"
    seed(path)
    value = data.draw(DAMAGE_INTEGER if column in INTEGER_COLUMNS else DAMAGE_TEXT, label="value")
    damage(path, column, value)
    try:
        messages = read_back(path, how)
    except StoreError:
        return
    assert all(isinstance(m, Message) for m in messages)

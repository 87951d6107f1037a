"""Upgrading moves the MCP token vault out of working memory and loses no login.

Until SQLite schema 4 / PostgreSQL schema 3 the vault kept each server's
encrypted record as working-memory notes of the conversation
``agentik.mcp-oauth:<server>``: a write archived every active note of that
conversation and appended the new record, and a client could add notes of
its own there (``memory_add``). Hypothesis draws such histories (any server
names, any interleaving of vault writes and client notes); the database is
built at the old version exactly as the old code left it, then opened with
this code: the vault reads the last record written, the client's notes are
still the conversation's, no record is left in working memory, and
conversations outside the prefix are untouched. Real SQLite files and the
real PostgreSQL.
"""

from __future__ import annotations

import json
import pathlib
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime

import attrs
import psycopg
import trio
from cryptography.fernet import Fernet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from agentik.mcp import McpTokenVault
from agentik.storage import StorageBundle, open_postgres_storage, open_sqlite_storage
from agentik.storage.postgres import _migrate as pg_migrate
from agentik.storage.sqlite._connect import open_write_connection
from agentik.storage.sqlite._migrate import migrations as sqlite_migrations
from tests.postgres import fresh_schema

KEY = Fernet.generate_key()
OLD_PREFIX = "agentik.mcp-oauth:"
DECOYS = (
    "agentik.mcp-oauth",
    "AGENTIK.MCP-OAUTH:x",
    "agentik.mcp-oauthXx",
    "x agentik.mcp-oauth:y",
)
"""Conversations that only look like the vault's: their notes, records or not, stay."""


@attrs.frozen
class VaultWrite:
    access_token: str


@attrs.frozen
class ClientNote:
    text: str


Event = VaultWrite | ClientNote

_names = st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs")), min_size=1)
_events = st.lists(
    st.one_of(
        st.builds(VaultWrite, st.text("abcdef0123456789-_", min_size=8, max_size=40)),
        st.builds(ClientNote, st.text(min_size=1, max_size=30).filter(lambda t: t[:1] != "g")),
    ),
    min_size=1,
    max_size=6,
)
HISTORIES = st.dictionaries(_names.map(lambda n: n[:40]), _events, min_size=1, max_size=4)


def _record(access_token: str) -> str:
    """A record as the old vault encrypted it."""
    record = {"tokens": {"token": {"access_token": access_token, "token_type": "Bearer"}}}
    return Fernet(KEY).encrypt(json.dumps(record).encode()).decode()


def old_rows(history: dict[str, list[Event]]) -> list[tuple[str, str, bool]]:
    """``(conversation_id, text, archived)`` in id order, as the old vault (``compact``:
    archive every active note, append the record) and ``memory_add`` (append) left them."""
    rows: list[list[object]] = []
    for server, events in history.items():
        conversation = OLD_PREFIX + server
        for event in events:
            if isinstance(event, VaultWrite):
                for row in rows:
                    if row[0] == conversation:
                        row[2] = True
                rows.append([conversation, _record(event.access_token), False])
            else:
                rows.append([conversation, event.text, False])
    for decoy in DECOYS:
        rows.append([decoy, _record("decoy-token"), False])
        rows.append([decoy, "a decoy note", False])
    return [(str(c), str(t), bool(a)) for c, t, a in rows]


async def check_upgraded(bundle: StorageBundle, history: dict[str, list[Event]]) -> None:
    vault = McpTokenVault(bundle, KEY)
    notes = bundle.working_memory_store
    for server, events in history.items():
        writes = [e for e in events if isinstance(e, VaultWrite)]
        tokens = await vault.storage(server).get_tokens()
        if writes:
            assert tokens is not None, f"the login of {server!r} was lost"
            assert tokens.access_token == writes[-1].access_token
        else:
            assert tokens is None
        conversation = OLD_PREFIX + server
        last_write = max((i for i, e in enumerate(events) if isinstance(e, VaultWrite)), default=-1)
        active = [e.text for e in events[last_write + 1 :] if isinstance(e, ClientNote)]
        archived = [e.text for e in events[: last_write + 1] if isinstance(e, ClientNote)]
        assert [n.text for n in await notes.list(conversation)] == active
        assert [n.text for n in await notes.list_archived(conversation)] == archived
    for decoy in DECOYS:
        kept = [n.text for n in await notes.list(decoy)]
        assert kept == [_record_marker(kept[0]), "a decoy note"], f"{decoy!r} changed"


def _record_marker(text: str) -> str:
    assert text.startswith("gAAAAA"), "a decoy's record left its conversation"
    return text


def _sqlite_at_version_4(path: pathlib.Path, rows: Sequence[tuple[str, str, bool]]) -> None:
    connection = open_write_connection(path, "FULL", 1.0)
    for _, step in sqlite_migrations()[:4]:
        connection.execute(step)
    connection.pragma("user_version", 4)
    connection.executemany(
        "INSERT INTO memory_entry (conversation_id, text, created_us, archived)"
        " VALUES (?, ?, 1, ?)",
        [(c, t, int(a)) for c, t, a in rows],
    )
    connection.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=HISTORIES)
def test_sqlite_upgrade_moves_every_login_out_of_working_memory(
    history: dict[str, list[Event]],
) -> None:
    async def scenario(path: pathlib.Path) -> None:
        _sqlite_at_version_4(path, old_rows(history))
        async with open_sqlite_storage(path) as bundle:
            await check_upgraded(bundle, history)
        async with open_sqlite_storage(path) as bundle:  # and it stays so
            await check_upgraded(bundle, history)

    with tempfile.TemporaryDirectory() as directory:
        trio.run(scenario, pathlib.Path(directory) / "agentik.db")


def _postgres_at_version_3(dsn: str, schema: str, rows: Sequence[tuple[str, str, bool]]) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        connection.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        connection.execute(
            "CREATE TABLE agentik_schema_version ("
            " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version, step in pg_migrate.migrations()[:3]:
            connection.execute(step.encode())
            connection.execute("INSERT INTO agentik_schema_version VALUES (%s)", (version,))
        with connection.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO memory_entry (conversation_id, text, created_at, archived)"
                " VALUES (%s, %s, %s, %s)",
                [(c.encode(), t.encode(), datetime.now(UTC), a) for c, t, a in rows],
            )


def test_postgres_upgrade_moves_every_login_out_of_working_memory(postgres_dsn: str) -> None:
    @settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(history=HISTORIES)
    def upgrade(history: dict[str, list[Event]]) -> None:
        schema = fresh_schema()
        _postgres_at_version_3(postgres_dsn, schema, old_rows(history))

        async def scenario() -> None:
            async with open_postgres_storage(postgres_dsn, schema=schema, readers=1) as bundle:
                await check_upgraded(bundle, history)

        trio.run(scenario)

    upgrade()

"""The token vault: OAuth tokens in the storage bundle, never in clear.

A token is planted through the SDK's ``TokenStorage`` interface into a real
SQLite database; the database files are then searched for it byte by byte.
"""

from __future__ import annotations

import logging
import pathlib
import tempfile

import pytest
import trio
from cryptography.fernet import Fernet
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.shared.auth import OAuthToken

from agentik.mcp import McpTokenVault, token_key
from agentik.storage import in_memory_storage, open_sqlite_storage

_TOKENS = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.",
    min_size=16,
    max_size=64,
)


def _files(directory: pathlib.Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.iterdir()))


@settings(max_examples=15, deadline=None)
@given(access=_TOKENS, refresh=_TOKENS)
def test_a_planted_token_is_read_back_and_never_stored_in_clear(access: str, refresh: str) -> None:
    """Whatever the token, the database files never hold it; the vault gives it back,
    also after the database is closed and opened again."""

    async def scenario(directory: pathlib.Path) -> None:
        database = directory / "agentik.db"
        tokens = OAuthToken(access_token=access, refresh_token=refresh, expires_in=3600)
        async with open_sqlite_storage(database) as storage:
            vault = McpTokenVault(storage, token_key(database))
            await vault.storage("crm").set_tokens(tokens)
        files = _files(directory)
        assert access.encode() not in files
        assert refresh.encode() not in files
        async with open_sqlite_storage(database) as storage:
            vault = McpTokenVault(storage, token_key(database))
            again = await vault.storage("crm").get_tokens()
        assert again is not None
        assert (again.access_token, again.refresh_token) == (access, refresh)

    with tempfile.TemporaryDirectory() as directory:
        trio.run(scenario, pathlib.Path(directory))


async def test_an_access_token_about_to_expire_is_left_out(tmp_path: pathlib.Path) -> None:
    """Within 30 s of expiry only the refresh token is handed out, so the SDK refreshes
    rather than sending a token that dies on the way (or asking for a new login)."""
    now = [1000.0]
    async with open_sqlite_storage(tmp_path / "a.db") as storage:
        vault = McpTokenVault(storage, Fernet.generate_key(), clock=lambda: now[0])
        store = vault.storage("crm")
        await store.set_tokens(OAuthToken(access_token="at", refresh_token="rt", expires_in=100))
        fresh = await store.get_tokens()
        assert fresh is not None
        assert (fresh.access_token, fresh.expires_in) == ("at", 100)
        now[0] += 71
        stale = await store.get_tokens()
        assert stale is not None
        assert (stale.access_token, stale.refresh_token) == ("", "rt")


async def test_another_key_reads_nothing_and_says_why(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A changed key: no tokens (a new login is needed), a warning naming the server and
    the key variable, and nothing of the record in the log."""
    async with open_sqlite_storage(tmp_path / "a.db") as storage:
        await (
            McpTokenVault(storage, Fernet.generate_key())
            .storage("crm")
            .set_tokens(OAuthToken(access_token="secret-access", refresh_token="secret-refresh"))
        )
        with caplog.at_level(logging.DEBUG):
            assert (
                await McpTokenVault(storage, Fernet.generate_key()).storage("crm").get_tokens()
                is None
            )
    assert "mcp server 'crm': its stored oauth record cannot be read with this key" in caplog.text
    assert "secret" not in caplog.text


def test_a_bad_key_is_refused_with_the_variable_named() -> None:
    with pytest.raises(ValueError, match=r"AGENTIK_MCP_TOKEN_KEY"):
        McpTokenVault(None, b"not a key")  # type: ignore[arg-type]


def test_a_working_memory_store_is_refused_with_the_fix_named() -> None:
    """The vault no longer lives in a conversation's notes: code that still passes
    ``storage.working_memory_store`` gets a clear error, not a vault a client can reach."""
    import attrs

    storage = in_memory_storage()
    with pytest.raises(TypeError, match=r"^McpTokenVault takes the storage bundle or its "):
        McpTokenVault(storage.working_memory_store, Fernet.generate_key())  # type: ignore[arg-type]
    without = attrs.evolve(storage, secret_store=None)
    with pytest.raises(ValueError, match=r"^this storage bundle keeps no secrets"):
        McpTokenVault(without, Fernet.generate_key())
    assert storage.secret_store is not None
    McpTokenVault(storage.secret_store, Fernet.generate_key())

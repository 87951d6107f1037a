"""The secret store of every backend against a dict: Hypothesis draws sequences of
puts, gets and deletes with any names and values (unicode, NUL, empty values,
names of the length limit and past it) and every backend must answer as the
dict does, refusing bad names with ``ValueError`` and changing nothing; the
values then survive closing and reopening the database. Real SQLite files,
the real PostgreSQL.
"""

from __future__ import annotations

import pathlib
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik.storage import (
    SecretStore,
    StorageBundle,
    in_memory_storage,
    open_postgres_storage,
    open_sqlite_storage,
)
from agentik.storage._secrets import MAX_NAME
from tests.postgres import fresh_schema

_names = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "x" * MAX_NAME, "x" * (MAX_NAME + 1), "mcp-oauth:notes", "a\x00b"]),
)
_values = st.text(max_size=60) | st.just("")
Op = tuple[str, str, str]
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), _names, _values),
        st.tuples(st.just("get"), _names, st.just("")),
        st.tuples(st.just("delete"), _names, st.just("")),
    ),
    max_size=25,
)


def _valid(name: str) -> bool:
    return 1 <= len(name) <= MAX_NAME


async def _apply(store: SecretStore, ops: list[Op]) -> dict[str, str]:
    model: dict[str, str] = {}
    for op, name, value in ops:
        if not _valid(name):
            try:
                if op == "put":
                    await store.put_secret(name, value)
                elif op == "get":
                    await store.get_secret(name)
                else:
                    await store.delete_secret(name)
            except ValueError:
                continue
            raise AssertionError(f"{op} of a name of {len(name)} characters was accepted")
        if op == "put":
            await store.put_secret(name, value)
            model[name] = value
        elif op == "get":
            assert await store.get_secret(name) == model.get(name)
        else:
            assert await store.delete_secret(name) is (model.pop(name, None) is not None)
    for name, value in model.items():
        assert await store.get_secret(name) == value
    return model


async def _check(
    make: Callable[[], AbstractAsyncContextManager[StorageBundle]], ops: list[Op]
) -> None:
    async with make() as bundle:
        assert bundle.secret_store is not None
        model = await _apply(bundle.secret_store, ops)
    async with make() as bundle:  # durable: a new bundle on the same database reads it all
        assert bundle.secret_store is not None
        for name, value in model.items():
            assert await bundle.secret_store.get_secret(name) == value


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_memory_and_sqlite_secrets_answer_as_a_dict(ops: list[Op]) -> None:
    async def scenario(directory: pathlib.Path) -> None:
        await _apply(_secrets_of(in_memory_storage()), ops)
        await _check(lambda: open_sqlite_storage(directory / "agentik.db"), ops)

    with tempfile.TemporaryDirectory() as directory:
        trio.run(scenario, pathlib.Path(directory))


def test_postgres_secrets_answer_as_a_dict(postgres_dsn: str) -> None:
    @settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(ops=OPS)
    def run(ops: list[Op]) -> None:
        schema = fresh_schema()

        @asynccontextmanager
        async def make() -> AsyncIterator[StorageBundle]:
            async with open_postgres_storage(postgres_dsn, schema=schema, readers=1) as bundle:
                yield bundle

        trio.run(_check, make, ops)

    run()


def _secrets_of(bundle: StorageBundle) -> SecretStore:
    assert bundle.secret_store is not None
    return bundle.secret_store

"""The secrets' part of the store contract (``SecretStore``, optional): values by
name, replaced atomically, and apart from every conversation: nothing a
conversation id names (history, notes, export, delete) reaches a secret, and
nothing a secret is named reaches a conversation. A bundle without a
``secret_store`` has nothing to check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

import trio

from agentik._messages import Message, Role
from agentik.storage import SecretStore, Storage
from agentik.testing._members import missing_members

Case = Callable[[Storage], Awaitable[None]]

_UNICODE = "héllo ✓ 中文 עברית 🦜\u200d\x00 end"
_LARGE = "ü" * (1 << 19) + "x" * (1 << 19)


def _secrets(bundle: Storage) -> SecretStore | None:
    store = bundle.secret_store
    lacking = [] if store is None else missing_members(store, SecretStore)
    assert not lacking, (
        f"secret_store is a {type(store).__name__}, which lacks {', '.join(lacking)}"
        " of SecretStore (get_secret, put_secret, delete_secret)"
    )
    return store


async def _secrets_start_empty(bundle: Storage) -> None:
    store = _secrets(bundle)
    if store is None:
        return
    assert await store.get_secret("nothing") is None, "an unknown secret has a value"
    assert await store.delete_secret("nothing") is False, "deleting an unknown secret found one"


async def _secrets_put_replace_delete(bundle: Storage) -> None:
    store = _secrets(bundle)
    if store is None:
        return
    await store.put_secret("a", "one")
    await store.put_secret("ab", "two")
    await store.put_secret("A", "three")
    assert await store.get_secret("a") == "one"
    await store.put_secret("a", "replaced")
    assert await store.get_secret("a") == "replaced", "a put did not replace the value"
    assert (await store.get_secret("ab"), await store.get_secret("A")) == ("two", "three"), (
        "names are not exact (a prefix or another case was confused with them)"
    )
    await store.put_secret("empty", "")
    assert await store.get_secret("empty") == "", "an empty value did not come back empty"
    assert await store.delete_secret("a") is True
    assert await store.get_secret("a") is None, "a deleted secret still has a value"
    assert await store.delete_secret("a") is False, "a second delete found the secret"
    assert await store.get_secret("ab") == "two", "deleting one secret changed another"


async def _secrets_keep_any_text(bundle: Storage) -> None:
    store = _secrets(bundle)
    if store is None:
        return
    await store.put_secret(_UNICODE, _UNICODE)
    await store.put_secret("large", _LARGE)
    assert await store.get_secret(_UNICODE) == _UNICODE, "a unicode name or value changed"
    assert await store.get_secret("large") == _LARGE, "a 1 MiB value changed"


async def _secrets_refuse_bad_names(bundle: Storage) -> None:
    store = _secrets(bundle)
    if store is None:
        return
    for bad in ("", "x" * 513):
        for attempt in (
            partial(store.put_secret, bad, "v"),
            partial(store.get_secret, bad),
            partial(store.delete_secret, bad),
        ):
            try:
                await attempt()
            except ValueError:
                continue
            raise AssertionError(f"a secret name of {len(bad)} characters was accepted")
    try:
        await store.put_secret("n", b"bytes")  # type: ignore[arg-type]
    except ValueError:
        pass
    else:
        raise AssertionError("a value that is not a str was accepted")
    assert await store.get_secret("n") is None, "a refused put stored something"


async def _concurrent_puts_are_atomic(bundle: Storage) -> None:
    """Many puts at once: each name ends with one whole value that was put."""
    store = _secrets(bundle)
    if store is None:
        return
    values = [str(i) * (1 + i * 37) for i in range(20)]
    async with trio.open_nursery() as nursery:
        for value in values:
            nursery.start_soon(store.put_secret, "shared", value)
            nursery.start_soon(store.put_secret, f"own-{value[:3]}-{len(value)}", value)
    assert await store.get_secret("shared") in values, "concurrent puts mixed their values"
    for value in values:
        assert await store.get_secret(f"own-{value[:3]}-{len(value)}") == value


async def _secrets_are_apart_from_conversations(bundle: Storage) -> None:
    """A conversation named like a secret, or like where the MCP vault used to be,
    is an ordinary conversation: its notes, history, export and delete never
    show or touch the secret, and the secret shows no note or message."""
    store = _secrets(bundle)
    if store is None:
        return
    names = ("mcp-oauth:notes", "agentik.mcp-oauth:notes", "c")
    for name in names:
        await store.put_secret(name, f"secret of {name}")
    messages, notes = bundle.message_store, bundle.working_memory_store
    assert await messages.list_conversations() == [], "a secret shows as a conversation"
    for name in names:
        assert await notes.list(name) == [], "a secret shows as a note"
        assert [m async for m in messages.get_messages(name)] == []
        await messages.append(name, Message(Role.USER, f"message in {name}"))
        entry = await notes.append(name, f"note in {name}")
        await notes.compact(name, [entry.id], f"summary in {name}")
        if not bundle.degraded:  # a seed store's stand-ins neither export nor delete
            exported = repr([r async for r in messages.export_conversation(name)])
            assert "secret of" not in exported, "a conversation's export shows a secret"
            assert await messages.delete_conversation(name) is True
    for name in names:
        assert await store.get_secret(name) == f"secret of {name}", (
            "a conversation's notes, messages or delete changed a secret"
        )


SECRET_CASES: tuple[Case, ...] = (
    _secrets_start_empty,
    _secrets_put_replace_delete,
    _secrets_keep_any_text,
    _secrets_refuse_bad_names,
    _concurrent_puts_are_atomic,
    _secrets_are_apart_from_conversations,
)

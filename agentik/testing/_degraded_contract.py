"""What a seed-only bundle gets for the rest of the full protocol (``full_storage``):
the degraded behaviour docs/storage.md promises, one case per capability.

These run instead of the full cases for a plain ``StorageBundle``, whose
seed stores the contract's other cases check as they are. A ``Storage`` that
says it is ``degraded`` but behaves in full fails them: they prove the
stand-ins, not a backend's optional extras.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from agentik._errors import StoreError
from agentik._messages import Message, Role, ToolCall
from agentik._parts import ImagePart
from agentik.storage import Storage, TurnRecord

Case = Callable[[Storage], Awaitable[None]]


@contextmanager
def _refused(what: str, kind: type[Exception] = StoreError) -> Iterator[None]:
    try:
        yield
    except kind:
        return
    raise AssertionError(f"{what}: expected {kind.__name__}, nothing was raised")


async def _history(bundle: Storage, conversation_id: str) -> list[Message]:
    return [m async for m in bundle.message_store.get_messages(conversation_id)]


async def _drain(records: AsyncIterator[object]) -> list[object]:
    return [r async for r in records]


async def _seed_never_writes_without_waiting(bundle: Storage) -> None:
    """``submit_nowait`` answers None and stores nothing: a turn awaits ``submit``."""
    store = bundle.message_store
    assert store.submit_nowait("c", Message(Role.USER, "hi")) is None, (
        "a seed store's submit_nowait took a write"
    )
    assert await _history(bundle, "c") == [], "a refused submit_nowait stored a message"


async def _seed_loads_a_page_and_the_notes(bundle: Storage) -> None:
    """``load_conversation``: the page after ``after_seq``, the notes, no summary."""
    store = bundle.message_store
    stored = [await store.append("c", Message(Role.USER, f"m{i}")) for i in range(1, 6)]
    note = await bundle.working_memory_store.append("c", "a note")
    snapshot = await store.load_conversation("c", page_size=2, after_seq=2)
    assert list(snapshot.messages) == stored[2:4], snapshot.messages
    assert list(snapshot.memory) == [note]
    assert snapshot.summary is None
    rest = await store.load_conversation("c", after_seq=3)
    assert list(rest.messages) == stored[3:]
    assert (await store.load_conversation("nobody")).messages == ()
    with _refused("page_size=0", ValueError):
        await store.load_conversation("c", page_size=0)


async def _seed_lists_no_keys(bundle: Storage) -> None:
    """Keys still make retries exact (``find_idempotency_key``); no listing shows them."""
    store = bundle.message_store
    first = await store.append("c", Message(Role.USER, "q"), idempotency_key="t1.ctx")
    assert await store.find_idempotency_key("c", "t1.ctx") == first.seq
    assert await store.list_idempotency_keys("c") == []
    assert await store.list_keyed_turns("c") == []
    assert await store.count_idempotency_keys("c") == 0
    with _refused("a negative limit", ValueError):
        await store.list_idempotency_keys("c", limit=-1)
    with _refused("max_messages of 0", ValueError):
        await store.list_keyed_turns("c", max_messages=0)


async def _seed_keeps_no_approvals(bundle: Storage) -> None:
    """Waiting calls and decisions are refused with a ``StoreError``, nothing stored."""
    store = bundle.message_store
    await store.append("c", Message(Role.USER, "hi"))
    calls = Message(Role.ASSISTANT, "", (ToolCall("a", "t", "{}"),))
    with _refused("a waiting call"):
        await (await store.submit_awaiting("c", calls, ["a"])).wait()
    with _refused("a decision"):
        await (await store.submit_decision("c", 2, "a", approve=True)).wait()
    assert len(await _history(bundle, "c")) == 1, "a refused waiting call stored its message"


async def _seed_records_no_failures(bundle: Storage) -> None:
    """A failure is accepted and kept nowhere; no turn is listed as interrupted."""
    store = bundle.message_store
    await store.append("c", Message(Role.USER, "hi"))
    await (await store.submit_turn_failure("c", 1, "model_error")).wait()
    assert await store.turn_record("c", 1) == TurnRecord(), "a seed store kept a failure"
    await store.append("open", Message(Role.USER, "stopped before the answer"))
    assert await store.interrupted_conversations() == []
    with _refused("a negative limit", ValueError):
        await store.interrupted_conversations(limit=-1)


async def _seed_cannot_delete_export_or_import(bundle: Storage) -> None:
    """Delete, export and import are refused with a ``StoreError``; nothing is idle."""
    store = bundle.message_store
    kept = await store.append("c", Message(Role.USER, "kept"))
    with _refused("a delete"):
        await store.delete_conversation("c")
    with _refused("an export"):
        await _drain(store.export_conversation("c"))
    with _refused("an import"):
        await store.import_conversation("d", [])
    assert await _history(bundle, "c") == [kept], "a refused delete changed the conversation"
    assert await store.idle_conversations(datetime(3000, 1, 1, tzinfo=UTC)) == []
    with _refused("a naive cutoff", ValueError):
        await store.idle_conversations(datetime(3000, 1, 1))


async def _seed_keeps_no_summaries(bundle: Storage) -> None:
    """A summary is refused with a ``StoreError``; there is none to read."""
    store = bundle.message_store
    await store.append("c", Message(Role.USER, "hi"))
    with _refused("a summary"):
        await (await store.submit_summary("c", 1, "hi")).wait()
    assert await store.latest_summary("c") is None
    assert await store.list_summaries("c") == []


async def _seed_counts_no_blobs(bundle: Storage) -> None:
    """A message's parts are what the seed store keeps of them; no blob is
    counted (the seed protocol has no blob table)."""
    store = bundle.message_store
    image = ImagePart(data=b"\x89PNG", media_type="image/png")
    await store.append("c", Message(Role.USER, "see", parts=(image,)))
    assert await store.count_blobs() == 0, "a seed store counted blobs"


async def _seed_cannot_list_archived_notes(bundle: Storage) -> None:
    """``list_archived`` is refused with a ``StoreError``; archiving still works."""
    notes = bundle.working_memory_store
    entry = await notes.append("c", "note")
    assert await notes.archive("c", [entry.id]) == 1
    with _refused("listing archived notes"):
        await notes.list_archived("c")


DEGRADED_MESSAGE_CASES: tuple[Case, ...] = (
    _seed_never_writes_without_waiting,
    _seed_loads_a_page_and_the_notes,
    _seed_lists_no_keys,
    _seed_keeps_no_approvals,
    _seed_records_no_failures,
    _seed_cannot_delete_export_or_import,
    _seed_keeps_no_summaries,
    _seed_counts_no_blobs,
)
DEGRADED_MEMORY_CASES: tuple[Case, ...] = (_seed_cannot_list_archived_notes,)

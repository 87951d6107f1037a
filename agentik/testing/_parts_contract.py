"""The content-parts part of the store contract (``FullMessageStore``): a
message's parts (images and files, by url or inline data) come back as they
went in, in order, through every way in and out; inline data is kept once
however many messages carry it (``count_blobs``), and goes with the last
conversation that uses it. Cases see only the protocol.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

import trio

from agentik._errors import DuplicateKeyError
from agentik._messages import Message, Role
from agentik._parts import FilePart, ImagePart, Part, TextPart
from agentik.storage import ArchivedMessage, ArchiveRecord, Storage

Case = Callable[[Storage], Awaitable[None]]

ODD_BYTES = bytes(range(256)) * 3 + b"\x00"
"""Every byte value, NUL last: no encoding may touch them."""
PNG = b"\x89PNG\r\n\x1a\n" + bytes(100)

PARTS: tuple[Part, ...] = (
    ImagePart(url="https://example.com/cat.png"),
    ImagePart(data=PNG, media_type="image/png"),
    TextPart(text="between ✓ \x00 \ud800"),
    FilePart(data=ODD_BYTES, media_type="application/octet-stream", filename="raw ✓.bin"),
    FilePart(data=b"", media_type="text/plain", filename="empty.txt"),
    FilePart(url="https://example.com/a.pdf", media_type="application/pdf"),
    ImagePart(data=PNG, media_type="image/png"),  # the same image again, in the same message
)


async def _history(bundle: Storage, conversation_id: str) -> list[Message]:
    return [m async for m in bundle.message_store.get_messages(conversation_id)]


def _with_parts(content: str, parts: tuple[Part, ...] = PARTS) -> Message:
    return Message(Role.USER, content, parts=parts)


async def _parts_round_trip(bundle: Storage) -> None:
    """append, submit, a burst of submits (the writer's multi-row insert), a
    keyed append; read back by get_messages, load_conversation, list_keyed_turns."""
    store = bundle.message_store
    one = await store.append("p", _with_parts("one"))
    assert one.parts == PARTS, f"append returned parts {one.parts!r}"
    pendings = [await store.submit("p", _with_parts(f"burst {i}", PARTS[i:])) for i in range(4)]
    await store.append("p", Message(Role.ASSISTANT, "text only"))
    keyed = await store.append("p", _with_parts("keyed", PARTS[1:2]), idempotency_key="k-turn")
    burst = [await pending.wait() for pending in pendings]
    assert [m.parts for m in burst] == [PARTS[i:] for i in range(4)]
    history = await _history(bundle, "p")
    assert [m.parts for m in history] == [PARTS, *[PARTS[i:] for i in range(4)], (), PARTS[1:2]]
    assert history == [one, *burst, history[5], keyed], "stored parts did not read back"
    snapshot = await store.load_conversation("p")
    assert list(snapshot.messages) == history, "load_conversation lost parts"
    turns = await store.list_keyed_turns("p", key_suffix="turn")
    assert [turn.messages for turn in turns] == [(keyed,)], "list_keyed_turns lost parts"


async def _parts_survive_export_and_import(bundle: Storage) -> None:
    store = bundle.message_store
    await store.append("from", _with_parts("a"))
    await store.append("from", Message(Role.ASSISTANT, "b"))
    records: list[ArchiveRecord] = [r async for r in store.export_conversation("from")]
    exported = [r.message for r in records if isinstance(r, ArchivedMessage)]
    assert exported == await _history(bundle, "from"), "export lost parts"
    await store.delete_conversation("from")
    assert await store.count_blobs() == 0, "a deleted conversation's blobs are still held"
    assert await store.import_conversation("to", records) == 2
    assert await _history(bundle, "to") == exported, "import lost parts"
    assert await store.count_blobs() == 3, "an import did not keep each blob once"


async def _blobs_are_kept_once(bundle: Storage) -> None:
    """The same data in many messages and conversations is one blob; it stays
    while any conversation uses it."""
    store = bundle.message_store
    assert await store.count_blobs() == 0
    async with trio.open_nursery() as nursery:  # concurrent writers of the same data
        for conversation_id in ("a", "b", "a2"):
            nursery.start_soon(store.append, conversation_id, _with_parts(conversation_id))
    await store.append("a", _with_parts("again"))
    await store.append("c", _with_parts("url only", (PARTS[0], PARTS[5])))
    assert await store.count_blobs() == 3, "the same data was not kept once (PNG, odd, empty)"
    assert await store.delete_conversation("a")
    assert await store.delete_conversation("a2")
    assert await store.count_blobs() == 3, "a blob another conversation uses was deleted"
    assert [m.parts for m in await _history(bundle, "b")] == [PARTS]
    assert await store.delete_conversation("b")
    assert await store.count_blobs() == 0, "blobs outlived the last conversation using them"
    assert [m.parts for m in await _history(bundle, "c")] == [(PARTS[0], PARTS[5])]
    again = await store.append("d", _with_parts("after", PARTS[3:4]))
    assert await store.count_blobs() == 1
    assert (await _history(bundle, "d")) == [again], "a blob stored again after its delete"


async def _a_refused_append_keeps_no_blob(bundle: Storage) -> None:
    """An append refused (a reused idempotency key) stores none of its data."""
    store = bundle.message_store
    await store.append("k", Message(Role.USER, "first"), idempotency_key="same")
    with contextlib.suppress(DuplicateKeyError):
        await store.append("k", _with_parts("second"), idempotency_key="same")
    assert await store.count_blobs() == 0, "a refused append left its blobs behind"
    assert len(await _history(bundle, "k")) == 1


PARTS_CASES: tuple[Case, ...] = (
    _parts_round_trip,
    _parts_survive_export_and_import,
    _blobs_are_kept_once,
    _a_refused_append_keeps_no_blob,
)

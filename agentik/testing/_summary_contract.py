"""The summaries' part of the store contract (``FullMessageStore``), and a
conversation's snapshot after a seq (``load_conversation``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from agentik._errors import StoreError
from agentik._messages import Message, Role
from agentik.storage import Storage

Case = Callable[[Storage], Awaitable[None]]


@contextmanager
def _refused(what: str) -> Iterator[None]:
    try:
        yield
    except StoreError:
        return
    raise AssertionError(f"{what}: expected StoreError, nothing was raised")


async def _summaries_chain(bundle: Storage) -> None:
    summaries = store = bundle.message_store
    assert await summaries.latest_summary("c") is None
    for i in range(1, 7):
        await store.append("c", Message(Role.USER if i % 2 else Role.ASSISTANT, f"m{i}"))
    first = await (await summaries.submit_summary("c", 2, "one and two")).wait()
    assert (first.through_seq, first.text) == (2, "one and two")
    assert first.created_at is not None
    assert first.created_at.utcoffset() == timedelta(0)
    assert await summaries.latest_summary("c") == first
    second = await (await summaries.submit_summary("c", 4, "up to four")).wait()
    assert await summaries.latest_summary("c") == second
    refused = ((4, "the same seq again"), (3, "less than the latest"), (7, "no such seq"))
    for through, why in refused:
        with _refused(f"a summary through seq {through} ({why})"):
            await (await summaries.submit_summary("c", through, "x")).wait()
    with _refused("a summary of a conversation without messages"):
        await (await summaries.submit_summary("nobody", 1, "x")).wait()
    assert await summaries.latest_summary("c") == second, "a refused summary changed the latest"
    assert await summaries.latest_summary("other") is None
    history = [m async for m in store.get_messages("c")]
    assert len(history) == 6, "a summary never deletes history"


async def _snapshot_after_a_seq(bundle: Storage) -> None:
    store = bundle.message_store
    for i in range(1, 6):
        await store.append("c", Message(Role.USER, f"m{i}"))
    await bundle.working_memory_store.append("c", "a note")
    snapshot = await store.load_conversation("c", page_size=2, after_seq=2)
    assert [m.seq for m in snapshot.messages] == [3, 4]
    assert [e.text for e in snapshot.memory] == ["a note"]
    assert snapshot.summary is None
    await (await store.submit_summary("c", 3, "three")).wait()
    later = await store.load_conversation("c", after_seq=3)
    assert later.summary is not None
    assert later.summary.through_seq == 3
    assert [m.seq for m in later.messages] == [4, 5]


async def _summaries_listed(bundle: Storage) -> None:
    summaries = store = bundle.message_store
    assert await store.list_summaries("c") == []
    for i in range(1, 9):
        await store.append("c", Message(Role.USER, f"m{i}"))
    await store.append("other", Message(Role.USER, "elsewhere"))
    chain = [
        await (await summaries.submit_summary("c", seq, f"through {seq} \u00e9\U0001f600")).wait()
        for seq in (2, 5, 7)
    ]
    await (await summaries.submit_summary("other", 1, "theirs")).wait()
    assert await store.list_summaries("c") == chain, "every summary, oldest first"
    assert await store.list_summaries("c", limit=2) == chain[:2]
    assert await store.list_summaries("c", after_seq=2) == chain[1:], "after_seq pages by seq"
    assert await store.list_summaries("c", after_seq=3) == chain[1:]
    assert await store.list_summaries("c", after_seq=7) == []
    assert [s.text for s in await store.list_summaries("other")] == ["theirs"]
    assert await store.list_summaries("nobody") == []
    assert await summaries.latest_summary("c") == chain[-1]


SUMMARY_CASES: tuple[Case, ...] = (_summaries_chain, _snapshot_after_a_seq, _summaries_listed)

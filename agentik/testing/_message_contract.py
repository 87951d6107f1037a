"""The ``MessageStore`` part of the store contract: the seed protocol's cases
(every bundle) and the rest of ``FullMessageStore``'s (a ``Storage``), with
the ledger, lifecycle, summary and parts cases of their own modules."""

from __future__ import annotations

from datetime import UTC, datetime

import trio

from agentik._errors import DuplicateKeyError
from agentik._messages import Message, Role, TokenStats, TokenUsage, ToolCall
from agentik.storage import FullMessageStore, FullWorkingMemoryStore, Storage
from agentik.testing._cases import MEGABYTE, UNICODE, Case, is_utc, raises
from agentik.testing._ledger_contract import LEDGER_CASES
from agentik.testing._lifecycle_contract import LIFECYCLE_CASES
from agentik.testing._members import missing_members
from agentik.testing._parts_contract import PARTS_CASES
from agentik.testing._summary_contract import SUMMARY_CASES


async def _history(bundle: Storage, conversation_id: str, **kwargs: int) -> list[Message]:
    return [m async for m in bundle.message_store.get_messages(conversation_id, **kwargs)]


_CALLERS_TIME = datetime(2000, 1, 1, 0, 0, 0, 1, tzinfo=UTC)


def _user(content: str) -> Message:
    return Message(role=Role.USER, content=content)


async def _empty_conversation(bundle: Storage) -> None:
    store = bundle.message_store
    assert await _history(bundle, "nobody") == [], "an unknown conversation has messages"
    assert await store.token_stats("nobody") == TokenStats(), "an unknown conversation has usage"
    assert await store.find_idempotency_key("nobody", "k") is None
    assert await store.list_conversations() == [], "an empty store lists conversations"


async def _append_assigns_seq_and_time(bundle: Storage) -> None:
    store = bundle.message_store
    sent = [
        Message(role=Role.SYSTEM, content="be brief", seq=99, created_at=_CALLERS_TIME),
        _user("hi"),
        Message(
            role=Role.ASSISTANT,
            content="",
            tool_calls=(ToolCall(id="c1", name="calc_add", arguments='{"a": 1'),),
            usage=TokenUsage(prompt_tokens=7, completion_tokens=3),
        ),
        Message(role=Role.TOOL, content="error: bad json", tool_call_id="c1"),
    ]
    stored = [await store.append("c", m) for m in sent]
    assert [m.seq for m in stored] == [1, 2, 3, 4], f"seqs {[m.seq for m in stored]}"
    for original, saved in zip(sent, stored, strict=True):
        assert is_utc(saved.created_at), f"created_at {saved.created_at!r} is not aware UTC"
        assert saved.created_at is not None
        assert saved.created_at != _CALLERS_TIME, "the caller's created_at was kept"
        assert saved.role == original.role
        assert saved.content == original.content
        assert saved.tool_calls == original.tool_calls
        assert saved.usage == original.usage
        assert saved.tool_call_id == original.tool_call_id
    assert await _history(bundle, "c") == stored, "get_messages differs from what append returned"


async def _conversations_are_independent(bundle: Storage) -> None:
    store = bundle.message_store
    for i in range(3):
        await store.append("a", _user(f"a{i}"))
    b = await store.append("b", _user("b0"))
    assert b.seq == 1, f"the first message of a new conversation got seq {b.seq}"
    assert [m.content for m in await _history(bundle, "a")] == ["a0", "a1", "a2"]
    assert [m.content for m in await _history(bundle, "b")] == ["b0"]


async def _get_messages_pages(bundle: Storage) -> None:
    store = bundle.message_store
    stored = [await store.append("c", _user(str(i))) for i in range(7)]
    for page_size in (1, 2, 3, 7, 8, 1000):
        got = await _history(bundle, "c", page_size=page_size)
        assert got == stored, f"page_size={page_size} returned {[m.seq for m in got]}"
    for after in (-1, 0, 3, 6, 7, 50):
        got = await _history(bundle, "c", after_seq=after, page_size=2)
        assert got == stored[max(after, 0) :], f"after_seq={after} returned {[m.seq for m in got]}"
    with raises(ValueError, "page_size=0"):
        await _history(bundle, "c", page_size=0)


async def _get_messages_fetches_lazily(bundle: Storage) -> None:
    store = bundle.message_store
    for i in range(3):
        await store.append("c", _user(str(i)))
    seen = []
    async for message in store.get_messages("c", page_size=2):
        seen.append(message.content)
        if message.seq == 1:
            await store.append("c", _user("late"))
    assert seen == ["0", "1", "2", "late"], f"pages were not fetched as iterated: {seen}"


async def _token_stats_sum_usage(bundle: Storage) -> None:
    store = bundle.message_store
    await store.append("c", _user("q"))
    for p, c in ((10, 2), (5, 0), (0, 9)):
        usage = TokenUsage(prompt_tokens=p, completion_tokens=c)
        await store.append("c", Message(role=Role.ASSISTANT, content="a", usage=usage))
    await store.append("other", Message(role=Role.ASSISTANT, content="x", usage=TokenUsage(1, 1)))
    stats = await store.token_stats("c")
    assert stats == TokenStats(prompt_tokens=15, completion_tokens=11, messages=3), repr(stats)


async def _idempotency_keys(bundle: Storage) -> None:
    store = bundle.message_store
    await store.append("c", _user("first"))
    kept = await store.append("c", _user("retry me"), idempotency_key="turn-1")
    assert await store.find_idempotency_key("c", "turn-1") == kept.seq == 2
    with raises(DuplicateKeyError, "a reused idempotency key"):
        await store.append("c", _user("retry me"), idempotency_key="turn-1")
    assert [m.content for m in await _history(bundle, "c")] == ["first", "retry me"]
    pending = await store.submit("c", _user("again"), idempotency_key="turn-1")
    with raises(DuplicateKeyError, "a reused idempotency key through submit"):
        await pending.wait()
    elsewhere = await store.append("d", _user("same key"), idempotency_key="turn-1")
    assert elsewhere.seq == 1, "a key is scoped to its conversation"
    after = await store.append("c", _user("next"))
    assert after.seq == 3, f"a refused duplicate used up a seq: next got {after.seq}"
    assert await store.find_idempotency_key("c", "unknown") is None
    assert await store.find_idempotency_key("nobody", "turn-1") is None


async def _implements_the_full_protocol(bundle: Storage) -> None:
    """Every method of the full protocols is there (mypy checks a ``Storage``
    built in typed code; this names what an untyped one lacks)."""
    for name, store, protocol in (
        ("message store", bundle.message_store, FullMessageStore),
        ("working memory store", bundle.working_memory_store, FullWorkingMemoryStore),
    ):
        lacking = missing_members(store, protocol)
        assert not lacking, (
            f"the {name} lacks {', '.join(lacking)} of {protocol.__name__}: a Storage's"
            " stores implement the full protocols (a seed-only backend goes in a StorageBundle)"
        )


async def _list_idempotency_keys(bundle: Storage) -> None:
    store = index = bundle.message_store
    assert await index.list_idempotency_keys("nobody") == []
    await store.append("c", _user("no key"))
    for i in range(1, 6):
        await store.append("c", _user(f"turn {i}"), idempotency_key=f"k{i}")
        await store.append("c", Message(role=Role.ASSISTANT, content="a"))
    await store.append("d", _user("elsewhere"), idempotency_key="k9")
    keys = await index.list_idempotency_keys("c")
    assert keys == [(10, "k5"), (8, "k4"), (6, "k3"), (4, "k2"), (2, "k1")], keys
    assert await index.list_idempotency_keys("c", limit=2) == keys[:2]
    assert await index.list_idempotency_keys("c", before_seq=8, limit=2) == keys[2:4]
    assert await index.list_idempotency_keys("c", before_seq=2) == []
    assert await index.list_idempotency_keys("c", limit=0) == []
    with raises(ValueError, "a negative limit"):
        await index.list_idempotency_keys("c", limit=-1)


async def _list_keyed_turns(bundle: Storage) -> None:
    """Keyed turns newest first, each up to the next user message, paged by seq."""
    store = index = bundle.message_store
    assert await index.list_keyed_turns("nobody") == []
    assert await index.count_idempotency_keys("nobody") == 0
    call = ToolCall(id="t1", name="calc_add", arguments="{}")
    turns: list[list[Message]] = [
        [_user("no key"), Message(role=Role.ASSISTANT, content="a0")],
        [
            _user("q1"),
            Message(role=Role.ASSISTANT, content="", tool_calls=(call,)),
            Message(role=Role.TOOL, content="2", tool_call_id="t1"),
            Message(role=Role.ASSISTANT, content="a1"),
        ],
        [_user("q2")],  # a turn that ended without an answer
        [_user("q3"), Message(role=Role.ASSISTANT, content="a3")],
        [_user("native"), Message(role=Role.ASSISTANT, content="a4")],
    ]
    keys = [None, "h1.ctx", "h2.ctx", "h3.ctx", "n1"]
    stored: list[list[Message]] = []
    for key, turn in zip(keys, turns, strict=True):
        first = await store.append("c", turn[0], idempotency_key=key)
        stored.append([first, *[await store.append("c", m) for m in turn[1:]]])
    await store.append("d", _user("elsewhere"), idempotency_key="h9.ctx")

    every = await index.list_keyed_turns("c")
    assert [t.key for t in every] == ["n1", "h3.ctx", "h2.ctx", "h1.ctx"], every
    assert [list(t.messages) for t in every] == [stored[4], stored[3], stored[2], stored[1]]
    assert [t.seq for t in every] == [
        m[0].seq for m in (stored[4], stored[3], stored[2], stored[1])
    ]
    tasks = await index.list_keyed_turns("c", key_suffix=".ctx")
    assert [t.key for t in tasks] == ["h3.ctx", "h2.ctx", "h1.ctx"], tasks
    first_page = await index.list_keyed_turns("c", key_suffix=".ctx", limit=2)
    assert first_page == tasks[:2], "limit"
    rest = await index.list_keyed_turns(
        "c", key_suffix=".ctx", before_seq=first_page[-1].seq, limit=2
    )
    assert rest == tasks[2:], "before_seq continues where the page ended"
    assert await index.list_keyed_turns("c", before_seq=tasks[-1].seq) == []
    assert await index.list_keyed_turns("c", limit=0) == []
    short = await index.list_keyed_turns("c", key_suffix=".ctx", max_messages=2)
    assert [list(t.messages) for t in short] == [stored[3], stored[2], stored[1][:2]], short
    assert await index.list_keyed_turns("c", key_suffix="h1.ctx.longer") == []
    assert await index.count_idempotency_keys("c") == 4
    assert await index.count_idempotency_keys("c", key_suffix=".ctx") == 3
    assert await index.count_idempotency_keys("c", key_suffix="n1") == 1
    with raises(ValueError, "a negative limit"):
        await index.list_keyed_turns("c", limit=-1)
    with raises(ValueError, "max_messages of 0"):
        await index.list_keyed_turns("c", max_messages=0)


async def _submit_applies_in_order(bundle: Storage) -> None:
    store = bundle.message_store
    pendings = [await store.submit("c", _user(str(i))) for i in range(20)]
    results = [await p.wait() for p in pendings]
    assert [m.seq for m in results] == list(range(1, 21)), "submissions applied out of order"
    assert [m.content for m in await _history(bundle, "c")] == [str(i) for i in range(20)]


async def _concurrent_appends_are_gapless(bundle: Storage) -> None:
    store = bundle.message_store
    conversations = ("x", "y", "z")

    async def writer(task: int) -> None:
        for i in range(5):
            await store.append(conversations[task % 3], _user(f"{task}:{i}"))

    async with trio.open_nursery() as nursery:
        for task in range(60):
            nursery.start_soon(writer, task)
    for conversation in conversations:
        history = await _history(bundle, conversation)
        assert [m.seq for m in history] == list(range(1, 101)), f"{conversation}: gaps or repeats"
        by_task: dict[str, list[int]] = {}
        for m in history:
            name, index = m.content.split(":")
            by_task.setdefault(name, []).append(int(index))
        assert all(v == list(range(5)) for v in by_task.values()), "a task's writes reordered"


async def _list_conversations_pages(bundle: Storage) -> None:
    store = bundle.message_store
    ids = ["b", "a", "é", "a2", "Z", "🦜", "c"]
    for conversation in ids:
        await store.append(conversation, _user("x"))
    ordered = sorted(ids)
    assert await store.list_conversations() == ordered
    assert await store.list_conversations(limit=3) == ordered[:3]
    assert (
        await store.list_conversations(after="a", limit=2) == ordered[ordered.index("a") + 1 :][:2]
    )
    assert await store.list_conversations(after="b0") == [i for i in ordered if i > "b0"]
    assert await store.list_conversations(after="🦜") == []
    assert await store.list_conversations(limit=0) == []
    with raises(ValueError, "limit=-1"):
        await store.list_conversations(limit=-1)


async def _unicode_and_large_messages(bundle: Storage) -> None:
    store = bundle.message_store
    call = ToolCall(id=UNICODE, name="t", arguments=UNICODE)
    big = await store.append(
        UNICODE, Message(role=Role.ASSISTANT, content=MEGABYTE, tool_calls=(call,))
    )
    small = await store.append(UNICODE, _user(UNICODE))
    history = await _history(bundle, UNICODE, page_size=1)
    assert history == [big, small], "unicode or 1 MiB content did not round-trip"
    assert history[0].content == MEGABYTE
    assert history[1].content == UNICODE
    assert await store.list_conversations() == [UNICODE]


MESSAGE_CASES: tuple[Case, ...] = (
    _empty_conversation,
    _append_assigns_seq_and_time,
    _conversations_are_independent,
    _get_messages_pages,
    _get_messages_fetches_lazily,
    _token_stats_sum_usage,
    _idempotency_keys,
    _submit_applies_in_order,
    _concurrent_appends_are_gapless,
    _list_conversations_pages,
    _unicode_and_large_messages,
)
"""The seed ``MessageStore``: every bundle."""

FULL_MESSAGE_CASES: tuple[Case, ...] = (
    _implements_the_full_protocol,
    _list_idempotency_keys,
    _list_keyed_turns,
    *LEDGER_CASES,
    *LIFECYCLE_CASES,
    *SUMMARY_CASES,
    *PARTS_CASES,
)
"""The rest of ``FullMessageStore``: a ``Storage``."""

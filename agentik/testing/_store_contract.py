"""The store contract as public check functions, like ``trio.testing.check_two_way_stream``.

A backend author passes a factory of fresh bundles; each check opens a new
bundle per case, drives it through the public protocol only, and raises
``AssertionError`` naming what broke. agentik's own tests run the same
functions against the in-memory, SQLite and PostgreSQL backends, so every
backend is held to one definition of correct.

What a bundle is held to follows its type, as the agent treats it: a
``Storage`` to the full protocol (``FullMessageStore``,
``FullWorkingMemoryStore``); a plain ``StorageBundle`` to the seed protocols,
and the stand-ins ``full_storage`` gives it to the degraded behaviour
docs/storage.md describes (``_degraded_contract``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from datetime import UTC, datetime, timedelta

import trio

from agentik._errors import DuplicateKeyError, StoreError
from agentik._memory import Skill, SkillSummary
from agentik._messages import Message, Role, TokenStats, TokenUsage, ToolCall
from agentik.storage import (
    FullMessageStore,
    FullWorkingMemoryStore,
    Storage,
    StorageBundle,
    full_storage,
)
from agentik.testing._degraded_contract import DEGRADED_MEMORY_CASES, DEGRADED_MESSAGE_CASES
from agentik.testing._ledger_contract import LEDGER_CASES
from agentik.testing._lifecycle_contract import LIFECYCLE_CASES
from agentik.testing._members import missing_members
from agentik.testing._parts_contract import PARTS_CASES
from agentik.testing._secret_contract import SECRET_CASES
from agentik.testing._summary_contract import SUMMARY_CASES

MakeBundle = Callable[[], AbstractAsyncContextManager[StorageBundle]]
"""Returns an async context manager yielding a fresh, empty bundle: a
``Storage`` for a backend with every capability, or a plain ``StorageBundle``
of seed stores."""

Case = Callable[[Storage], Awaitable[None]]

UNICODE = "héllo ✓ 中文 עברית 🦜\u200d\x00 end"
MEGABYTE = "ü" * (1 << 19) + "x" * (1 << 19)  # 1 MiB of characters, 1.5 MiB of UTF-8


@contextmanager
def _raises(kind: type[BaseException], what: str) -> Iterator[None]:
    try:
        yield
    except kind:
        return
    raise AssertionError(f"{what}: expected {kind.__name__}, nothing was raised")


async def _history(bundle: Storage, conversation_id: str, **kwargs: int) -> list[Message]:
    return [m async for m in bundle.message_store.get_messages(conversation_id, **kwargs)]


def _is_utc(value: datetime | None) -> bool:
    return value is not None and value.utcoffset() == timedelta(0)


_CALLERS_TIME = datetime(2000, 1, 1, 0, 0, 0, 1, tzinfo=UTC)


def _user(content: str) -> Message:
    return Message(role=Role.USER, content=content)


# --- messages -------------------------------------------------------------------


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
        assert _is_utc(saved.created_at), f"created_at {saved.created_at!r} is not aware UTC"
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
    with _raises(ValueError, "page_size=0"):
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
    with _raises(DuplicateKeyError, "a reused idempotency key"):
        await store.append("c", _user("retry me"), idempotency_key="turn-1")
    assert [m.content for m in await _history(bundle, "c")] == ["first", "retry me"]
    pending = await store.submit("c", _user("again"), idempotency_key="turn-1")
    with _raises(DuplicateKeyError, "a reused idempotency key through submit"):
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
    with _raises(ValueError, "a negative limit"):
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
    with _raises(ValueError, "a negative limit"):
        await index.list_keyed_turns("c", limit=-1)
    with _raises(ValueError, "max_messages of 0"):
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
    with _raises(ValueError, "limit=-1"):
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


# --- working memory -------------------------------------------------------------


async def _memory_append_and_list(bundle: Storage) -> None:
    store = bundle.working_memory_store
    assert await store.list("c") == []
    first = await store.append("c", "one")
    other = await store.append("d", "elsewhere")
    second = await store.append("c", UNICODE)
    assert first.conversation_id == "c"
    assert first.text == "one"
    assert _is_utc(first.created_at)
    assert len({first.id, other.id, second.id}) == 3, "entry ids repeat across conversations"
    assert await store.list("c") == [first, second], "list is not the active entries, oldest first"
    assert await store.list("d") == [other]


async def _memory_archive(bundle: Storage) -> None:
    store = bundle.working_memory_store
    a, b, c = [await store.append("c", t) for t in "abc"]
    theirs = await store.append("d", "theirs")
    assert await store.archive("c", [a.id, c.id, theirs.id, 10_000]) == 2
    assert await store.list("c") == [b], "archived entries are still listed"
    assert await store.list("d") == [theirs], "another conversation's entry was archived"
    assert await store.archive("c", [a.id]) == 0, "an archived entry was archived twice"
    assert await store.archive("c", []) == 0


async def _memory_compact(bundle: Storage) -> None:
    store = bundle.working_memory_store
    a, b, c = [await store.append("c", t) for t in "abc"]
    summary = await store.compact("c", [a.id, b.id], "a and b")
    assert summary.text == "a and b"
    assert summary.conversation_id == "c"
    assert summary.id not in (a.id, b.id, c.id)
    assert await store.list("c") == [c, summary], "compact did not archive or add the summary"


async def _memory_compact_refuses_foreign_ids(bundle: Storage) -> None:
    store = bundle.working_memory_store
    a, b = [await store.append("c", t) for t in "ab"]
    theirs = await store.append("d", "theirs")
    await store.archive("c", [b.id])
    for bad in ([a.id, theirs.id], [a.id, b.id], [a.id, 10_000]):
        with _raises(StoreError, f"compact of {bad}"):
            await store.compact("c", bad, "summary")
    assert await store.list("c") == [a], "a refused compact changed conversation c"
    assert await store.list("d") == [theirs], "a refused compact changed conversation d"


async def _memory_archived_listed(bundle: Storage) -> None:
    store = bundle.working_memory_store
    assert await store.list_archived("c") == []
    a, b, c, d = [await store.append("c", t) for t in ("a", UNICODE, "c", "d")]
    theirs = await store.append("other", "theirs")
    await store.archive("c", [a.id, c.id])
    await store.archive("other", [theirs.id])
    summary = await store.compact("c", [b.id], "b, compacted")
    assert await store.list_archived("c") == [a, b, c], "archived notes, oldest first"
    assert await store.list("c") == [d, summary], "listing archived notes changed the active ones"
    assert await store.list_archived("c", limit=2) == [a, b]
    assert await store.list_archived("c", after_id=b.id) == [c], "after_id pages by id"
    assert await store.list_archived("c", after_id=c.id) == []
    assert await store.list_archived("other") == [theirs]
    assert await store.list_archived("nobody") == []


WORKING_MEMORY_CASES: tuple[Case, ...] = (
    _memory_append_and_list,
    _memory_archive,
    _memory_compact,
    _memory_compact_refuses_foreign_ids,
)
FULL_WORKING_MEMORY_CASES: tuple[Case, ...] = (_memory_archived_listed,)


# --- reflections ----------------------------------------------------------------


async def _reflections_insert_and_list(bundle: Storage) -> None:
    store = bundle.reflection_store
    assert await store.count() == 0
    assert await store.list_recent(5) == []
    made = [await store.insert("c" if i % 2 else "d", f"lesson {i}") for i in range(6)]
    assert all(_is_utc(r.created_at) for r in made)
    assert len({r.id for r in made}) == 6
    assert await store.count() == 6
    assert await store.list_recent(4) == made[::-1][:4], "list_recent is not newest first"
    assert await store.list_recent(100) == made[::-1]
    assert await store.list_recent(0) == []
    assert await store.list_for_conversation("c") == made[1::2], "not oldest first"
    assert await store.list_for_conversation("nobody") == []
    with _raises(ValueError, "list_recent(-1)"):
        await store.list_recent(-1)


async def _reflections_delete_older_than(bundle: Storage) -> None:
    store = bundle.reflection_store
    made = [await store.insert("c", UNICODE + str(i)) for i in range(5)]
    cutoff = made[2].created_at
    older = [r for r in made if r.created_at < cutoff]
    assert await store.delete_older_than(cutoff) == len(older), "cutoff is not strict"
    kept = [r for r in made if r not in older]
    assert await store.list_for_conversation("c") == kept
    assert await store.delete_older_than(cutoff) == 0
    assert await store.delete_older_than(made[-1].created_at + timedelta(microseconds=1)) == len(
        kept
    )
    assert await store.count() == 0
    with _raises(ValueError, "a naive cutoff"):
        await store.delete_older_than(datetime(2030, 1, 1))
    later = await store.insert("c", "after")
    assert later.id > made[-1].id, "a reflection id was reused after deletion"


REFLECTION_CASES: tuple[Case, ...] = (
    _reflections_insert_and_list,
    _reflections_delete_older_than,
)


# --- skills ---------------------------------------------------------------------


async def _skills_empty(bundle: Storage) -> None:
    store = bundle.skill_store
    assert await store.catalog() == []
    assert await store.all() == []
    assert await store.get("x") is None
    assert not await store.exists("x")
    assert not await store.remove("x")


async def _skills_upsert_and_read(bundle: Storage) -> None:
    store = bundle.skill_store
    stored = {}
    for name in ("zeta", "alpha", "mid", UNICODE):
        skill = await store.upsert(Skill(name=name, description=f"about {name}", body=f"do {name}"))
        assert _is_utc(skill.updated_at), f"updated_at {skill.updated_at!r} is not aware UTC"
        stored[name] = skill
    ordered = sorted(stored)
    assert await store.all() == [stored[n] for n in ordered], "all() is not sorted by name"
    assert await store.catalog() == [
        SkillSummary(name=n, description=f"about {n}") for n in ordered
    ]
    assert await store.get("mid") == stored["mid"]
    assert await store.exists(UNICODE)


async def _skills_upsert_replaces(bundle: Storage) -> None:
    store = bundle.skill_store
    old = await store.upsert(Skill(name="s", description="old", body="old body"))
    new = await store.upsert(Skill(name="s", description="new", body=MEGABYTE))
    assert old.updated_at is not None
    assert new.updated_at is not None
    assert new.updated_at >= old.updated_at
    assert await store.catalog() == [SkillSummary(name="s", description="new")]
    assert await store.get("s") == new, "upsert did not replace the skill"


async def _skills_remove(bundle: Storage) -> None:
    store = bundle.skill_store
    await store.upsert(Skill(name="a", description="", body=""))
    await store.upsert(Skill(name="b", description="", body=""))
    assert await store.remove("a")
    assert not await store.remove("a"), "removing twice reported success"
    assert not await store.exists("a")
    assert await store.get("a") is None
    assert [s.name for s in await store.all()] == ["b"]


SKILL_CASES: tuple[Case, ...] = (
    _skills_empty,
    _skills_upsert_and_read,
    _skills_upsert_replaces,
    _skills_remove,
)


# --- the public checks ----------------------------------------------------------


async def _run(
    make_bundle: MakeBundle,
    cases: tuple[Case, ...],
    full: tuple[Case, ...] = (),
    degraded: tuple[Case, ...] = (),
) -> None:
    """Each case on a fresh bundle, as a ``Storage`` (``full_storage``): the
    ``cases``, then ``full`` for a ``Storage`` or ``degraded`` for a plain
    ``StorageBundle`` (known from the first bundle opened)."""
    chosen: tuple[Case, ...] | None = None
    position = 0
    while chosen is None or position < len(chosen):
        async with make_bundle() as bundle:
            storage = full_storage(bundle)
            if chosen is None:
                chosen = cases + (degraded if storage.degraded else full)
                if not chosen:
                    return
            case = chosen[position]
            position += 1
            try:
                await case(storage)
            except AssertionError as error:
                raise AssertionError(f"store contract case {case.__name__}: {error}") from error


async def check_message_store(make_bundle: MakeBundle) -> None:
    """Check the bundle's ``MessageStore`` against the contract: a ``Storage``'s
    against ``FullMessageStore``, a plain bundle's against the seed protocol
    (and its stand-ins against the degraded behaviour)."""
    await _run(make_bundle, MESSAGE_CASES, FULL_MESSAGE_CASES, DEGRADED_MESSAGE_CASES)


async def check_working_memory_store(make_bundle: MakeBundle) -> None:
    """Check the bundle's ``WorkingMemoryStore`` against the contract (a
    ``Storage``'s against ``FullWorkingMemoryStore``)."""
    await _run(make_bundle, WORKING_MEMORY_CASES, FULL_WORKING_MEMORY_CASES, DEGRADED_MEMORY_CASES)


async def check_reflection_store(make_bundle: MakeBundle) -> None:
    """Check the bundle's ``ReflectionStore`` against the contract."""
    await _run(make_bundle, REFLECTION_CASES)


async def check_skill_store(make_bundle: MakeBundle) -> None:
    """Check the bundle's ``SkillStore`` against the contract."""
    await _run(make_bundle, SKILL_CASES)


async def check_secret_store(make_bundle: MakeBundle) -> None:
    """Check the bundle's ``SecretStore`` (if it has one) against the contract."""
    await _run(make_bundle, SECRET_CASES)


async def check_storage_bundle(make_bundle: MakeBundle) -> None:
    """Check all four stores of a backend, and its secret store, against the contract."""
    await check_message_store(make_bundle)
    await check_working_memory_store(make_bundle)
    await check_reflection_store(make_bundle)
    await check_skill_store(make_bundle)
    await check_secret_store(make_bundle)

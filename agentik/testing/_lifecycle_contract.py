"""The conversation-lifecycle part of the store contract (``FullMessageStore``):
delete a conversation whole, find idle ones, export and import, losing
nothing but note and reflection ids. Cases see only the protocol.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta

import attrs

from agentik._errors import StoreError
from agentik._messages import Message, Role, TokenStats, TokenUsage, ToolCall
from agentik._parts import ImagePart
from agentik.storage import (
    ArchivedMessage,
    ArchivedNote,
    ArchivedReflection,
    ArchivedSummary,
    ArchiveRecord,
    Storage,
    TurnRecord,
)

Case = Callable[[Storage], Awaitable[None]]


async def _history(bundle: Storage, conversation_id: str) -> list[Message]:
    return [m async for m in bundle.message_store.get_messages(conversation_id)]


async def _fill(bundle: Storage, conversation_id: str) -> None:
    """A conversation with something in every place a store keeps: messages
    (usage, a tool call, idempotency keys, an image of its own), notes (one archived), a
    reflection, approvals and a failed turn, two chained summaries."""
    store = bundle.message_store
    await store.append(conversation_id, Message(Role.USER, "first"), idempotency_key="k1")
    call = Message(
        Role.ASSISTANT,
        "",
        (ToolCall("c1", "t", '{"a": 1}'), ToolCall("c2", "t", "{")),
        usage=TokenUsage(5, 3),
    )
    await (await store.submit_awaiting(conversation_id, call, ["c2", "c1"])).wait()
    await (await store.submit_decision(conversation_id, 2, "c2", approve=True)).wait()
    await store.append(conversation_id, Message(Role.TOOL, "one", tool_call_id="c1"))
    await store.append(conversation_id, Message(Role.TOOL, "two", tool_call_id="c2"))
    await store.append(conversation_id, Message(Role.ASSISTANT, "done", usage=TokenUsage(7, 2)))
    await store.append(
        conversation_id,
        Message(
            Role.USER,
            "second ✓",
            parts=(ImagePart(data=conversation_id.encode(), media_type="image/png"),),
        ),
        idempotency_key="k2",
    )
    await (await store.submit_turn_failure(conversation_id, 6, "model_error")).wait()
    await (await store.submit_turn_output(conversation_id, 1)).wait()
    notes = bundle.working_memory_store
    old = await notes.append(conversation_id, "old note")
    await notes.append(conversation_id, "kept note")
    await notes.archive(conversation_id, [old.id])
    await bundle.reflection_store.insert(conversation_id, "a lesson")
    await (await store.submit_summary(conversation_id, 2, "the first two")).wait()
    await (await store.submit_summary(conversation_id, 5, "the first turn")).wait()


async def _everything_of(bundle: Storage, conversation_id: str) -> tuple[object, ...]:
    """What the protocols show of a conversation."""
    store = bundle.message_store
    records = tuple([await store.turn_record(conversation_id, seq) for seq in (1, 6)])
    summary = await store.latest_summary(conversation_id)
    return (
        await _history(bundle, conversation_id),
        await store.token_stats(conversation_id),
        await store.find_idempotency_key(conversation_id, "k1"),
        await store.find_idempotency_key(conversation_id, "k2"),
        [e.text for e in await bundle.working_memory_store.list(conversation_id)],
        [r.text for r in await bundle.reflection_store.list_for_conversation(conversation_id)],
        records,
        summary,
    )


async def _delete_removes_the_conversation_whole(bundle: Storage) -> None:
    deleter = bundle.message_store
    await _fill(bundle, "gone")
    assert (await bundle.message_store.turn_record("gone", 1)).output
    await _fill(bundle, "kept")
    kept = await _everything_of(bundle, "kept")
    blobs = await deleter.count_blobs()
    assert await deleter.delete_conversation("gone") is True
    assert await deleter.count_blobs() == blobs - 1, "a blob only it used survived the delete"
    store = bundle.message_store
    try:
        left = await _history(bundle, "gone")
    except StoreError as error:  # a message kept, its blob gone
        raise AssertionError(f"messages survived the delete, unreadable: {error}") from error
    assert left == [], "messages survived the delete"
    assert await store.token_stats("gone") == TokenStats()
    assert await store.find_idempotency_key("gone", "k1") is None, "a key survived the delete"
    assert await bundle.working_memory_store.list("gone") == [], "notes survived the delete"
    assert await bundle.reflection_store.list_for_conversation("gone") == []
    assert await store.turn_record("gone", 1) == TurnRecord(), "approvals or a typed mark survived"
    assert await store.turn_record("gone", 6) == TurnRecord(), "a failed turn survived"
    assert await store.latest_summary("gone") is None, "a summary survived the delete"
    assert await store.list_conversations() == ["kept"]
    assert await _everything_of(bundle, "kept") == kept, "another conversation changed"
    assert await deleter.delete_conversation("gone") is False, "a second delete found data"
    assert await deleter.delete_conversation("never") is False


async def _a_deleted_conversation_starts_again(bundle: Storage) -> None:
    """After a delete the next message is seq 1 and old keys are free (a
    backend caching last seqs must forget them)."""
    deleter = bundle.message_store
    store = bundle.message_store
    for i in range(3):
        await store.append("c", Message(Role.USER, str(i)), idempotency_key=f"k{i}")
    assert await deleter.delete_conversation("c")
    again = await store.append("c", Message(Role.USER, "again"), idempotency_key="k0")
    assert again.seq == 1, f"the first message after a delete got seq {again.seq}"
    pending = await store.submit("c", Message(Role.ASSISTANT, "hi"))
    assert (await pending.wait()).seq == 2
    assert [m.content for m in await _history(bundle, "c")] == ["again", "hi"]


async def _notes_alone_are_deleted(bundle: Storage) -> None:
    """A conversation with notes but no message still has something to delete."""
    deleter = bundle.message_store
    await bundle.working_memory_store.append("c", "note")
    assert await deleter.delete_conversation("c") is True
    assert await bundle.working_memory_store.list("c") == []


async def _idle_conversations(bundle: Storage) -> None:
    deleter = bundle.message_store
    store = bundle.message_store
    newest = {}
    for conversation_id in ("b", "a", "c"):
        newest[conversation_id] = await store.append(conversation_id, Message(Role.USER, "x"))
    latest = max(m.created_at for m in newest.values() if m.created_at is not None)
    tick = timedelta(microseconds=1)
    assert await deleter.idle_conversations(latest + tick) == ["a", "b", "c"]
    assert await deleter.idle_conversations(latest + tick, after="a", limit=1) == ["b"]
    assert await deleter.idle_conversations(latest + tick, limit=0) == []
    first = min(m.created_at for m in newest.values() if m.created_at is not None)
    assert await deleter.idle_conversations(first) == [], "idle means strictly before"
    later = await store.append("a", Message(Role.USER, "y"))
    assert later.created_at is not None
    assert "a" not in await deleter.idle_conversations(later.created_at), (
        "a conversation is as old as its newest message"
    )
    # The retention guard: checked with the delete, in its transaction.
    assert await deleter.delete_conversation("a", idle_before=later.created_at) is False
    assert len(await _history(bundle, "a")) == 2, "a conversation in use was deleted"
    assert await deleter.delete_conversation("never", idle_before=latest + tick) is False
    assert await deleter.delete_conversation("a", idle_before=later.created_at + tick) is True
    assert await _history(bundle, "a") == []


def _without_ids(records: Sequence[ArchiveRecord]) -> list[ArchiveRecord]:
    """Notes and reflections are renumbered by an import: compare them without ids."""
    out: list[ArchiveRecord] = []
    for record in records:
        if isinstance(record, ArchivedNote):
            record = attrs.evolve(record, entry=attrs.evolve(record.entry, id=0))
        elif isinstance(record, ArchivedReflection):
            record = attrs.evolve(record, reflection=attrs.evolve(record.reflection, id=0))
        out.append(record)
    return out


async def _export_delete_import_is_lossless(bundle: Storage) -> None:
    archiver = deleter = bundle.message_store
    await _fill(bundle, "c")
    before = await _everything_of(bundle, "c")
    exported = [r async for r in archiver.export_conversation("c")]
    kinds = {type(r).__name__ for r in exported}
    assert {"ArchivedMessage", "ArchivedNote", "ArchivedReflection"} <= kinds, kinds
    summaries = [r for r in exported if type(r).__name__ == "ArchivedSummary"]
    assert len(summaries) == 2, "the export lacks the chain of summaries"
    keyed = [r.idempotency_key for r in exported if isinstance(r, ArchivedMessage)]
    assert keyed == ["k1", None, None, None, None, "k2"], keyed
    assert await deleter.delete_conversation("c")
    assert [r async for r in archiver.export_conversation("c")] == []
    assert await archiver.import_conversation("c", exported) == 6
    assert await _everything_of(bundle, "c") == before, "the round trip lost something"
    again = [r async for r in archiver.export_conversation("c")]
    assert _without_ids(again) == _without_ids(exported)
    nxt = await bundle.message_store.append("c", Message(Role.ASSISTANT, "after"))
    assert nxt.seq == 7, f"the message after an import got seq {nxt.seq}"


async def _import_refuses_and_changes_nothing(bundle: Storage) -> None:
    archiver = bundle.message_store
    await _fill(bundle, "c")
    exported = [r async for r in archiver.export_conversation("c")]
    before = await _everything_of(bundle, "c")
    try:
        await archiver.import_conversation("c", exported)
    except StoreError:
        pass
    else:
        raise AssertionError("an import into a conversation holding data was accepted")
    assert await _everything_of(bundle, "c") == before
    messages = [r for r in exported if isinstance(r, ArchivedMessage)]
    for bad in (messages[1:], [messages[1], messages[0]], [*messages, messages[-1]]):
        try:
            await archiver.import_conversation("d", bad)
        except StoreError:
            pass
        else:
            raise AssertionError("messages without seqs 1, 2, 3 … were imported")
        assert await _history(bundle, "d") == [], "a refused import stored messages"
    summaries = [r for r in exported if isinstance(r, ArchivedSummary)]
    if summaries:
        unchained: list[ArchiveRecord] = [*messages, *reversed(summaries)]
        beyond: list[ArchiveRecord] = [*messages[:3], *summaries]  # covers seq 5 of 3
        for wrong in (unchained, beyond):
            try:
                await archiver.import_conversation("d", wrong)
            except StoreError:
                pass
            else:
                raise AssertionError("summaries that do not chain over the messages were imported")
            assert await _history(bundle, "d") == [], "a refused import stored messages"


def _broken_histories(messages: list[ArchivedMessage]) -> dict[str, list[ArchiveRecord]]:
    """Conversations a model API refuses (or that plant instructions), made
    from the exported ``_fill``: its messages are user, assistant with calls
    c1 and c2, their two results, an answer, a user message."""

    def at(seq: int, message: ArchivedMessage) -> ArchivedMessage:
        return attrs.evolve(message, message=attrs.evolve(message.message, seq=seq))

    def swapped(changed: Message) -> list[ArchiveRecord]:
        """The messages up to ``changed``'s seq, that one changed."""
        seq = changed.seq or 0
        return [*messages[: seq - 1], attrs.evolve(messages[seq - 1], message=changed)]

    user, calls, first, second = messages[:4]
    return {
        "a system message": swapped(attrs.evolve(user.message, role=Role.SYSTEM)),
        "a result that answers no call": swapped(
            attrs.evolve(first.message, tool_call_id="nobody")
        ),
        "two results for one call": [user, calls, first, at(4, first)],
        "a call id twice": swapped(
            attrs.evolve(calls.message, tool_calls=(calls.message.tool_calls[0],) * 2)
        ),
        "a user message while calls wait": [user, calls, at(3, user)],
        "negative token counts": swapped(attrs.evolve(calls.message, usage=TokenUsage(-1, 3))),
        "tool calls on a user message": swapped(
            attrs.evolve(user.message, tool_calls=calls.message.tool_calls)
        ),
        "a result without its call": [user, at(2, second)],
    }


async def _import_refuses_broken_histories(bundle: Storage) -> None:
    """Every backend refuses, storing nothing, a history that breaks the rules
    the agent keeps (``agentik.storage._archive_rules``): later turns of such
    a conversation would fail against a strict model API for good."""
    archiver = bundle.message_store
    await _fill(bundle, "c")
    exported = [r async for r in archiver.export_conversation("c")]
    messages = [r for r in exported if isinstance(r, ArchivedMessage)]
    for name, records in _broken_histories(messages).items():
        try:
            await archiver.import_conversation("d", records)
        except StoreError:
            pass
        else:
            raise AssertionError(f"an import with {name} was accepted")
        assert await _history(bundle, "d") == [], f"a refused import ({name}) stored messages"
    valid = messages[:6]
    assert await archiver.import_conversation("d", valid) == 6, "a valid history was refused"


LIFECYCLE_CASES: tuple[Case, ...] = (
    _delete_removes_the_conversation_whole,
    _a_deleted_conversation_starts_again,
    _notes_alone_are_deleted,
    _idle_conversations,
    _export_delete_import_is_lossless,
    _import_refuses_and_changes_nothing,
    _import_refuses_broken_histories,
)

"""The turn ledger's part of the store contract (``FullMessageStore``).

A full message store keeps each decision and each waiting call in the
transaction of its message: these cases check what a caller can see of that
through the protocol. (A seed store's stand-ins keep none: ``_degraded_contract``.)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

from agentik._errors import StoreError
from agentik._messages import Message, Role, ToolCall
from agentik.storage import Approval, Storage, TurnRecord

Case = Callable[[Storage], Awaitable[None]]


@contextmanager
def _refused(what: str) -> Iterator[None]:
    try:
        yield
    except StoreError:
        return
    raise AssertionError(f"{what}: expected StoreError, nothing was raised")


def _calls(*ids: str) -> Message:
    return Message(Role.ASSISTANT, "", tuple(ToolCall(i, "t", "{}") for i in ids))


async def _count(bundle: Storage, conversation_id: str) -> int:
    return len([m async for m in bundle.message_store.get_messages(conversation_id)])


async def _waiting_calls_are_stored_with_their_message(bundle: Storage) -> None:
    ledger = bundle.message_store
    store = bundle.message_store
    user = await store.append("c", Message(Role.USER, "hi"))
    assert await ledger.turn_record("c", 1) == TurnRecord()
    stored = await (await ledger.submit_awaiting("c", _calls("b", "a", "x"), ["b", "a"])).wait()
    assert (user.seq, stored.seq) == (1, 2)
    assert stored.tool_calls == _calls("b", "a", "x").tool_calls
    record = await ledger.turn_record("c", 1)
    assert record == TurnRecord(
        approvals=(Approval(seq=2, call_id="b"), Approval(seq=2, call_id="a"))
    ), record
    assert await ledger.turn_record("other", 1) == TurnRecord()


async def _awaiting_refuses_calls_the_message_lacks(bundle: Storage) -> None:
    ledger = bundle.message_store
    await bundle.message_store.append("c", Message(Role.USER, "hi"))
    for ids in (["zz"], ["a", "a"]):
        with _refused(f"waiting calls {ids} of a message with call a"):
            await (await ledger.submit_awaiting("c", _calls("a"), ids)).wait()
    assert await _count(bundle, "c") == 1, "a refused message was stored"
    assert await ledger.turn_record("c", 1) == TurnRecord()


async def _decisions_are_taken_once(bundle: Storage) -> None:
    ledger = bundle.message_store
    await bundle.message_store.append("c", Message(Role.USER, "hi"))
    await (await ledger.submit_awaiting("c", _calls("a", "b"), ["a", "b"])).wait()
    approved = await ledger.submit_decision("c", 2, "a", approve=True, reason="fine")
    assert await approved.wait() is None
    denial = Message(Role.TOOL, "denied: no", tool_call_id="b")
    result = await (
        await ledger.submit_decision("c", 2, "b", approve=False, reason="no", result=denial)
    ).wait()
    assert result is not None
    assert (result.seq, result.content) == (3, "denied: no")
    assert (await ledger.turn_record("c", 1)).approvals == (
        Approval(seq=2, call_id="a", approved=True, reason="fine"),
        Approval(seq=2, call_id="b", approved=False, reason="no"),
    )
    again = Message(Role.TOOL, "denied: twice", tool_call_id="a")
    for call_id, seq in (("a", 2), ("b", 2), ("a", 1), ("nope", 2)):
        with _refused(f"deciding call {call_id!r} of message {seq}"):
            await (
                await ledger.submit_decision("c", seq, call_id, approve=False, result=again)
            ).wait()
    assert await _count(bundle, "c") == 3, "a refused decision stored its result"


async def _a_record_covers_its_turn_only(bundle: Storage) -> None:
    """Approvals belong to the turn whose user message precedes them; call ids
    may repeat across turns."""
    ledger = bundle.message_store
    store = bundle.message_store
    await store.append("c", Message(Role.USER, "one"))  # 1
    await (await ledger.submit_awaiting("c", _calls("a"), ["a"])).wait()  # 2
    await store.append("c", Message(Role.USER, "two"))  # 3
    await (await ledger.submit_awaiting("c", _calls("a"), ["a"])).wait()  # 4
    await (await ledger.submit_decision("c", 4, "a", approve=True)).wait()
    assert (await ledger.turn_record("c", 1)).approvals == (Approval(seq=2, call_id="a"),)
    assert (await ledger.turn_record("c", 3)).approvals == (
        Approval(seq=4, call_id="a", approved=True),
    )


async def _failures_are_recorded_per_turn(bundle: Storage) -> None:
    ledger = bundle.message_store
    store = bundle.message_store
    await store.append("c", Message(Role.USER, "one"))
    await store.append("c", Message(Role.USER, "two"))
    await (await ledger.submit_turn_failure("c", 2, "model_error")).wait()
    assert (await ledger.turn_record("c", 2)).failure == "model_error"
    assert (await ledger.turn_record("c", 1)).failure is None
    await (await ledger.submit_turn_failure("c", 2, "cancelled")).wait()
    assert (await ledger.turn_record("c", 2)).failure == "cancelled", "the latest failure counts"
    for conversation_id, seq in (("c", 3), ("nobody", 1)):
        with _refused(f"a failure of seq {seq} in {conversation_id!r}"):
            await (await ledger.submit_turn_failure(conversation_id, seq, "x")).wait()


async def _typed_turns_are_recorded_per_turn(bundle: Storage) -> None:
    """``submit_turn_output`` marks one turn (by its user message) as typed;
    recorded twice is still once; an unknown seq is refused. (A delete
    forgets it: ``_delete_removes_the_conversation_whole``.)"""
    store = bundle.message_store
    await store.append("c", Message(Role.USER, "one"))
    await store.append("c", Message(Role.ASSISTANT, '{"a": 1}'))
    await store.append("c", Message(Role.USER, "two"))
    await (await store.submit_turn_output("c", 1)).wait()
    await (await store.submit_turn_output("c", 1)).wait()
    assert (await store.turn_record("c", 1)).output is True
    assert (await store.turn_record("c", 1)).failure is None
    assert (await store.turn_record("c", 3)).output is False
    for conversation_id, seq in (("c", 4), ("nobody", 1)):
        with _refused(f"a typed turn at seq {seq} in {conversation_id!r}"):
            await (await store.submit_turn_output(conversation_id, seq)).wait()


async def _interrupted_turns_are_found(bundle: Storage) -> None:
    """``interrupted_conversations`` lists exactly the conversations
    whose last turn neither finished, failed, nor waits for a decision."""
    ledger = store = bundle.message_store
    user, answer = Message(Role.USER, "q"), Message(Role.ASSISTANT, "a")
    result = Message(Role.TOOL, "r", tool_call_id="a")
    await store.append("done", user)
    await store.append("done", answer)
    await store.append("open", user)  # stopped before the model answered
    await store.append("calling", user)
    await store.append("calling", _calls("a"))  # stopped in the call
    await store.append("answered", user)
    await store.append("answered", _calls("a"))
    await store.append("answered", result)  # stopped before the model went on
    await store.append("failed", user)
    await store.append("failed", _calls("a"))
    await (await ledger.submit_turn_failure("failed", 1, "model_error")).wait()
    await store.append("waiting", user)
    await (await ledger.submit_awaiting("waiting", _calls("a"), ["a"])).wait()
    await store.append("approved", user)  # decided, stopped while the call ran
    await (await ledger.submit_awaiting("approved", _calls("a"), ["a"])).wait()
    await (await ledger.submit_decision("approved", 2, "a", approve=True)).wait()
    await store.append("later", user)  # an older turn failed, then waited ...
    await (await ledger.submit_awaiting("later", _calls("a"), ["a"])).wait()
    await (await ledger.submit_turn_failure("later", 1, "cancelled")).wait()
    await store.append("later", user)  # ... and the last one stopped
    found = await store.interrupted_conversations()
    expected = ["answered", "approved", "calling", "later", "open"]
    assert found == expected, f"interrupted: expected {expected}, got {found}"
    assert await store.interrupted_conversations(after="calling", limit=1) == ["later"]
    assert await store.interrupted_conversations(after="open") == []
    assert await store.interrupted_conversations(limit=0) == []
    await store.append("open", answer)  # resumed and finished
    assert "open" not in await store.interrupted_conversations()


LEDGER_CASES: tuple[Case, ...] = (
    _waiting_calls_are_stored_with_their_message,
    _awaiting_refuses_calls_the_message_lacks,
    _decisions_are_taken_once,
    _a_record_covers_its_turn_only,
    _failures_are_recorded_per_turn,
    _typed_turns_are_recorded_per_turn,
    _interrupted_turns_are_found,
)

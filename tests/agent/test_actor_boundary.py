"""The actor boundary (issue 31, item 2): only a conversation's own task (and
the tasks it starts) writes its ``Conversation``; the supervisor works
through the ``ConversationHandle``, whose contract ``_handle`` states.

The first test watches every attribute write on every ``Conversation``
while an agent goes through all it does from outside: turns (sent,
streamed, queued), approvals and decisions, cancels (all, by key), notes
archived from outside, toolset status, deletes, idle retirement, and a close
whose grace runs out. The others pin the handle's operations one by one.
"""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from agentik import (
    ModelRequest,
    ModelResponse,
    NamedTool,
    ToolsetContribution,
    TurnError,
    in_memory_storage,
    open_chat_agent,
)
from agentik.agent._approvals import Approvals
from agentik.agent._conversation import Conversation
from agentik.agent._handle import ConversationHandle
from agentik.agent._history_cache import HistoryCache
from agentik.agent._optional_work import OptionalWork
from agentik.agent._requests import Delete, NewTurn, Reply, Request
from agentik.models import ScriptedModel
from tests.agent.helpers import assert_valid_history, call, stored


def respond(request: ModelRequest) -> ModelResponse:
    """``wait N``: a call of ``wait``; ``pay``: a call needing approval;
    ``toolset``: enables the toolset ``dice``; else an answer."""
    last = request.messages[-1]
    if last.role.value != "user":
        return ModelResponse(text="done")
    text = last.content
    if text.startswith("wait"):
        return call("wait", {"seconds": int(text.split()[1])}, id=f"w{len(request.messages)}")
    if text == "pay":
        return call("pay", {}, id=f"p{len(request.messages)}")
    if text == "toolset":
        return call("enable_toolset", {"name": "dice"}, id=f"e{len(request.messages)}")
    return ModelResponse(text="hi")


async def _wait(arguments: dict[str, object]) -> str:
    seconds = arguments["seconds"]
    assert isinstance(seconds, int)
    await trio.sleep(seconds)
    return "waited"


async def _pay(arguments: dict[str, object]) -> str:
    return "paid"


async def _roll(arguments: dict[str, object]) -> str:
    return "4"


WAIT = NamedTool("wait", "Wait.", {"type": "object"}, _wait)
PAY = NamedTool("pay", "Pay.", {"type": "object"}, _pay, requires_approval=True)
DICE = ToolsetContribution("dice", "Dice.", (NamedTool("dice_roll", "Roll.", {}, _roll),))


def _owns(conversation: Conversation, task: trio.lowlevel.Task) -> bool:
    """Whether ``task`` is the conversation's own task or one it started."""
    current: trio.lowlevel.Task | None = task
    while current is not None:
        frame = current.coro.cr_frame
        if (
            frame is not None
            and frame.f_code.co_name == "run"
            and frame.f_locals.get("self") is conversation
        ):
            return True
        nursery = current.parent_nursery
        current = None if nursery is None else nursery.parent_task
    return False


@pytest.fixture
def foreign_writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every write of a ``Conversation`` attribute (or of the parts it keeps
    its state in: its ``HistoryCache``, ``Approvals`` and ``OptionalWork``)
    from a task that is not the conversation's own (nor one it started)."""
    found: list[str] = []
    write = object.__setattr__
    init = Conversation.__init__
    building: set[int] = set()
    parts: dict[int, Conversation] = {}

    def construct(self: Conversation, *args: object, **kwargs: object) -> None:
        building.add(id(self))  # the supervisor builds it before its task starts
        try:
            init(self, *args, **kwargs)
        finally:
            building.discard(id(self))
        parts[id(self.cache)] = parts[id(self.approvals)] = parts[id(self.optional)] = self

    def check(conversation: Conversation, name: str) -> None:
        try:
            task = trio.lowlevel.current_task()
        except RuntimeError:
            task = None
        if task is None or id(conversation) in building or _owns(conversation, task):
            return
        found.append(f"{name} written by task {task.name}")

    def watched(self: Conversation, name: str, value: object) -> None:
        check(self, name)
        write(self, name, value)

    def watched_part(self: object, name: str, value: object) -> None:
        conversation = parts.get(id(self))  # None: being built
        if conversation is None:
            write(self, name, value)
            return
        owned = (conversation.cache, conversation.approvals, conversation.optional)
        if any(self is part for part in owned):
            check(conversation, f"{type(self).__name__}.{name}")
        write(self, name, value)

    monkeypatch.setattr(Conversation, "__init__", construct)
    monkeypatch.setattr(Conversation, "__setattr__", watched)
    monkeypatch.setattr(Approvals, "__setattr__", watched_part)
    monkeypatch.setattr(HistoryCache, "__setattr__", watched_part)
    monkeypatch.setattr(OptionalWork, "__setattr__", watched_part)
    return found


async def test_only_its_own_task_writes_a_conversation(
    foreign_writes: list[str], autojump_clock: trio.testing.MockClock
) -> None:
    storage = in_memory_storage()
    outcomes: list[str] = []

    async def outcome_of(coro: object) -> None:
        try:
            await coro  # type: ignore[misc]
            outcomes.append("ok")
        except TurnError as error:
            outcomes.append(error.code)

    async with open_chat_agent(
        model=ScriptedModel(respond),
        storage=storage,
        tools=[WAIT, PAY],
        toolsets=[DICE],
        idle_timeout=30,
        activation_timeout=60,
        approval_timeout=300,
        close_grace=5,
    ) as agent:
        # Turns, a stream, queued turns, a cancel of all and one by key.
        await agent.send("a", "hello")
        async with agent.stream("a", "hello again") as events:
            assert [e async for e in events]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(outcome_of, agent.send("a", "wait 100", idempotency_key="k1"))
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(outcome_of, agent.send("a", "wait 1", idempotency_key="k2"))
            nursery.start_soon(outcome_of, agent.send("a", "wait 1"))
            await trio.testing.wait_all_tasks_blocked()
            assert agent.turn_in_progress("a", "k2")
            assert await agent.cancel("a", idempotency_key="k2") == 1
            assert await agent.cancel("a") == 2
        assert sorted(outcomes) == ["cancelled", "cancelled", "cancelled"]
        # Notes changed from outside: the conversation reads them again.
        note = await storage.working_memory_store.append("a", "a note")
        assert await agent.archive_memory("a", [note.id]) == 1
        await agent.send("a", "hello")
        # Toolsets, as the supervisor sees them.
        await agent.send("b", "toolset")
        assert [s.active for s in agent.toolset_status("b")] == [True]
        # A pause for approval, a query, a decision.
        paused = await agent.send("c", "pay")
        assert paused.status == "awaiting_approval"
        [approval] = await agent.pending_approvals("c")
        assert (await agent.decide("c", approval.call.id, approve=True)).text == "done"
        # A delete, then idle retirement (the toolset keeps "b" alive meanwhile).
        assert await agent.delete_conversation("a")
        await trio.sleep(45)
        assert agent.live_conversations == 1
        await trio.sleep(60)
        assert agent.live_conversations == 0
        # A turn running when the block ends: interrupted once the grace is over.
        outcomes.clear()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(outcome_of, agent.send("d", "wait 1000"))
            await trio.testing.wait_all_tasks_blocked()
            agent.close(grace=5)
        assert outcomes == ["interrupted"]
    assert foreign_writes == []
    for cid in ("b", "c", "d"):
        assert_valid_history(await stored(storage, cid))


def _handle(size: int = 4) -> tuple[ConversationHandle, trio.MemoryReceiveChannel[Request]]:
    sender, receiver = trio.open_memory_channel[Request](size)
    return ConversationHandle("c", sender), receiver


def _turn(key: str | None = None) -> NewTurn:
    return NewTurn(text="hi", idempotency_key=key, reply=Reply())


async def test_backlog_counts_queued_requests_and_blocked_senders() -> None:
    handle, inbox = _handle(size=1)
    assert handle.backlog == 0
    handle.mailbox.send_nowait(_turn())
    assert handle.backlog == 1
    async with trio.open_nursery() as nursery:
        nursery.start_soon(handle.mailbox.send, _turn())
        await trio.testing.wait_all_tasks_blocked()
        assert handle.backlog == 2, "a sender waiting for room is queued too"
        await inbox.receive()
    assert handle.backlog == 1


async def test_cancel_marks_queued_turns_and_cancels_only_a_matching_running_one() -> None:
    handle, _ = _handle()
    running, first, second, delete = (
        _turn("k0"),
        _turn("k1"),
        _turn(None),
        Delete(idle_before=None, reply=Reply[bool]()),
    )
    for request in (running, first, second, delete):
        handle.sent(request)
    assert handle.outstanding == (running, first, second), "a delete is no turn"
    with trio.CancelScope() as scope:
        handle.scope, handle.running, handle.running_key = scope, running, "k0"
        assert handle.in_progress("k0") and handle.in_progress("k1")
        assert handle.cancel("k1") == 1
        assert first.reply.cancelled and not second.reply.cancelled
        assert not scope.cancel_called, "another key's turn runs"
        assert not handle.in_progress("k1")
        assert handle.cancel() == 2
        assert scope.cancel_called and second.reply.cancelled
        assert not running.reply.cancelled, "the running one is cancelled by its scope"
        assert handle.cancel() == 0, "nothing is cancelled twice"
        await trio.lowlevel.checkpoint()
    assert scope.cancelled_caught


async def test_a_turn_leaves_the_outstanding_queue_when_its_caller_is_done() -> None:
    handle, _ = _handle()
    first, second = _turn(), _turn()
    handle.sent(first)
    handle.sent(second)
    handle.forget(first)
    assert handle.outstanding == (second,)
    handle.forget(first)  # twice: nothing happens
    handle.forget(second)
    assert handle.outstanding == ()


async def test_the_agent_keeps_no_answered_turn_alive(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Once its caller has the result, nothing the agent holds keeps a turn's
    request (nor its result) alive: an idle conversation costs no more."""
    async with open_chat_agent(model=ScriptedModel(respond), storage=in_memory_storage()) as a:
        await a.send("c", "hello")
        async with a.stream("c", "again") as events:
            assert [e async for e in events]
        assert a._registry.handles["c"].outstanding == ()


async def test_idle_for_says_busy_for_every_reason_to_live() -> None:
    handle, _ = _handle()
    handle.last_active = 10.0
    assert handle.idle_for(25.0) == 15.0
    handle.keep_until = 30.0  # a toolset is active until then
    assert handle.idle_for(25.0) == 0.0
    assert handle.idle_for(31.0) == 21.0
    handle.keep_until = math.inf  # calls wait for a decision that may time out
    assert handle.idle_for(1e9) == 0.0
    handle.keep_until = -math.inf
    handle.optional = (trio.CancelScope(),)  # a summary runs beside it
    assert handle.idle_for(100.0) == 0.0
    handle.optional = ()
    handle.mailbox.send_nowait(_turn())
    assert handle.idle_for(100.0) == 0.0
    handle.toolsets = {"dice": 50.0}
    assert handle.expires_in("dice", 20.0) == 30.0
    assert handle.expires_in("dice", 50.0) is None
    assert handle.expires_in("other", 20.0) is None


async def test_interrupt_cancels_the_running_turn_and_the_work_beside_it() -> None:
    handle, _ = _handle()
    beside = trio.CancelScope()
    handle.optional = (beside,)
    with trio.CancelScope() as scope:
        handle.scope = scope
        handle.interrupt()
        await trio.lowlevel.checkpoint()
    assert scope.cancelled_caught and beside.cancel_called and handle.interrupted

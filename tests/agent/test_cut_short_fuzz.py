"""Turns with several tool calls, cut short at a random moment, then continued.

Hypothesis draws one model answer of 1-5 calls (each tool's delay, whether it
raises, whether it is sequential, idempotent, needs approval and is then
approved), ``max_parallel_tools``, ``tool_timeout``, how long the model
takes, the moment of the cut on trio's MockClock, and its kind: ``cancel``
(``agent.cancel``), ``close`` (``agent.close(grace=...)``, a grace of 0-2 s:
a turn still running then is interrupted, as leaving ``open_chat_agent``'s
block past its grace does) or ``outer`` (the block left by a cancellation:
the agent's nursery cancelled); the cut turn is sent or streamed. The agent
is then reopened on the same storage (a SQLite file, or one in-memory
bundle) and the conversation goes on. What must hold whatever the moment:

- the stored history is valid: each call's results come right after its
  assistant message, one per call, none twice, those of the calls that
  needed no approval in call order; only a paused turn's calls (each needing
  approval) may lack one, and nothing follows them;
- ``cancel`` returns the number of callers that hear ``cancelled``, and a
  cancelled turn is neither resumed nor found paused after the reopen; an
  ``interrupted`` one is resumed (or was done), an ``unavailable`` one
  stored nothing;
- every result a caller was given (``send``, ``decide``) is stored as given,
  and the reopen changes nothing already stored;
- a call whose tool is not idempotent starts only once its call is stored
  and never runs twice, a denied one never runs, and a result claiming
  success comes from a run that succeeded;
- a streamed turn ends once, and each call it told finished has that result
  stored;
- a keyed retry of the cut turn, and the next ``send``, succeed.

Time is a MockClock with autojump; nothing sleeps for real. Found this way:
a cancel while a pause committed left a turn that came back paused after a
restart (``test_cancel_turns``), a close before a turn's message was stored
told its caller the turn would resume (``test_close``), a call that
returned as the turn was cut was answered as stopped (``test_parallel_tools``),
and a denial cut before the store took it left its call without a result,
answered on the next load as lost (``test_cancel_turns``).
"""

from __future__ import annotations

import math
import shutil
import tempfile
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from unittest import mock

import attrs
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik import (
    AgentikError,
    ChatAgent,
    Message,
    ModelRequest,
    ModelResponse,
    NamedTool,
    Role,
    ToolCall,
    TurnError,
    TurnResult,
    open_chat_agent,
)
from agentik.agent import (
    ToolCallFinished,
    ToolCallStarted,
    TurnEvent,
    TurnFailed,
    TurnFinished,
    _turn_writes,
)
from agentik.agent._turn_events import INTERRUPTED, STOPPED
from agentik.models import ScriptedModel
from agentik.storage import StorageBundle
from agentik.testing import history
from tests.agent.helpers import assert_valid_history
from tests.reliability.helpers import Backend


@attrs.frozen
class Call:
    """One call of the model's answer, and its tool ``t<i>``."""

    delay: int
    raises: bool
    sequential: bool
    idempotent: bool
    approval: bool
    approve: bool


@attrs.frozen
class Case:
    calls: tuple[Call, ...]
    max_parallel: int
    tool_timeout: int
    model_delay: int
    cut_at: float
    cut: str
    """``cancel``, ``close``, or ``outer`` (the agent's block cancelled)."""
    backend: str
    retry: bool
    """After the reopen, retry the cut turn with its idempotency key first."""
    grace: float = 0
    """A ``close``'s grace: the turn still running then is interrupted."""
    stream: bool = False
    """The cut turn is streamed (``agent.stream``), not sent."""


@st.composite
def cases(draw: st.DrawFn) -> Case:
    calls = draw(
        st.lists(
            st.builds(
                Call,
                delay=st.integers(0, 6),
                raises=st.booleans(),
                sequential=st.booleans(),
                idempotent=st.booleans(),
                approval=st.booleans(),
                approve=st.booleans(),
            ),
            min_size=1,
            max_size=5,
        )
    )
    return Case(
        calls=tuple(calls),
        max_parallel=draw(st.integers(1, 4)),
        tool_timeout=draw(st.integers(1, 8)),
        model_delay=draw(st.integers(0, 2)),
        # Halves too: a cut may land exactly when a call or the model ends.
        cut_at=draw(st.integers(0, 36)) / 2,
        cut=draw(st.sampled_from(["cancel", "close", "outer"])),
        backend=draw(st.sampled_from(["memory", "sqlite"])),
        retry=draw(st.booleans()),
        grace=draw(st.sampled_from([0, 0, 0.5, 2])),
        stream=draw(st.booleans()),
    )


ANSWER = "go"
KEY = "go-key"


@attrs.define
class World:
    """What the tools and the model saw, across both agents."""

    case: Case
    runs: list[int] = attrs.Factory(list)
    """Per call, how many times its tool started."""
    ended: list[int] = attrs.Factory(list)
    """Per call, how many times its tool returned its result."""
    storage: StorageBundle | None = None
    """The storage the agent of the moment runs on."""
    unwritten: list[int] = attrs.Factory(list)
    """Calls not idempotent whose tool found its call not stored as it started."""

    def __attrs_post_init__(self) -> None:
        self.runs = [0] * len(self.case.calls)
        self.ended = [0] * len(self.case.calls)

    def tools(self) -> list[NamedTool]:
        return [self._tool(i, c) for i, c in enumerate(self.case.calls)]

    def _tool(self, i: int, spec: Call) -> NamedTool:
        async def handler(arguments: dict[str, object]) -> str:
            self.runs[i] += 1
            if not spec.idempotent:  # write-ahead: its call is stored before it runs
                assert self.storage is not None
                stored = await history(self.storage, "c")
                if f"c{i}" not in {c.id for m in stored for c in m.tool_calls}:
                    self.unwritten.append(i)
            await trio.sleep(spec.delay)
            if spec.raises:
                raise ValueError("boom")
            self.ended[i] += 1
            return f"t{i} ok"

        return NamedTool(
            f"t{i}",
            "Work.",
            {"type": "object"},
            handler,
            sequential=spec.sequential,
            idempotent=spec.idempotent,
            requires_approval=spec.approval,
        )

    def answer(self) -> ModelResponse:
        return ModelResponse(
            tool_calls=tuple(ToolCall(f"c{i}", f"t{i}", "{}") for i in range(len(self.case.calls)))
        )

    async def respond(self, request: ModelRequest) -> ModelResponse:
        await trio.sleep(self.case.model_delay)
        last = request.messages[-1]
        if last.role is Role.USER:
            return (
                self.answer()
                if last.content == ANSWER
                else ModelResponse(text=f"re: {last.content}")
            )
        return ModelResponse(text="done")

    def agent(self, storage: StorageBundle) -> AbstractAsyncContextManager[ChatAgent]:
        return open_chat_agent(
            model=ScriptedModel(self.respond),
            storage=storage,
            tools=self.tools(),
            builtin_tools=False,
            max_parallel_tools=self.case.max_parallel,
            tool_timeout=self.case.tool_timeout,
        )


@attrs.define
class Caller:
    """The person driving the cut turn: sends it, decides its calls (in call
    order, as each result lists them), and keeps what it was told."""

    world: World
    given: list[TurnResult] = attrs.Factory(list)
    """Every result returned (each acknowledged: its messages committed)."""
    error: str | None = None
    """The code of the ``TurnError`` that ended it, ``closed``, or None."""
    events: list[TurnEvent] = attrs.Factory(list)
    """What the stream told, when the turn was streamed."""
    heard_at: list[float] = attrs.Factory(list)
    """When it heard back (each result, and the end)."""

    async def run(self, agent: ChatAgent) -> None:
        calls = self.world.case.calls
        try:
            result = await (self._stream(agent) if self.world.case.stream else self._send(agent))
            if result is None:
                return
            self.given.append(result)
            self.heard_at.append(trio.current_time())
            while result.status == "awaiting_approval":
                call_id = result.approvals[0].call.id
                approve = calls[int(call_id[1:])].approve
                result = await agent.decide("c", call_id, approve=approve, reason="no")
                self.given.append(result)
                self.heard_at.append(trio.current_time())
        except TurnError as error:
            self.error = error.code
        except AgentikError:
            self.error = "closed"  # the agent closed before a send or a decide
        finally:
            self.heard_at.append(trio.current_time())

    async def _send(self, agent: ChatAgent) -> TurnResult:
        return await agent.send("c", ANSWER, idempotency_key=KEY)

    async def _stream(self, agent: ChatAgent) -> TurnResult | None:
        """The turn streamed: its result, or None once its ``TurnFailed`` came."""
        async with agent.stream("c", ANSWER, idempotency_key=KEY) as events:
            self.events = [event async for event in events]
        ends = [e for e in self.events if isinstance(e, TurnFinished | TurnFailed)]
        assert len(ends) == 1 and ends[0] is self.events[-1], "a stream ends once, last"
        end = ends[0]
        if isinstance(end, TurnFailed):
            self.error = end.code
            return None
        return end.result


def check_history(messages: list[Message], calls: tuple[Call, ...], *, paused: bool) -> None:
    """Stricter than ``assert_valid_history``: each call's results form one block
    right after its assistant message, the results of calls needing no approval
    first and in call order; a block may miss results only when the turn is
    paused (``paused``), for calls needing approval, at the end of history."""
    assert [m.seq for m in messages] == list(range(1, len(messages) + 1))
    i = 0
    while i < len(messages):
        message = messages[i]
        assert message.role is not Role.TOOL, f"result {message.seq} follows no call"
        i += 1
        if not message.tool_calls:
            continue
        ids = [c.id for c in message.tool_calls]
        block: list[str] = []
        while i < len(messages) and messages[i].role is Role.TOOL:
            call_id = messages[i].tool_call_id
            assert call_id in ids, f"result {messages[i].seq} answers {call_id!r}, not {ids}"
            assert call_id not in block, f"call {call_id!r} has two results"
            block.append(call_id)
            i += 1
        missing = [c for c in ids if c not in block]
        if missing:
            assert paused and i == len(messages), f"calls {missing} have no result"
            assert all(calls[int(c[1:])].approval for c in missing), missing
        plain = [c for c in block if not calls[int(c[1:])].approval]
        assert plain == sorted(plain, key=ids.index), f"results {block} not in call order"


def check_results(messages: list[Message], world: World) -> None:
    """Each result says what happened to its call."""
    case = world.case
    for m in messages:
        if m.role is not Role.TOOL:
            continue
        i = int((m.tool_call_id or "c")[1:])
        spec = case.calls[i]
        allowed = {STOPPED, INTERRUPTED}
        # On SQLite a tool that is not idempotent reads the store as it starts
        # (``World.unwritten``): the reader's thread lets the MockClock jump, so
        # its timeout may fire at any point.
        reads = case.backend == "sqlite" and not spec.idempotent
        if spec.delay >= case.tool_timeout or reads:  # a tie: either may win
            allowed.add(f"error: tool 't{i}' timed out after {case.tool_timeout} s")
        if spec.delay <= case.tool_timeout:
            allowed.add(
                f"error: tool 't{i}' failed: ValueError: boom" if spec.raises else f"t{i} ok"
            )
        if spec.approval:
            allowed |= {"denied: no", "denied: the user sent a new message"}
            allowed |= {"denied: the turn was cancelled"}
            allowed |= {f"error: not run: {r}" for r in ("the user sent a new message",)}
            allowed |= {"error: not run: the turn was cancelled"}
        assert m.content in allowed, (m.tool_call_id, m.content)
        if m.content == f"t{i} ok":
            assert world.ended[i] >= 1, f"call c{i} claims success without a run"
        if m.content.startswith("error: tool"):
            assert world.runs[i] >= 1, f"call c{i} claims a failed run without a run"
        if m.content in (STOPPED, INTERRUPTED):
            assert not world.ended[i], f"call c{i} finished, its result says it did not"


def check_told(messages: list[Message], caller: Caller) -> None:
    """Each call the stream told finished has that result stored, once (a
    call that returned keeps its result however the turn ends), and was
    told started first."""
    stored = {m.tool_call_id: m.content for m in messages if m.role is Role.TOOL}
    started: set[str] = set()
    for event in caller.events:
        if isinstance(event, ToolCallStarted):
            started.add(event.call.id)
        elif isinstance(event, ToolCallFinished):
            assert event.call.id in started, f"{event.call.id} finished, never started"
            kept = stored.get(event.call.id)
            assert kept == event.content, (event.call.id, event.content, kept)
    finished = [e.call.id for e in caller.events if isinstance(e, ToolCallFinished)]
    assert len(finished) == len(set(finished)), f"a call told finished twice: {finished}"


def check_given(messages: list[Message], caller: Caller) -> None:
    """Every message of every result a caller got is stored as it was given."""
    by_seq = {m.seq: m for m in messages}
    for result in caller.given:
        for m in result.messages:
            assert m.seq is not None
            kept = by_seq.get(m.seq)
            assert kept is not None, f"message {m.seq} of an acknowledged result is lost"
            assert (kept.role, kept.content, kept.tool_call_id) == (
                m.role,
                m.content,
                m.tool_call_id,
            ), f"message {m.seq} changed"


def paused_calls(messages: list[Message]) -> list[str]:
    """The calls without a result (a paused turn's), for assert_valid_history."""
    answered = {m.tool_call_id for m in messages if m.role is Role.TOOL}
    return [c.id for m in messages for c in m.tool_calls if c.id not in answered]


async def play(case: Case, place: Backend) -> None:
    world = World(case)
    caller = Caller(world)
    count: int | None = None

    async with place.open() as storage:
        world.storage = storage
        async with trio.open_nursery() as outside:  # the caller of an ``outer`` cut
            with trio.CancelScope() as block:
                async with world.agent(storage) as agent, trio.open_nursery() as inside:
                    (outside if case.cut == "outer" else inside).start_soon(caller.run, agent)
                    await trio.sleep_until(case.cut_at)
                    if case.cut == "cancel":
                        heard_before = caller.error is not None or (
                            caller.given and caller.given[-1].status == "finished"
                        )
                        count = await agent.cancel("c")
                        if heard_before:
                            assert count == 0, "cancel counted a turn that had ended"
                    elif case.cut == "close":
                        agent.close(grace=case.grace)
                    else:  # the agent's block left by a cancellation (its nursery's)
                        block.cancel()
        # No request after the cut: a restart finds what the store holds.
        after_cut = await history(storage, "c")
    if count is not None and count != (caller.error == "cancelled"):
        # A cancel that comes as the turn ends with no checkpoint left finds
        # nothing to stop (``Conversation._serve_in_scope``): counted, not cancelled.
        assert count == 1 and case.cut_at in caller.heard_at, (count, caller.error)
    if case.cut == "close":
        assert caller.error in (None, "interrupted", "unavailable", "closed"), caller.error
        told_again = caller.error == "unavailable" or (
            caller.error == "closed" and not caller.given
        )
        if told_again:  # told to send it again: it must not be stored
            assert ANSWER not in [m.content for m in after_cut if m.role is Role.USER]
    elif case.cut == "outer":
        assert caller.error in (None, "cancelled", "closed"), caller.error
    else:
        assert caller.error in (None, "cancelled"), caller.error
    check_history(after_cut, case.calls, paused=True)
    assert_valid_history(after_cut, awaiting=paused_calls(after_cut))
    check_given(after_cut, caller)

    async with place.open() as storage:
        world.storage = storage
        async with world.agent(storage) as agent:
            pending = await agent.pending_approvals("c")
            told = caller.given[-1] if caller.given else None
            if told is not None and told.status == "awaiting_approval":
                # A decision cut short may or may not have run: still paused or not.
                assert {a.call.id for a in pending} <= {a.call.id for a in told.approvals}
            elif caller.error == "cancelled":
                assert pending == (), "a cancelled turn came back paused"
            if case.retry and after_cut:
                again = await agent.send("c", ANSWER, idempotency_key=KEY)
                assert again.messages[0].seq == 1, "the retry began a second turn"
            nxt = await agent.send("c", "next")
            assert nxt.status == "finished"
            assert nxt.text == "re: next"
            resumed = agent.stats.turns_resumed
        final = await history(storage, "c")

    paused = told is not None and told.status == "awaiting_approval"
    if caller.error == "cancelled" and not case.retry and not paused:
        assert resumed == 0, "a cancelled turn was resumed"
    if caller.error == "interrupted":  # resumed (or done as it was cut): not left open
        go = next(i for i, m in enumerate(final) if m.content == ANSWER and m.role is Role.USER)
        ends = final[go + 1 :][: [m.role for m in final[go + 1 :]].index(Role.USER)]
        assert (ends[-1].role is Role.ASSISTANT and not ends[-1].tool_calls) or any(
            m.content == "denied: the user sent a new message" for m in ends
        ), "an interrupted turn was neither resumed nor superseded"
    check_history(final, case.calls, paused=False)
    assert_valid_history(final)
    check_given(final, caller)
    check_told(final, caller)
    check_results(final, world)
    assert _same_prefix(final, after_cut), "the reopen changed what was stored"
    assert [m.content for m in final if m.role is Role.USER].count(ANSWER) <= 1
    assert world.unwritten == [], "a call ran before it was stored"
    for i, spec in enumerate(case.calls):
        # Twice only when the close interrupted it and the reopen ran it again.
        most = 2 if spec.idempotent and case.cut == "close" else 1
        assert world.runs[i] <= most, f"call c{i} ran {world.runs[i]} times"
        if spec.approval and not spec.approve:
            assert world.runs[i] == 0, f"denied call c{i} ran"


def _same_prefix(final: list[Message], before: list[Message]) -> bool:
    return [(m.seq, m.role, m.content, m.tool_call_id) for m in final[: len(before)]] == [
        (m.seq, m.role, m.content, m.tool_call_id) for m in before
    ]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_a_turn_cut_short_keeps_history_valid_and_goes_on(case: Case) -> None:
    folder = Path(tempfile.mkdtemp(prefix="cut-short-"))
    # While SQLite's writer thread works, every task waits and the MockClock
    # jumps to the next deadline: the clean-up bound (10 real seconds), any
    # finite one, would pass in no real time, and a cancelled turn's clean-up
    # give up before its writes commit.
    unbounded = mock.patch.object(_turn_writes, "CLEANUP_SECONDS", math.inf)
    try:
        place = Backend(case.backend, folder / "db")
        with unbounded:
            trio.run(play, case, place, clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        shutil.rmtree(folder, ignore_errors=True)

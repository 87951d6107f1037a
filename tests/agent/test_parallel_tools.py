"""The tool calls of one model answer run in parallel, through a real agent.

Time is trio's MockClock (``autojump_clock``): a tool that sleeps 1 s takes
exactly 1 s of the clock, so "two calls of 1 s take 1 s" is an equality.
Whatever order the calls finish in, their results are recorded in call
order; everything that holds for one call holds for each: write-ahead,
``tool_timeout``, approval, streaming events, cancellation, activation.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from agentik import (
    ChatAgent,
    Message,
    ModelRequest,
    ModelResponse,
    NamedTool,
    Role,
    StoreError,
    ToolCall,
    TurnError,
    open_chat_agent,
    tool,
)
from agentik.agent import ToolCallFinished, ToolCallStarted, TurnFinished
from agentik.agent._turn_events import STOPPED
from agentik.models import ScriptedModel
from agentik.storage import Pending, in_memory_storage
from agentik.toolsets import ToolsetContribution
from tests.agent.helpers import assert_valid_history, stored
from tests.agent.test_resume import RUNS, lookup, send_mail, summarize
from tests.reliability.helpers import BACKENDS, Backend, Gate, GatedMessageStore, gated

Log = list[tuple[str, str, float]]


def sleeper(
    name: str, log: Log, *, sequential: bool = False, requires_approval: bool = False
) -> NamedTool:
    """A tool that sleeps ``{"s": seconds}`` and logs when it starts, ends or
    is cancelled."""

    async def handler(arguments: dict[str, object]) -> str:
        seconds = arguments.get("s", 1)
        assert isinstance(seconds, int | float)
        log.append(("start", name, trio.current_time()))
        try:
            await trio.sleep(seconds)
        except trio.Cancelled:
            log.append(("cancelled", name, trio.current_time()))
            raise
        log.append(("end", name, trio.current_time()))
        return f"{name} slept {seconds:g}"

    return NamedTool(
        name,
        "Sleep.",
        {"type": "object", "properties": {"s": {"type": "number"}}},
        handler,
        sequential=sequential,
        requires_approval=requires_approval,
    )


def calls(*specs: tuple[str, float]) -> ModelResponse:
    """One answer calling each ``(tool, seconds)``, ids c0, c1, …"""
    return ModelResponse(
        tool_calls=tuple(
            ToolCall(f"c{i}", name, f'{{"s": {seconds}}}')
            for i, (name, seconds) in enumerate(specs)
        )
    )


def then_summarize(first: ModelResponse) -> ScriptedModel:
    """Answers the user with ``first``, then the tool results with their texts."""

    def respond(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role is Role.USER:
            return first
        return summarize(request)

    return ScriptedModel(respond)


def results(history: list[Message]) -> list[tuple[str | None, str]]:
    return [(m.tool_call_id, m.content) for m in history if m.role is Role.TOOL]


async def test_two_calls_of_one_second_take_one_second(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: Log = []
    storage = in_memory_storage()
    answer = calls(("nap", 1), ("nap", 1))
    async with open_chat_agent(
        model=then_summarize(answer), storage=storage, tools=[sleeper("nap", log)]
    ) as agent:
        began = trio.current_time()
        result = await agent.send("c", "go")
        assert trio.current_time() - began == 1.0
    assert result.text == "nap slept 1 | nap slept 1"
    assert results(await stored(storage, "c")) == [("c0", "nap slept 1"), ("c1", "nap slept 1")]


async def test_ten_calls_take_two_seconds_five_at_a_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: Log = []
    async with open_chat_agent(
        model=then_summarize(calls(*[("nap", 1)] * 10)),
        storage=in_memory_storage(),
        tools=[sleeper("nap", log)],
        max_parallel_tools=5,
    ) as agent:
        began = trio.current_time()
        await agent.send("c", "go")
        assert trio.current_time() - began == 2.0
    starts = [t - began for kind, _, t in log if kind == "start"]
    assert starts == [0.0] * 5 + [1.0] * 5


async def test_one_at_a_time_runs_the_calls_in_turn(autojump_clock: trio.testing.MockClock) -> None:
    log: Log = []
    async with open_chat_agent(
        model=then_summarize(calls(("nap", 1), ("nap", 2))),
        storage=in_memory_storage(),
        tools=[sleeper("nap", log)],
        max_parallel_tools=1,
    ) as agent:
        began = trio.current_time()
        await agent.send("c", "go")
        assert trio.current_time() - began == 3.0


async def test_a_sequential_call_waits_for_the_calls_before_it_and_runs_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """a and b together (1 s), then the sequential s alone (1 s), then c and d (1 s)."""
    log: Log = []
    tools = [sleeper(n, log) for n in "abcd"] + [sleeper("s", log, sequential=True)]
    answer = calls(("a", 1), ("b", 1), ("s", 1), ("c", 1), ("d", 1))
    async with open_chat_agent(
        model=then_summarize(answer), storage=in_memory_storage(), tools=tools
    ) as agent:
        began = trio.current_time()
        await agent.send("c", "go")
        assert trio.current_time() - began == 3.0
    started = {name: t - began for kind, name, t in log if kind == "start"}
    assert started == {"a": 0.0, "b": 0.0, "s": 1.0, "c": 2.0, "d": 2.0}


async def test_results_are_recorded_in_call_order_whatever_order_they_finish_in(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Streamed, each call's start and finish are told as they happen; stored,
    the results follow the calls' order."""
    log: Log = []
    storage = in_memory_storage()
    events: list[object] = []
    async with open_chat_agent(
        model=then_summarize(calls(("nap", 3), ("nap", 2), ("nap", 1))),
        storage=storage,
        tools=[sleeper("nap", log)],
    ) as agent:
        began = trio.current_time()
        async with agent.stream("c", "go") as stream:
            async for event in stream:
                if isinstance(event, ToolCallStarted | ToolCallFinished):
                    events.append(
                        (type(event).__name__, event.call.id, trio.current_time() - began)
                    )
                if isinstance(event, TurnFinished):
                    final = event.result
    assert events == [
        ("ToolCallStarted", "c0", 0.0),
        ("ToolCallStarted", "c1", 0.0),
        ("ToolCallStarted", "c2", 0.0),
        ("ToolCallFinished", "c2", 1.0),
        ("ToolCallFinished", "c1", 2.0),
        ("ToolCallFinished", "c0", 3.0),
    ]
    assert results(await stored(storage, "c")) == [
        ("c0", "nap slept 3"),
        ("c1", "nap slept 2"),
        ("c2", "nap slept 1"),
    ]
    assert final.text == "nap slept 3 | nap slept 2 | nap slept 1"


async def test_the_timeout_holds_for_each_call(autojump_clock: trio.testing.MockClock) -> None:
    log: Log = []
    storage = in_memory_storage()
    async with open_chat_agent(
        model=then_summarize(calls(("nap", 100), ("nap", 1))),
        storage=storage,
        tools=[sleeper("nap", log)],
        tool_timeout=10,
    ) as agent:
        began = trio.current_time()
        await agent.send("c", "go")
        assert trio.current_time() - began == 10.0
    assert results(await stored(storage, "c")) == [
        ("c0", "error: tool 'nap' timed out after 10 s"),
        ("c1", "nap slept 1"),
    ]


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        # Every call still running: each is cancelled and answered stopped.
        ((1000, 1000, 1000), [STOPPED, STOPPED, STOPPED]),
        # c0 finished and was recorded; the others are stopped.
        ((1, 1000, 1000), ["nap slept 1", STOPPED, STOPPED]),
        # c1 finished first: its result waited for c0's and is recorded as it is.
        ((1000, 1, 1000), [STOPPED, "nap slept 1", STOPPED]),
    ],
)
async def test_a_cancelled_turn_cancels_every_call_and_answers_each(
    autojump_clock: trio.testing.MockClock, seconds: tuple[int, ...], expected: list[str]
) -> None:
    log: Log = []
    storage = in_memory_storage()
    answer = calls(*(("nap", s) for s in seconds))
    async with open_chat_agent(
        model=then_summarize(answer),
        storage=storage,
        tools=[sleeper("nap", log)],
        tool_timeout=5000,
    ) as agent:
        failed: list[TurnError] = []

        async def send() -> None:
            try:
                await agent.send("c", "go")
            except TurnError as exc:
                failed.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            await trio.sleep(10)
            assert await agent.cancel("c") == 1
        assert [e.code for e in failed] == ["cancelled"]
        history = await stored(storage, "c")
        assert_valid_history(history)
        assert [content for _, content in results(history)] == expected
        running = sum(1 for s in seconds if s > 10)
        assert [kind for kind, _, _ in log].count("cancelled") == running
        assert (await agent.send("c", "next")).status == "finished"


async def test_a_call_that_returned_as_the_turn_was_cancelled_keeps_its_result(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The cancel comes as a call returns, before the turn heard of its result
    (the call's task reports it at its next checkpoint): the call ran to its
    end (a mail was sent), so its result is recorded as it is, not ``stopped
    before this tool call finished``, which would have the model send it
    again. Found by tests/agent/test_cut_short_fuzz.py (a cancel at the
    instant a call ends)."""
    log: Log = []
    storage = in_memory_storage()
    agents: list[ChatAgent] = []

    async def send(arguments: dict[str, object]) -> str:
        await trio.sleep(1)
        agents[0]._registry.handles["c"].cancel()  # comes now: no checkpoint till the return
        return "sent"

    mail = NamedTool("mail", "Send a mail.", {"type": "object"}, send)
    async with open_chat_agent(
        model=then_summarize(calls(("mail", 1), ("nap", 100))),
        storage=storage,
        tools=[mail, sleeper("nap", log)],
    ) as agent:
        agents.append(agent)
        with pytest.raises(TurnError, match="cancelled"):
            await agent.send("c", "go")
    history = await stored(storage, "c")
    assert_valid_history(history)
    assert results(history) == [("c0", "sent"), ("c1", STOPPED)]


async def test_calls_that_need_approval_pause_together_while_the_others_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The two calls needing approval wait; the two others run meanwhile (1 s
    together); once both are decided the approved one runs; results in call
    order among the calls that ran at once."""
    log: Log = []
    storage = in_memory_storage()
    tools = [sleeper("nap", log), sleeper("pay", log, requires_approval=True)]
    answer = calls(("pay", 1), ("nap", 1), ("pay", 1), ("nap", 1))
    async with open_chat_agent(model=then_summarize(answer), storage=storage, tools=tools) as agent:
        began = trio.current_time()
        paused = await agent.send("c", "go")
        assert trio.current_time() - began == 1.0
        assert paused.status == "awaiting_approval"
        assert [a.call.id for a in paused.approvals] == ["c0", "c2"]
        assert results(list(paused.messages)) == [("c1", "nap slept 1"), ("c3", "nap slept 1")]
        still = await agent.decide("c", "c2", approve=True)
        assert [a.call.id for a in still.approvals] == ["c0"]
        assert not [e for e in log if e[1] == "pay"], (
            "an approved call ran before the others were decided"
        )
        done = await agent.decide("c", "c0", approve=False, reason="no")
        assert done.status == "finished"
    history = await stored(storage, "c")
    assert_valid_history(history)
    assert results(history) == [
        ("c1", "nap slept 1"),
        ("c3", "nap slept 1"),
        ("c0", "denied: no"),
        ("c2", "pay slept 1"),
    ]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_no_call_that_is_not_idempotent_starts_before_the_calls_are_committed(
    backend: str, tmp_path: Path, nursery: trio.Nursery
) -> None:
    """With the commit of the calls' message held, the idempotent call runs and
    neither of the two others starts; released, both run."""
    RUNS.clear()
    place = Backend(backend, tmp_path / "db")
    gate = Gate()
    gate.arm("commit")
    answer = ModelResponse(
        text="calling",
        tool_calls=(
            ToolCall("c1", "lookup", "{}"),
            ToolCall("c2", "send_mail", "{}"),
            ToolCall("c3", "send_mail", "{}"),
        ),
    )
    async with place.open() as storage:
        held = GatedMessageStore(storage.message_store, gate, nursery, commit_content="calling")
        async with open_chat_agent(
            model=then_summarize(answer),
            storage=gated(storage, held),
            tools=[lookup, send_mail],
            builtin_tools=False,
        ) as agent:
            async with trio.open_nursery() as turns:
                turns.start_soon(agent.send, "conv", "work")
                await gate.reached.wait()
                await trio.testing.wait_all_tasks_blocked()
                assert RUNS == ["lookup"]
                gate.release()
        assert sorted(RUNS) == ["lookup", "send_mail", "send_mail"]
        history = await stored(storage, "conv")
    assert_valid_history(history)
    assert [m.tool_call_id for m in history if m.role is Role.TOOL] == ["c1", "c2", "c3"]


async def test_toolset_activations_take_effect_in_call_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A call of a toolset's tool switches it on, disable_toolset switches it
    off; in one answer, the last in call order wins."""

    @tool(idempotent=True)
    async def books_find() -> str:
        """Find a book."""
        await trio.sleep(1)
        return "found"

    books = ToolsetContribution("books", "Books.", (books_find,))
    answers = {
        "find then disable": ModelResponse(
            tool_calls=(
                ToolCall("a", "books_find", "{}"),
                ToolCall("b", "disable_toolset", '{"name": "books"}'),
            )
        ),
        "disable then find": ModelResponse(
            tool_calls=(
                ToolCall("c", "disable_toolset", '{"name": "books"}'),
                ToolCall("d", "books_find", "{}"),
            )
        ),
    }

    def respond(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        return answers[last.content] if last.role is Role.USER else summarize(request)

    async with open_chat_agent(
        model=ScriptedModel(respond), storage=in_memory_storage(), toolsets=[books]
    ) as agent:

        def active() -> bool:
            return any(s.name == "books" and s.active for s in agent.toolset_status("c"))

        await agent.send("c", "find then disable")
        assert not active()
        await agent.send("c", "disable then find")
        assert active()


async def test_conversation_tools_run_one_at_a_time_in_call_order() -> None:
    """The working-memory tools touch the conversation's notes: their calls run
    alone, so the notes are stored in call order."""
    answer = ModelResponse(
        tool_calls=tuple(
            ToolCall(f"n{i}", "memory_add", f'{{"text": "note {i}"}}') for i in range(4)
        )
    )
    storage = in_memory_storage()
    async with open_chat_agent(model=then_summarize(answer), storage=storage) as agent:
        await agent.send("c", "note these")
    notes = await storage.working_memory_store.list("c")
    assert [n.text for n in notes] == [f"note {i}" for i in range(4)]


class TestOptions:
    @pytest.mark.parametrize("value", [0, -1, 1.5, True, "8", None])
    async def test_max_parallel_tools_must_be_a_positive_integer(self, value: object) -> None:
        with pytest.raises(
            ValueError, match=rf"^max_parallel_tools must be a positive integer, got {value!r}$"
        ):
            async with open_chat_agent(
                model=ScriptedModel(lambda r: ModelResponse(text="x")),
                storage=in_memory_storage(),
                max_parallel_tools=value,  # type: ignore[arg-type]
            ):
                pass

    def test_sequential_must_be_a_bool(self) -> None:
        async def handler(arguments: dict[str, object]) -> str:
            return ""

        with pytest.raises(TypeError, match=r"'sequential' must be <class 'bool'>"):
            NamedTool("x", "X.", {"type": "object"}, handler, sequential="yes")  # type: ignore[arg-type]

    def test_tool_takes_sequential(self) -> None:
        @tool(sequential=True)
        async def alone() -> str:
            """Alone."""
            return ""

        @tool
        async def together() -> str:
            """Together."""
            return ""

        assert (alone.sequential, together.sequential) == (True, False)


class RefusingMessageStore(GatedMessageStore):
    """A real message store that refuses (``StoreError``) the submit of a tool
    result whose content is ``refuse_content``."""

    refuse_content: str = ""

    async def submit(
        self, conversation_id: str, message: Message, *, idempotency_key: str | None = None
    ) -> Pending[Message]:
        if message.role is Role.TOOL and message.content == self.refuse_content:
            raise StoreError("disk full")
        return await super().submit(conversation_id, message, idempotency_key=idempotency_key)


async def test_a_store_failure_while_calls_run_fails_the_turn_as_itself(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The store refuses the first call's result while the second still runs:
    the turn fails as a store failure (not a group of it and the cancelled
    call), the running call is cancelled, and the conversation goes on."""
    log: Log = []
    bundle = in_memory_storage()
    async with trio.open_nursery() as nursery:
        store = RefusingMessageStore(bundle.message_store, Gate(), nursery)
        store.refuse_content = "nap slept 1"
        async with open_chat_agent(
            model=then_summarize(calls(("nap", 1), ("nap", 100))),
            storage=gated(bundle, store),
            tools=[sleeper("nap", log)],
            tool_timeout=5000,
        ) as agent:
            with pytest.raises(TurnError) as failed:
                await agent.send("c", "go")
            assert failed.value.code == "store_error"
            assert isinstance(failed.value.__cause__, StoreError)
            assert ("cancelled", "nap", 1.0) in log
            store.refuse_content = ""
            assert (await agent.send("c", "again")).status == "finished"

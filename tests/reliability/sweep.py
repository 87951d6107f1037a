"""The commit-fault sweep's script and checks, shared by its backends
(``test_commit_fault_sweep.py``: SQLite through a faulty VFS;
``test_commit_fault_sweep_postgres.py``: PostgreSQL through a trigger that
runs at COMMIT).

The script exercises each kind of write a turn makes: a plain turn; a call
of a tool that is not idempotent (its call committed before it runs); two
calls of one answer running at once (``max_parallel_tools``); a call of an
idempotent tool; two calls that need approval (the pause, then a decision
for each: one approved, one denied, the approved call run by the last); a
typed answer (its output record); a turn with an idempotency key; a turn
paused, then superseded by a new message (its call denied, then the new
turn). The model and the tools wait until every write submitted so far is
committed before they act (``Ledger.settled``), except where ``Script`` says
(two batches of two writes, made on purpose), so the COMMITs fall the same
way every run and the k-th is always the same one (``FAILING_STEP``; each
backend's ``test_the_script_commits_the_same_way``).

What holds, whichever COMMIT fails (``check_commit_fails``):
1. the step that waits for it fails with ``store_error`` (a ``TurnError``,
   or the ``StoreError`` itself), the steps before it did not;
2. in the same process, the conversation's next request asks the model
   about the new message only (the failed turn is not resumed behind its
   caller) and no tool runs again: a call runs at most once, ever;
3. the history is valid (every call answered once, in order), in the same
   process and read from the store reopened, and holds every message of the
   steps acknowledged before the failure;
4. reopened, with a fresh agent, the conversation goes on.
"""

from __future__ import annotations

import collections
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import attrs
import trio
import trio.testing

from agentik import (
    AgentikError,
    Message,
    ModelRequest,
    ModelResponse,
    NamedTool,
    Role,
    StoreError,
    ToolCall,
    TurnError,
    TurnResult,
)
from agentik.agent import ChatAgent, open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import StorageBundle
from tests.reliability.helpers import check_history, history, shape


class Faults(Protocol):
    """A backend's way to fail the k-th COMMIT, and to hold one."""

    @property
    def commits(self) -> int:
        """COMMITs that wrote something so far, failed on purpose or not."""
        ...

    @property
    def injected(self) -> int:
        """COMMITs failed on purpose so far."""
        ...

    def fail_after(self, commits: int, fault: str) -> None:
        """Let ``commits`` COMMITs through, then fail the next one with ``fault``."""
        ...

    def hold(self) -> None:
        """Make the next COMMIT wait, in the writer's thread, until ``release()``."""
        ...

    def release(self) -> None:
        """Let the held COMMIT go on (or the next one not wait, if none is held yet)."""
        ...


Open = Callable[[], AbstractAsyncContextManager[StorageBundle]]


@attrs.define
class Ledger:
    """A message store that forwards everything to a real one and keeps the
    writes it accepted, so that ``settled`` can wait for all of them."""

    inner: object
    pending: collections.deque[object] = attrs.Factory(collections.deque)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def _keep(self, pending: object) -> object:
        if pending is not None:
            self.pending.append(pending)
        return pending

    def submit_nowait(self, *args: object) -> object:
        return self._keep(self.inner.submit_nowait(*args))  # type: ignore[attr-defined]

    async def submit(self, *args: object, **kwargs: object) -> object:
        return self._keep(await self.inner.submit(*args, **kwargs))  # type: ignore[attr-defined]

    async def submit_awaiting(self, *args: object) -> object:
        return self._keep(await self.inner.submit_awaiting(*args))  # type: ignore[attr-defined]

    async def submit_decision(self, *args: object, **kwargs: object) -> object:
        return self._keep(await self.inner.submit_decision(*args, **kwargs))  # type: ignore[attr-defined]

    async def submit_turn_failure(self, *args: object) -> object:
        return self._keep(await self.inner.submit_turn_failure(*args))  # type: ignore[attr-defined]

    async def submit_turn_output(self, *args: object) -> object:
        return self._keep(await self.inner.submit_turn_output(*args))  # type: ignore[attr-defined]

    async def settled(self) -> None:
        """Wait until every write accepted so far is committed (or failed)."""
        while self.pending:
            pending = self.pending.popleft()
            with contextlib.suppress(AgentikError):
                await pending.wait()  # type: ignore[attr-defined]


def calls(*ids: str) -> ModelResponse:
    """An answer calling, for each id, the tool its prefix names."""
    made = [ToolCall(i, TOOL_OF[i.split("-")[0]], json.dumps({"id": i})) for i in ids]
    return ModelResponse(tool_calls=tuple(made))


TOOL_OF = {"one": "note", "two": "note", "idem": "look", "pay": "pay", "wait": "pay"}

ANSWERS: dict[str, list[ModelResponse]] = {
    "one": [calls("one-1"), ModelResponse(text="one done")],
    "two": [calls("two-1", "two-2"), ModelResponse(text="two done")],
    "idem": [calls("idem-1"), ModelResponse(text="idem done")],
    "pay": [calls("pay-1", "pay-2"), ModelResponse(text="paid")],
    "typed": [ModelResponse(text='{"score": 3}')],
    "wait": [calls("wait-1"), ModelResponse(text="waited")],
}
"""The model's answers by the turn's user text, one per model call of the
turn; any other text is answered ``answer to <text>``."""


@attrs.frozen
class Score:
    score: int


@attrs.define
class Script:
    """The model and the tools of one agent; what they saw goes to ``asked``
    and ``ran``, kept across agents.

    Each waits for the writes so far to commit before it acts, with two
    exceptions that batch writes on purpose, the same way every run:
    - "two": the calls run at once and the second finishes first; its
      result waits for the first's (results are recorded in call order),
      and both commit together;
    - "idem": the COMMIT of the idempotent call's message is held while the
      call runs and the model answers at once, so its result and the answer
      commit together, after it.
    """

    ledger: Ledger
    faults: Faults
    nursery: trio.Nursery
    asked: list[str]
    """The user text of the turn of each model request."""
    ran: list[str]
    """The call id of each tool run."""
    started: int = 0
    both: trio.Event = attrs.Factory(trio.Event)
    second_done: trio.Event = attrs.Factory(trio.Event)
    answering: trio.Event = attrs.Factory(trio.Event)

    async def respond(self, request: ModelRequest) -> ModelResponse:
        messages = request.messages
        user_at = max(i for i, m in enumerate(messages) if m.role is Role.USER)
        text = messages[user_at].content
        self.asked.append(text)
        await trio.lowlevel.checkpoint()  # a model call takes time: others may run
        step = sum(1 for m in messages[user_at:] if m.role is Role.ASSISTANT)
        if text == "idem" and step == 1:
            self.answering.set()  # at once: its COMMIT is held
        else:
            await self.ledger.settled()
        if text == "idem" and step == 0:
            self.faults.hold()  # the next COMMIT: this answer's
        answers = ANSWERS.get(text, [ModelResponse(text=f"answer to {text}")])
        return answers[min(step, len(answers) - 1)]

    async def run(self, arguments: dict[str, object]) -> str:
        call_id = str(arguments["id"])
        self.ran.append(call_id)
        await trio.lowlevel.checkpoint()  # so does a tool
        if call_id.startswith("two-"):
            # The two calls of one answer run at once: each waits for the other.
            self.started += 1
            if self.started == 2:
                self.both.set()
            await self.both.wait()
        if call_id == "two-1":
            await self.second_done.wait()
            # The turn has the second's result, and waits for this one.
            await trio.testing.wait_all_tasks_blocked()
        elif call_id == "idem-1":
            # The writer holds its call's COMMIT (the writer is blocked in it).
            await trio.testing.wait_all_tasks_blocked()
            self.nursery.start_soon(self._release)
        else:
            await self.ledger.settled()
        if call_id == "two-2":
            self.second_done.set()
        return f"ran {call_id}"

    async def _release(self) -> None:
        """Once the idempotent call's result and the answer are queued, let
        the held COMMIT go."""
        await self.answering.wait()
        await trio.testing.wait_all_tasks_blocked()
        self.faults.release()

    def tools(self) -> list[NamedTool]:
        schema = {"type": "object"}
        return [
            NamedTool("note", "Note.", schema, self.run),
            NamedTool("look", "Look.", schema, self.run, idempotent=True),
            NamedTool("pay", "Pay.", schema, self.run, requires_approval=True),
        ]


@contextlib.asynccontextmanager
async def agent(
    bundle: StorageBundle, faults: Faults, asked: list[str], ran: list[str]
) -> AsyncIterator[ChatAgent]:
    ledger = Ledger(bundle.message_store)
    storage = attrs.evolve(bundle, message_store=ledger)
    async with trio.open_nursery() as nursery:
        script = Script(ledger, faults, nursery, asked, ran)
        async with open_chat_agent(
            model=ScriptedModel(script.respond),
            storage=storage,
            tools=script.tools(),
            builtin_tools=False,
            max_parallel_tools=2,
        ) as chat:
            yield chat
        nursery.cancel_scope.cancel()  # a release a cancelled step never reached


Step = Callable[[ChatAgent], Awaitable[TurnResult]]


def send(text: str, check: Callable[[TurnResult], bool], key: str | None = None) -> Step:
    async def step(chat: ChatAgent) -> TurnResult:
        output = Score if text == "typed" else None
        result = await chat.send("c", text, output=output, idempotency_key=key)
        assert check(result), result
        return result

    return step


def decide(call_id: str, approve: bool, check: Callable[[TurnResult], bool]) -> Step:
    async def step(chat: ChatAgent) -> TurnResult:
        result = await chat.decide("c", call_id, approve=approve, reason="no")
        assert check(result), result
        return result

    return step


def waiting(*ids: str) -> Callable[[TurnResult], bool]:
    def check(result: TurnResult) -> bool:
        return result.status == "awaiting_approval" and [a.call.id for a in result.approvals] == [
            *ids
        ]

    return check


def answered(text: str) -> Callable[[TurnResult], bool]:
    return lambda result: result.status == "finished" and result.text == text


STEPS: list[tuple[str, Step]] = [
    ("hello", send("hello", answered("answer to hello"))),
    ("one", send("one", answered("one done"))),
    ("two", send("two", answered("two done"))),
    ("idem", send("idem", answered("idem done"))),
    ("pay", send("pay", waiting("pay-1", "pay-2"))),
    ("approve pay-1", decide("pay-1", True, waiting("pay-2"))),
    ("deny pay-2", decide("pay-2", False, answered("paid"))),
    ("typed", send("typed", lambda r: r.output == Score(3))),
    ("keyed", send("keyed", answered("answer to keyed"), key="k1")),
    ("wait", send("wait", waiting("wait-1"))),
    ("skip", send("skip", answered("answer to skip"))),  # supersedes the paused turn
]


async def run_script(
    chat: ChatAgent, acknowledged: dict[int | None, Message] | None = None
) -> tuple[list[Message], str | None, Exception | None]:
    """Run the steps until one fails: the messages the steps before it
    acknowledged, the failed step's name and its error. ``acknowledged``,
    if given, is filled as they are (for a caller that cancels the script)."""
    if acknowledged is None:
        acknowledged = {}  # by seq: a paused turn's come again
    for name, step in STEPS:
        try:
            result = await step(chat)
        except AgentikError as error:  # TurnError, StoreError, or the agent closed
            return list(acknowledged.values()), name, error
        acknowledged.update((m.seq, m) for m in result.messages)
    return list(acknowledged.values()), None, None


FAILING_STEP = [
    *["hello"] * 2,  # the user message; the answer
    *["one"] * 4,  # the user message; the call (before it runs); its result; the answer
    *["two"] * 4,  # the user message; the two calls; their results, together; the answer
    *["idem"] * 3,  # the user message; the call (held); its result and the answer, together
    *["pay"] * 2,  # the user message; the calls and their pause
    "approve pay-1",  # the decision
    *["deny pay-2"] * 3,  # the decision and the denied call's result; pay-1's result; the answer
    *["typed"] * 3,  # the user message; the answer; the record that it is typed
    *["keyed"] * 2,  # the user message, with its idempotency key; the answer
    *["wait"] * 2,  # the user message; the call and its pause
    *["skip"] * 3,  # the waiting call denied (superseded); the user message; the answer
]
"""The step that waits for each COMMIT of the script, in order."""

COMMITS = len(FAILING_STEP)
"""The COMMITs the script makes (``check_the_script_commits_the_same_way``)."""


def shapes(messages: list[Message]) -> list[tuple[object, ...]]:
    return [(m.seq, *shape(m)) for m in messages]


async def check_the_script_commits_the_same_way(open_faulty: Open, faults: Faults) -> None:
    """Without a fault, every step answers as scripted, each call runs once,
    and the script makes ``COMMITS`` COMMITs (the same every run)."""
    asked: list[str] = []
    ran: list[str] = []
    async with open_faulty() as bundle:
        async with agent(bundle, faults, asked, ran) as chat:
            before = faults.commits
            acknowledged, failed, error = await run_script(chat)
            assert failed is None, error
            assert faults.commits - before == COMMITS
            assert await chat.pending_approvals("c") == ()
        final = await history(bundle, "c")
    check_history(final)
    told = {m.seq for m in acknowledged}
    assert [shape(m) for m in final if m.seq in told] == [shape(m) for m in acknowledged]
    # The paused turn's call, denied as "skip" superseded it: no step's message.
    assert [(m.role, m.tool_call_id) for m in final if m.seq not in told] == [(Role.TOOL, "wait-1")]
    assert sorted(ran) == ["idem-1", "one-1", "pay-1", "two-1", "two-2"]


async def check_commit_fails(
    k: int, fault: str, told: str, open_faulty: Open, reopen: Open, faults: Faults
) -> None:
    """The k-th COMMIT fails with ``fault``, the failed step's error says
    ``told``; then the four checks of the module's docstring. ``open_faulty``
    opens the store through ``faults``; ``reopen``, the same store as a new
    process would."""
    asked: list[str] = []
    ran: list[str] = []
    async with open_faulty() as bundle:
        async with agent(bundle, faults, asked, ran) as chat:
            faults.fail_after(k - 1, fault)
            acknowledged, failed, error = await run_script(chat)
            faults.release()  # a hold the failed step armed and did not reach
            # 1. the step waiting for the failed COMMIT, and it alone, failed so.
            assert faults.injected == 1
            assert failed == FAILING_STEP[k - 1], error
            assert isinstance(error, StoreError) or (
                isinstance(error, TurnError) and error.code == "store_error"
            ), error
            assert told in str(error)
            # 2. the next request is about itself alone; no tool runs again.
            asking, running = len(asked), len(ran)
            assert (await chat.send("c", "next")).text == "answer to next"
            assert asked[asking:] == ["next"]
            assert ran[running:] == []
            here = await history(bundle, "c")
            # No process stopped: no call is answered as if one had.
            assert [m for m in here if m.content.startswith("interrupted:")] == []
    await check_kept_and_goes_on(here, acknowledged, reopen, faults, asked, ran)


async def check_kept_and_goes_on(
    here: list[Message],
    acknowledged: list[Message],
    reopen: Open,
    faults: Faults,
    asked: list[str],
    ran: list[str],
) -> None:
    """Checks 3 and 4 once the next request ("next") answered in the same
    process and ``here`` is the history then: valid, holding what was
    acknowledged, the same reopened; a fresh agent goes on (resuming
    nothing: the model is asked about "after" alone); no tool ran since, and
    none ever twice."""
    running = len(ran)
    # 3. valid, and holding what was acknowledged, here and reopened.
    check_history(here, once=("next",))
    kept = set(shapes(here))
    assert [m for m in shapes(acknowledged) if m not in kept] == []
    async with reopen() as bundle:
        assert shapes(await history(bundle, "c")) == shapes(here)
        # 4. a fresh agent goes on.
        async with agent(bundle, faults, asked, ran) as chat:
            asking = len(asked)
            assert (await chat.send("c", "after")).text == "answer to after"
            assert asked[asking:] == ["after"]
        final = await history(bundle, "c")
    check_history(final, once=("next", "after"))
    assert shapes(final[: len(here)]) == shapes(here)
    assert ran[running:] == []
    assert [i for i, n in collections.Counter(ran).items() if n > 1] == []


async def check_resumes_and_goes_on(
    reopen: Open, acknowledged: list[Message], faults: Faults, asked: list[str], ran: list[str]
) -> None:
    """Checks 2-4 once a stop (a shutdown, a cancel) cut a turn short and the
    bundle closed: what was acknowledged is stored; a fresh agent resumes the
    turn (its waiting calls denied) and goes on; no call ran twice, but an
    idempotent one the stop cut short."""
    ran_before = len(ran)
    async with reopen() as bundle:
        stored = await history(bundle, "c")
        # 2. what was acknowledged is there.
        kept = set(shapes(stored))
        assert [m for m in shapes(acknowledged) if m not in kept] == []
        # 3. a fresh agent resumes the turn cut short and goes on.
        async with agent(bundle, faults, asked, ran) as chat:
            for approval in await chat.pending_approvals("c"):
                await chat.decide("c", approval.call.id, approve=False, reason="later")
            assert (await chat.send("c", "after")).text == "answer to after"
        final = await history(bundle, "c")
    check_history(final, once=("after",))
    assert shapes(final[: len(stored)]) == shapes(stored)
    # 4. no call ran twice, but an idempotent one the stop cut short.
    check_ran_once(ran, ran_before)


def check_ran_once(ran: list[str], before: int, idempotent: str = "idem-1") -> None:
    """No call ran twice, but ``idempotent`` once more after ``before`` (runs
    of the first process): a stop cut it short, and it is resumed."""
    twice = [i for i, n in collections.Counter(ran).items() if n > 1]
    assert twice in ([], [idempotent]), ran
    if twice:
        assert ran[before:].count(idempotent) == 1

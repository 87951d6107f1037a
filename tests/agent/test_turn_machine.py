"""The pure turn machine: each row of its table, then random walks (no trio).

The walks play the shell: they perform the machine's actions on a list that
stands for storage, answer ``CallModel`` and ``RunTool`` with random outcomes,
decide waiting calls at random, stop the turn at random, and crash it at a
random point to resume a fresh machine from what was "stored". After every
walk the invariants of the module docstring are checked on the stored history.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik._messages import Message, Role, ToolCall
from agentik.agent._turn_machine import (
    INTERRUPTED,
    STOPPED,
    AwaitApproval,
    Begin,
    CallModel,
    CallPlan,
    Decided,
    Fail,
    Finish,
    ModelAnswered,
    Record,
    RecordDecision,
    Refuse,
    Resume,
    RunTool,
    Stop,
    Superseded,
    ToolDone,
    TurnAction,
    TurnMachine,
    TurnState,
    TurnStateError,
    denied,
)


def call(i: int | str) -> ToolCall:
    return ToolCall(f"c{i}", "t", "{}")


def answer(*plans: CallPlan, text: str = "") -> ModelAnswered:
    return ModelAnswered(Message(Role.ASSISTANT, text, tuple(p.call for p in plans)), plans)


def tool_result(call_id: str, content: str) -> Message:
    return Message(Role.TOOL, content, tool_call_id=call_id)


def result(call_id: str, content: str) -> Message:
    return tool_result(call_id, content)


class TestTable:
    """One test per row of the module docstring's table."""

    def test_begin_records_the_user_message_with_its_key_then_calls_the_model(self) -> None:
        m = TurnMachine(max_steps=3)
        assert m.handle(Begin("hi", "k")) == [Record(Message(Role.USER, "hi"), "k"), CallModel()]
        plain = TurnMachine(max_steps=3).handle(Begin("hi"))
        assert plain == [Message(Role.USER, "hi"), CallModel()]
        assert (m.state, m.steps) == (TurnState.MODEL, 1)

    def test_an_answer_without_calls_finishes(self) -> None:
        m = TurnMachine(max_steps=3)
        m.handle(Begin("hi"))
        done = Message(Role.ASSISTANT, "hello")
        assert m.handle(ModelAnswered(done)) == [done, Finish("hello")]
        assert m.state is TurnState.FINISHED

    def test_calls_run_one_at_a_time_in_order_then_the_model_is_asked_again(self) -> None:
        m = TurnMachine(max_steps=3)
        m.handle(Begin("hi"))
        event = answer(CallPlan(call(1)), CallPlan(call(2)))
        assert m.handle(event) == [event.message, RunTool(call(1))]
        assert m.handle(ToolDone("c1", "one")) == [result("c1", "one"), RunTool(call(2))]
        assert m.handle(ToolDone("c2", "two")) == [result("c2", "two"), CallModel()]
        assert m.steps == 2

    def test_a_result_for_another_call_is_refused(self) -> None:
        m = TurnMachine(max_steps=3)
        m.handle(Begin("hi"))
        m.handle(answer(CallPlan(call(1)), CallPlan(call(2))))
        with pytest.raises(TurnStateError, match=r"^no result expected for call 'c2'$"):
            m.handle(ToolDone("c2", "two"))

    def test_the_step_limit_fails_once_every_call_has_its_result(self) -> None:
        m = TurnMachine(max_steps=1)
        m.handle(Begin("hi"))
        m.handle(answer(CallPlan(call(1))))
        actions = m.handle(ToolDone("c1", "one"))
        assert actions[0] == result("c1", "one")
        assert isinstance(actions[1], Fail) and actions[1].code == "step_limit"
        assert m.state is TurnState.FAILED

    def test_calls_needing_approval_wait_after_the_others_ran(self) -> None:
        m = TurnMachine(max_steps=3)
        m.handle(Begin("hi"))
        event = answer(CallPlan(call(1), needs_approval=True), CallPlan(call(2)))
        assert m.handle(event) == [Record(event.message, awaiting=("c1",)), RunTool(call(2))]
        assert m.handle(ToolDone("c2", "two")) == [result("c2", "two"), AwaitApproval([call(1)])]
        assert m.state is TurnState.APPROVAL

    def test_an_invalid_call_is_refused_in_order_and_nobody_is_asked(self) -> None:
        """A call whose arguments are invalid gets its error as its one result,
        where it stands among the calls that run; only valid calls wait."""
        m = TurnMachine(max_steps=3)
        m.handle(Begin("hi"))
        bad = CallPlan(call(1), needs_approval=True, invalid="error: bad amount")
        event = answer(CallPlan(call(0)), bad, CallPlan(call(2), True), CallPlan(call(3)))
        assert m.handle(event) == [Record(event.message, awaiting=("c2",)), RunTool(call(0))]
        assert m.handle(ToolDone("c0", "zero")) == [
            result("c0", "zero"),
            Refuse(call(1), result("c1", "error: bad amount")),
            RunTool(call(3)),
        ]
        assert m.handle(ToolDone("c3", "three")) == [
            result("c3", "three"),
            AwaitApproval([call(2)]),
        ]

    def test_only_invalid_calls_need_no_decision(self) -> None:
        """When every call needing approval is invalid, the turn never pauses."""
        m = TurnMachine(max_steps=3)
        m.handle(Begin("hi"))
        one = answer(CallPlan(call(1), True, invalid="error: x"))
        assert m.handle(one) == [
            one.message,
            Refuse(call(1), result("c1", "error: x")),
            CallModel(),
        ]
        assert m.state is TurnState.MODEL
        two = answer(CallPlan(call(2), invalid="error: y"), CallPlan(call(3), invalid="error: z"))
        assert m.handle(two) == [
            two.message,
            Refuse(call(2), result("c2", "error: y")),
            Refuse(call(3), result("c3", "error: z")),
            CallModel(),
        ]
        three = answer(CallPlan(call(4), True, invalid="error: w"))
        actions = m.handle(three)  # the step limit: every call still has its result
        assert actions[:2] == [three.message, Refuse(call(4), result("c4", "error: w"))]
        assert isinstance(actions[2], Fail) and actions[2].code == "step_limit"

    def test_approved_calls_run_once_every_waiting_call_is_decided(self) -> None:
        m = TurnMachine(max_steps=3)
        m.handle(Begin("hi"))
        m.handle(answer(CallPlan(call(1), needs_approval=True), CallPlan(call(2), True)))
        assert m.handle(Decided("c1", True)) == [
            RecordDecision("c1", True),
            AwaitApproval([call(2)]),
        ]
        assert m.handle(Decided("c2", False, "no")) == [
            RecordDecision("c2", False, "no", tool_result("c2", "denied: no")),
            RunTool(call(1)),
        ]
        assert m.handle(ToolDone("c1", "one")) == [result("c1", "one"), CallModel()]

    def test_deciding_twice_the_same_way_does_nothing_and_differently_is_refused(self) -> None:
        m = TurnMachine(max_steps=3)
        m.handle(Begin("hi"))
        m.handle(answer(CallPlan(call(1), True), CallPlan(call(2), True)))
        m.handle(Decided("c1", False))
        assert m.handle(Decided("c1", False)) == []
        with pytest.raises(TurnStateError, match=r"^call 'c1' was already denied$"):
            m.handle(Decided("c1", True))
        with pytest.raises(TurnStateError, match=r"^call 'c9' is not waiting for approval$"):
            m.handle(Decided("c9", True))

    def test_a_new_message_denies_every_waiting_call(self) -> None:
        m = TurnMachine(max_steps=3)
        m.handle(Begin("hi"))
        m.handle(answer(CallPlan(call(1), True), CallPlan(call(2), True)))
        reason = "the user sent a new message"
        assert m.handle(Superseded()) == [
            RecordDecision("c1", False, reason, tool_result("c1", denied(reason))),
            RecordDecision("c2", False, reason, tool_result("c2", denied(reason))),
        ]
        assert m.state is TurnState.SUPERSEDED

    def test_stop_answers_the_running_queued_and_waiting_calls_then_fails(self) -> None:
        m = TurnMachine(max_steps=3)
        m.handle(Begin("hi"))
        m.handle(answer(CallPlan(call(1)), CallPlan(call(2)), CallPlan(call(3), True)))
        assert m.handle(Stop("cancelled", "gone")) == [
            result("c1", STOPPED),
            result("c2", STOPPED),
            result("c3", STOPPED),
            Fail("cancelled", "gone"),
        ]

    def test_stop_while_the_model_is_asked_fails_at_once(self) -> None:
        m = TurnMachine(max_steps=3)
        m.handle(Begin("hi"))
        assert m.handle(Stop("model_error", "down")) == [Fail("model_error", "down")]

    def test_resume_reruns_idempotent_calls_and_answers_the_others(self) -> None:
        m = TurnMachine(max_steps=3)
        plans = [CallPlan(call(1)), CallPlan(call(2), idempotent=True)]
        assert m.handle(Resume(1, plans)) == [
            result("c1", INTERRUPTED),
            RunTool(call(2), again=True),
        ]
        assert m.handle(ToolDone("c2", "two")) == [result("c2", "two"), CallModel()]

    def test_resume_keeps_waiting_calls_waiting(self) -> None:
        m = TurnMachine(max_steps=3)
        plans = [CallPlan(call(1), True), CallPlan(call(2), True)]
        actions = m.handle(Resume(1, plans, awaiting=frozenset({"c1"}), approved=frozenset({"c2"})))
        # c2 was approved while c1 waited, so it never started: it runs later, once.
        assert actions == [AwaitApproval([call(1)])]
        assert m.handle(Decided("c1", True)) == [RecordDecision("c1", True), RunTool(call(2))]

    def test_resume_of_a_user_message_alone_calls_the_model(self) -> None:
        m = TurnMachine(max_steps=3)
        assert m.handle(Resume(0)) == [CallModel()]

    def test_resume_at_the_step_limit_fails_once_calls_are_answered(self) -> None:
        m = TurnMachine(max_steps=1)
        actions = m.handle(Resume(1, [CallPlan(call(1))]))
        assert actions[0] == result("c1", INTERRUPTED)
        assert isinstance(actions[1], Fail) and actions[1].code == "step_limit"

    @pytest.mark.parametrize("state", [TurnState.FINISHED, TurnState.FAILED])
    def test_nothing_happens_after_the_end(self, state: TurnState) -> None:
        m = TurnMachine(max_steps=3)
        m.handle(Begin("hi"))
        if state is TurnState.FINISHED:
            m.handle(ModelAnswered(Message(Role.ASSISTANT, "bye")))
        else:
            m.handle(Stop("cancelled", "x"))
        for event in (
            Begin("again"),
            Resume(0),
            ModelAnswered(Message(Role.ASSISTANT, "more")),
            ToolDone("c1", "x"),
            Superseded(),
            Stop("cancelled", "x"),
        ):
            with pytest.raises(TurnStateError, match=r"^a turn in state \w+ cannot take \w+$"):
                m.handle(event)
        assert m.state is state


# --- random walks -----------------------------------------------------------------


@attrs.define
class Shell:
    """Plays the conversation task. ``log`` is what was recorded, in order;
    ``committed`` how much of it is surely durable: the shell waits for the
    commit before it pauses, ends, or runs a call a person approved, so a
    crash keeps at least that much (and maybe more, as writes commit in order)."""

    log: list[Message | Record | RecordDecision | Refuse] = attrs.Factory(list)
    committed: int = 0
    runs: dict[str, int] = attrs.Factory(dict)
    plans: dict[str, CallPlan] = attrs.Factory(dict)
    model_calls: int = 0

    @property
    def stored(self) -> list[Message]:
        out: list[Message] = []
        for a in self.log:
            if isinstance(a, Message):
                out.append(a)
            elif isinstance(a, Record):
                out.append(a.message)
            elif a.result is not None:
                out.append(a.result)
        return out

    @property
    def refused(self) -> list[str]:
        return [a.call.id for a in self.log if isinstance(a, Refuse)]

    @property
    def decisions(self) -> dict[str, bool]:
        return {a.call_id: a.approve for a in self.log if isinstance(a, RecordDecision)}

    @property
    def awaiting(self) -> set[str]:
        waiting: set[str] = set()
        for a in self.log:
            if isinstance(a, Message):
                waiting.discard(a.tool_call_id or "")
            elif isinstance(a, Refuse):
                assert a.call.id not in waiting, "a refused call was waiting for a person"
            elif isinstance(a, Record):
                waiting.update(a.awaiting)
                waiting.discard(a.message.tool_call_id or "")
            else:
                waiting.discard(a.call_id)  # its result, if any, comes with it
        return waiting

    def perform(self, actions: list[TurnAction]) -> TurnAction | None:
        """Apply records; return the action that needs an answer (at most one,
        and always last)."""
        for i, action in enumerate(actions):
            if isinstance(action, Message | Record | RecordDecision | Refuse):
                if isinstance(action, RecordDecision):
                    assert action.call_id in self.awaiting
                if isinstance(action, Refuse):
                    assert self.plans[action.call.id].invalid is not None
                    assert action.result.tool_call_id == action.call.id
                self.log.append(action)
                continue
            assert i == len(actions) - 1, f"{action!r} is not the last action"
            if isinstance(action, RunTool):
                assert self.plans[action.call.id].invalid is None, "an invalid call ran"
                self.runs[action.call.id] = self.runs.get(action.call.id, 0) + 1
                if self.plans[action.call.id].needs_approval:
                    assert self.decisions.get(action.call.id) is True
                    self.committed = len(self.log)
            elif isinstance(action, CallModel):
                self.model_calls += 1
            else:
                self.committed = len(self.log)
            return action
        return None

    def crash(self, keep: int) -> None:
        self.log = self.log[: max(self.committed, min(keep, len(self.log)))]

    def resume_event(self, max_steps: int) -> Resume:
        """What a restarted shell reads back from storage."""
        stored = self.stored
        answered = {m.tool_call_id for m in stored if m.role is Role.TOOL}
        open_calls = [c for m in stored for c in m.tool_calls if c.id not in answered]
        steps = sum(1 for m in stored if m.role is Role.ASSISTANT)
        return Resume(
            min(steps, max_steps),
            [self.plans[c.id] for c in open_calls],
            awaiting=frozenset(self.awaiting),
            approved=frozenset(k for k, v in self.decisions.items() if v),
        )


flags_st = st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), max_size=3)
"""Per call: needs approval, idempotent, invalid arguments."""


def check_history(shell: Shell, waiting: set[str]) -> None:
    """Each recorded call has exactly one result, after it; only ``waiting``
    calls have none."""
    seen_calls: set[str] = set()
    results: dict[str, int] = {}
    for message in shell.stored:
        for c in message.tool_calls:
            assert c.id not in seen_calls
            seen_calls.add(c.id)
        if message.tool_call_id is not None:
            assert message.tool_call_id in seen_calls, "a result before its call"
            results[message.tool_call_id] = results.get(message.tool_call_id, 0) + 1
    assert all(n == 1 for n in results.values()), results
    assert seen_calls - results.keys() == waiting


class Crashed(Exception):
    pass


def drive(
    data: st.DataObject,
    machine: TurnMachine,
    shell: Shell,
    pending: TurnAction | None,
    crash_in: int | None,
) -> TurnAction | None:
    """Answer the machine's actions until the turn ends or is left waiting;
    raise ``Crashed`` after ``crash_in`` answers."""
    answers = 0
    while isinstance(pending, CallModel | RunTool | AwaitApproval):
        if crash_in is not None and answers >= crash_in:
            raise Crashed
        answers += 1
        event: object
        if isinstance(pending, CallModel):
            if data.draw(st.integers(0, 9)) == 0:
                event = Stop("model_error", "down")
            else:
                plans = []
                for needs_approval, idempotent, invalid in data.draw(flags_st):
                    c = call(len(shell.plans))
                    p = CallPlan(
                        c, needs_approval, idempotent, f"error: {c.id}" if invalid else None
                    )
                    shell.plans[p.call.id] = p
                    plans.append(p)
                event = answer(*plans, text="t")
        elif isinstance(pending, RunTool):
            stop = data.draw(st.integers(0, 9)) == 0
            event = Stop("cancelled", "stop") if stop else ToolDone(pending.call.id, "ok")
        else:
            choice = data.draw(st.integers(0, 5))
            if choice == 0:
                return pending  # left waiting
            if choice == 1:
                shell.perform(machine.handle(Superseded()))
                return None
            assert all(shell.plans[c.id].invalid is None for c in pending.calls)
            target = data.draw(st.sampled_from(pending.calls))
            event = Decided(target.id, data.draw(st.booleans()), "r")
        assert isinstance(
            event, Begin | Resume | ModelAnswered | ToolDone | Decided | Superseded | Stop
        )
        pending = shell.perform(machine.handle(event))
    return pending


@settings(max_examples=500, deadline=None)
@given(data=st.data(), max_steps=st.integers(1, 4), crashes=st.integers(0, 2))
def test_random_walks_keep_the_invariants(
    data: st.DataObject, max_steps: int, crashes: int
) -> None:
    machine = TurnMachine(max_steps=max_steps)
    shell = Shell()
    pending = shell.perform(machine.handle(Begin("hi", "k")))
    crashed = 0
    while True:
        crash_in = data.draw(st.integers(0, 8)) if crashes else None
        try:
            end = drive(data, machine, shell, pending, crash_in)
            break
        except Crashed:
            crashes -= 1
            crashed += 1
            shell.crash(data.draw(st.integers(0, len(shell.log))))
            if not shell.stored:
                return  # not even the user message was committed: no turn to resume
            last = shell.stored[-1]
            if last.role is Role.ASSISTANT and not last.tool_calls:
                end = Finish(last.content)  # it had finished: nothing to resume
                break
            machine = TurnMachine(max_steps=max_steps)
            pending = shell.perform(machine.handle(shell.resume_event(max_steps)))
    assert shell.model_calls <= max_steps * (crashed + 1)  # max_steps per run of the machine
    assert machine.steps <= max_steps
    if isinstance(end, AwaitApproval):
        assert machine.state is TurnState.APPROVAL
        # Open: the undecided calls, and approved ones that run once all are decided.
        # (An approved call a crash cut short before it ran was answered
        # ``interrupted`` on resume when it is not idempotent: not open.)
        answered = {m.tool_call_id for m in shell.stored if m.tool_call_id is not None}
        approved = {k for k, v in shell.decisions.items() if v} - set(shell.runs) - answered
        check_history(shell, shell.awaiting | approved)
        assert {c.id for c in end.calls} == shell.awaiting
    elif machine.state is not TurnState.NEW:
        check_history(shell, set())
    decisions = shell.decisions
    for call_id, n in shell.runs.items():
        # Once, and once more per crash for an idempotent call.
        assert n <= (1 + crashed if shell.plans[call_id].idempotent else 1), (call_id, n)
        assert decisions.get(call_id) is not False, "a denied call ran"
    if isinstance(end, Finish):
        assert shell.stored[-1].role is Role.ASSISTANT and not shell.stored[-1].tool_calls
    if isinstance(end, Finish | Fail) or machine.state is TurnState.SUPERSEDED:
        for event in (Begin("x"), ToolDone("nope", "x"), Stop("cancelled", "x")):
            with pytest.raises(TurnStateError):
                machine.handle(event)

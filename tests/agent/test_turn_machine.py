"""The pure turn machine: each row of its table, then random walks (no trio).

The walks play the shell: they perform the machine's actions on a list that
stands for storage, answer ``CallModel`` with random answers of several calls
and the running calls with ``ToolDone`` in a random order, decide waiting
calls at random, stop the turn at random, and crash it at a random point to
resume a fresh machine from what was "stored". After every walk the
invariants of the module docstring are checked on the stored history.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik._messages import Message, Role, ToolCall
from agentik.agent._turn_actions import (
    Activate,
    AskAgain,
    AwaitApproval,
    CallModel,
    Commit,
    Fail,
    Finish,
    Record,
    RecordDecision,
    Refuse,
    RunTool,
    TurnAction,
)
from agentik.agent._turn_events import (
    FAILURE_CODES,
    INTERRUPTED,
    STOPPED,
    Begin,
    CallPlan,
    Decided,
    Failure,
    MachineEvent,
    ModelAnswered,
    PolicyAnswer,
    Resume,
    Stop,
    Superseded,
    ToolDone,
    TurnState,
    TurnStateError,
    denied,
)
from agentik.agent._turn_machine import TRANSITIONS, TurnMachine


def call(i: int | str, name: str = "t") -> ToolCall:
    return ToolCall(f"c{i}", name, "{}")


def answer(*plans: CallPlan, text: str = "") -> ModelAnswered:
    return ModelAnswered(Message(Role.ASSISTANT, text, tuple(p.call for p in plans)), plans)


def result(call_id: str, content: str) -> Message:
    return Message(Role.TOOL, content, tool_call_id=call_id)


def cancelled(message: str = "gone") -> Stop:
    return Stop(Failure.CANCELLED, message)


def started(m: TurnMachine) -> TurnMachine:
    m.handle(Begin("hi"))
    return m


class TestTable:
    """One test per row of the module docstring's table."""

    def test_begin_records_the_user_message_with_its_key_then_calls_the_model(self) -> None:
        m = TurnMachine(max_steps=3)
        assert m.handle(Begin("hi", "k")) == [Record(Message(Role.USER, "hi"), "k"), CallModel()]
        plain = TurnMachine(max_steps=3).handle(Begin("hi"))
        assert plain == [Message(Role.USER, "hi"), CallModel()]
        assert (m.state, m.steps) == (TurnState.MODEL, 1)

    def test_an_answer_without_calls_finishes(self) -> None:
        m = started(TurnMachine(max_steps=3))
        done = Message(Role.ASSISTANT, "hello")
        assert m.handle(ModelAnswered(done)) == [done, Finish("hello")]
        assert m.state is TurnState.FINISHED

    def test_with_one_at_a_time_calls_run_in_order_then_the_model_is_asked_again(self) -> None:
        """The calls' message is committed before the first call that is not
        idempotent starts (write-ahead), once."""
        m = started(TurnMachine(max_steps=3))
        event = answer(CallPlan(call(1)), CallPlan(call(2)))
        assert m.handle(event) == [event.message, Commit(), RunTool(call(1))]
        assert m.handle(ToolDone("c1", "one")) == [result("c1", "one"), RunTool(call(2))]
        assert m.handle(ToolDone("c2", "two")) == [result("c2", "two"), CallModel()]
        assert m.steps == 2

    def test_calls_start_together_and_results_are_recorded_in_call_order(self) -> None:
        m = started(TurnMachine(max_steps=3, max_parallel=8))
        event = answer(CallPlan(call(1)), CallPlan(call(2)), CallPlan(call(3)))
        assert m.handle(event) == [
            event.message,
            Commit(),
            RunTool(call(1)),
            RunTool(call(2)),
            RunTool(call(3)),
        ]
        assert m.handle(ToolDone("c3", "three")) == []  # waits for c1 and c2
        assert m.handle(ToolDone("c1", "one")) == [result("c1", "one")]
        assert m.handle(ToolDone("c2", "two")) == [
            result("c2", "two"),
            result("c3", "three"),
            CallModel(),
        ]

    def test_at_most_max_parallel_calls_run_and_the_next_starts_as_one_ends(self) -> None:
        m = started(TurnMachine(max_steps=3, max_parallel=2))
        plans = [CallPlan(call(i), idempotent=True) for i in range(4)]
        assert m.handle(answer(*plans))[1:] == [RunTool(call(0)), RunTool(call(1))]
        assert m.handle(ToolDone("c1", "b")) == [RunTool(call(2))]
        assert m.handle(ToolDone("c0", "a")) == [
            result("c0", "a"),
            result("c1", "b"),
            RunTool(call(3)),
        ]

    def test_an_idempotent_call_need_not_wait_for_the_commit(self) -> None:
        m = started(TurnMachine(max_steps=3, max_parallel=8))
        event = answer(CallPlan(call(1), idempotent=True), CallPlan(call(2)))
        assert m.handle(event) == [event.message, RunTool(call(1)), Commit(), RunTool(call(2))]

    def test_a_sequential_call_runs_alone(self) -> None:
        """It waits for the calls before it, and the calls after it wait for it."""
        m = started(TurnMachine(max_steps=3, max_parallel=8))
        plans = [CallPlan(call(1)), CallPlan(call(2), sequential=True), CallPlan(call(3))]
        assert m.handle(answer(*plans))[1:] == [Commit(), RunTool(call(1))]
        assert m.handle(ToolDone("c1", "a")) == [result("c1", "a"), RunTool(call(2))]
        assert m.handle(ToolDone("c2", "b")) == [result("c2", "b"), RunTool(call(3))]

    def test_toolsets_are_activated_in_call_order_as_their_calls_start(self) -> None:
        m = started(TurnMachine(max_steps=3, max_parallel=8))
        plans = [
            CallPlan(call(1, "a_x"), idempotent=True, toolset="a"),
            CallPlan(call(2, "enable_toolset"), idempotent=True, sequential=True),
            CallPlan(call(3, "b_y"), invalid="error: bad", toolset="b"),
        ]
        assert m.handle(answer(*plans))[1:] == [Activate("a", "a_x"), RunTool(call(1, "a_x"))]
        assert m.handle(ToolDone("c1", "1")) == [
            result("c1", "1"),
            RunTool(call(2, "enable_toolset")),
        ]
        # The invalid call's name still switches its toolset on, when its turn comes.
        assert m.handle(ToolDone("c2", "2")) == [
            result("c2", "2"),
            Activate("b", "b_y"),
            Refuse(call(3, "b_y"), "error: bad"),
            result("c3", "error: bad"),
            CallModel(),
        ]

    def test_a_result_for_another_call_is_refused(self) -> None:
        m = started(TurnMachine(max_steps=3))
        m.handle(answer(CallPlan(call(1)), CallPlan(call(2))))
        with pytest.raises(TurnStateError, match=r"^no result expected for call 'c2'$"):
            m.handle(ToolDone("c2", "two"))
        m.handle(ToolDone("c1", "one"))
        with pytest.raises(TurnStateError, match=r"^no result expected for call 'c1'$"):
            m.handle(ToolDone("c1", "again"))

    def test_the_step_limit_fails_once_every_call_has_its_result(self) -> None:
        m = started(TurnMachine(max_steps=1))
        m.handle(answer(CallPlan(call(1))))
        actions = m.handle(ToolDone("c1", "one"))
        assert actions[0] == result("c1", "one")
        assert isinstance(actions[1], Fail) and actions[1].code == "step_limit"
        assert m.state is TurnState.FAILED

    def test_calls_needing_approval_wait_after_the_others_ran(self) -> None:
        m = started(TurnMachine(max_steps=3, max_parallel=8))
        event = answer(CallPlan(call(1), needs_approval=True), CallPlan(call(2)))
        assert m.handle(event) == [
            Record(event.message, awaiting=("c1",)),
            Commit(),
            RunTool(call(2)),
        ]
        assert m.handle(ToolDone("c2", "two")) == [result("c2", "two"), AwaitApproval([call(1)])]
        assert m.state is TurnState.APPROVAL

    @pytest.mark.parametrize(
        ("answer_", "waits"),
        [
            (PolicyAnswer.NONE, False),
            (PolicyAnswer.RUN, False),
            (PolicyAnswer.ASK, True),
            (PolicyAnswer.RAISED, True),  # fail closed
        ],
    )
    def test_the_policy_decides_for_a_valid_call_its_tool_does_not(
        self, answer_: PolicyAnswer, waits: bool
    ) -> None:
        assert CallPlan(call(1), policy=answer_).waits is waits
        assert CallPlan(call(1), True, policy=answer_).waits
        assert not CallPlan(call(1), True, invalid="error: x", policy=answer_).waits

    def test_an_invalid_call_is_refused_in_order_and_nobody_is_asked(self) -> None:
        """A call whose arguments are invalid gets its error as its one result,
        where it stands among the calls that run; only valid calls wait."""
        m = started(TurnMachine(max_steps=3))
        bad = CallPlan(call(1), needs_approval=True, invalid="error: bad amount")
        event = answer(CallPlan(call(0)), bad, CallPlan(call(2), True), CallPlan(call(3)))
        assert m.handle(event) == [
            Record(event.message, awaiting=("c2",)),
            Commit(),
            RunTool(call(0)),
        ]
        assert m.handle(ToolDone("c0", "zero")) == [
            result("c0", "zero"),
            Refuse(call(1), "error: bad amount"),
            result("c1", "error: bad amount"),
            RunTool(call(3)),
        ]
        assert m.handle(ToolDone("c3", "three")) == [
            result("c3", "three"),
            AwaitApproval([call(2)]),
        ]

    def test_only_invalid_calls_need_no_decision(self) -> None:
        """When every call needing approval is invalid, the turn never pauses."""
        m = started(TurnMachine(max_steps=3))
        one = answer(CallPlan(call(1), True, invalid="error: x"))
        assert m.handle(one) == [
            one.message,
            Refuse(call(1), "error: x"),
            result("c1", "error: x"),
            CallModel(),
        ]
        assert m.state is TurnState.MODEL
        two = answer(CallPlan(call(2), invalid="error: y"), CallPlan(call(3), invalid="error: z"))
        assert m.handle(two) == [
            two.message,
            Refuse(call(2), "error: y"),
            result("c2", "error: y"),
            Refuse(call(3), "error: z"),
            result("c3", "error: z"),
            CallModel(),
        ]
        three = answer(CallPlan(call(4), True, invalid="error: w"))
        actions = m.handle(three)  # the step limit: every call still has its result
        assert actions[:3] == [three.message, Refuse(call(4), "error: w"), result("c4", "error: w")]
        assert isinstance(actions[3], Fail) and actions[3].code == "step_limit"

    def test_approved_calls_run_once_every_waiting_call_is_decided(self) -> None:
        """And only once their approval is committed."""
        m = started(TurnMachine(max_steps=3))
        m.handle(answer(CallPlan(call(1), needs_approval=True), CallPlan(call(2), True)))
        assert m.handle(Decided("c1", True)) == [
            RecordDecision("c1", True),
            AwaitApproval([call(2)]),
        ]
        assert m.handle(Decided("c2", False, "no")) == [
            RecordDecision("c2", False, "no", result("c2", "denied: no")),
            Commit(),
            RunTool(call(1)),
        ]
        assert m.handle(ToolDone("c1", "one")) == [result("c1", "one"), CallModel()]

    def test_a_resumed_approved_call_waits_for_the_last_decision_to_commit(self) -> None:
        """Resumed with c1 approved and c2 waiting: denying c2 starts c1, but
        only after the denial is committed. Lost in a crash, the restart would
        read c2 as waiting and c1 as not started, and run c1 a second time
        (a Hypothesis random walk found it)."""
        m = TurnMachine(max_steps=3)
        plans = [CallPlan(call(1), needs_approval=True), CallPlan(call(2), needs_approval=True)]
        m.handle(Resume(1, plans, awaiting=frozenset({"c2"}), approved=frozenset({"c1"})))
        assert m.handle(Decided("c2", False, "no")) == [
            RecordDecision("c2", False, "no", result("c2", "denied: no")),
            Commit(),
            RunTool(call(1)),
        ]

    def test_approved_calls_run_together_in_call_order(self) -> None:
        m = started(TurnMachine(max_steps=3, max_parallel=8))
        m.handle(answer(*(CallPlan(call(i), True, idempotent=True) for i in range(3))))
        m.handle(Decided("c2", True))
        m.handle(Decided("c0", True))
        assert m.handle(Decided("c1", True))[1:] == [
            Commit(),  # the approvals, idempotent calls or not
            RunTool(call(0)),
            RunTool(call(1)),
            RunTool(call(2)),
        ]

    def test_deciding_twice_the_same_way_does_nothing_and_differently_is_refused(self) -> None:
        m = started(TurnMachine(max_steps=3))
        m.handle(answer(CallPlan(call(1), True), CallPlan(call(2), True)))
        m.handle(Decided("c1", False))
        assert m.handle(Decided("c1", False)) == []
        with pytest.raises(TurnStateError, match=r"^call 'c1' was already denied$"):
            m.handle(Decided("c1", True))
        with pytest.raises(TurnStateError, match=r"^call 'c9' is not waiting for approval$"):
            m.handle(Decided("c9", True))

    def test_a_new_message_denies_every_waiting_call(self) -> None:
        m = started(TurnMachine(max_steps=3))
        m.handle(answer(CallPlan(call(1), True), CallPlan(call(2), True), CallPlan(call(3), True)))
        m.handle(Decided("c3", True))
        reason = "the user sent a new message"
        assert m.handle(Superseded()) == [
            RecordDecision("c1", False, reason, result("c1", denied(reason))),
            RecordDecision("c2", False, reason, result("c2", denied(reason))),
            result("c3", f"error: not run: {reason}"),
        ]
        assert m.state is TurnState.SUPERSEDED

    def test_stop_answers_the_running_queued_and_waiting_calls_then_fails(self) -> None:
        m = started(TurnMachine(max_steps=3))
        m.handle(answer(CallPlan(call(1)), CallPlan(call(2)), CallPlan(call(3), True)))
        assert m.handle(cancelled()) == [
            result("c1", STOPPED),
            result("c2", STOPPED),
            result("c3", STOPPED),
            Fail("cancelled", "gone"),
        ]

    def test_an_interrupted_turn_answers_its_open_calls_as_a_crash_would(self) -> None:
        # The agent shut down past its grace: no failure of the turn, its calls
        # answered as at a restart (which then resumes it), the ones done kept.
        m = started(TurnMachine(max_steps=3, max_parallel=8))
        m.handle(answer(CallPlan(call(1)), CallPlan(call(2)), CallPlan(call(3), True)))
        assert m.handle(ToolDone("c2", "two")) == []
        assert m.handle(Stop(Failure.INTERRUPTED, "the agent shut down")) == [
            result("c1", INTERRUPTED),
            result("c2", "two"),
            result("c3", INTERRUPTED),
            Fail("interrupted", "the agent shut down"),
        ]

    def test_stop_records_the_results_it_holds_in_call_order(self) -> None:
        m = started(TurnMachine(max_steps=3, max_parallel=8))
        m.handle(answer(CallPlan(call(1)), CallPlan(call(2)), CallPlan(call(3))))
        assert m.handle(ToolDone("c2", "two")) == []
        assert m.handle(Stop(Failure.STORE, "disk")) == [
            result("c1", STOPPED),
            result("c2", "two"),
            result("c3", STOPPED),
            Fail("store_error", "disk"),
        ]

    def test_stop_records_the_results_of_calls_that_returned_unheard(self) -> None:
        # Cut between a call's return and its ToolDone: the call ran to its end,
        # so its result; a result for a call not running is ignored.
        m = started(TurnMachine(max_steps=3, max_parallel=8))
        m.handle(answer(CallPlan(call(1)), CallPlan(call(2)), CallPlan(call(3))))
        returned = (ToolDone("c2", "two"), ToolDone("c9", "nine"))
        assert m.handle(Stop(Failure.CANCELLED, "gone", returned=returned)) == [
            result("c1", STOPPED),
            result("c2", "two"),
            result("c3", STOPPED),
            Fail("cancelled", "gone"),
        ]

    def test_stop_while_the_model_is_asked_fails_at_once_with_the_reported_code(self) -> None:
        m = started(TurnMachine(max_steps=3))
        stop = Stop(Failure.REPORTED, "down", "model_error")
        assert m.handle(stop) == [Fail("model_error", "down")]

    @pytest.mark.parametrize("failure", [f for f in Failure if f is not Failure.REPORTED])
    def test_the_machine_names_the_code_of_what_the_shell_saw(self, failure: Failure) -> None:
        m = started(TurnMachine(max_steps=3))
        assert m.handle(Stop(failure, "x")) == [Fail(FAILURE_CODES[failure], "x")]

    def test_a_reported_failure_needs_its_code(self) -> None:
        m = started(TurnMachine(max_steps=3))
        with pytest.raises(TurnStateError, match=r"^a reported failure needs its code$"):
            m.handle(Stop(Failure.REPORTED, "x"))
        assert m.state is TurnState.MODEL

    def test_resume_reruns_idempotent_calls_and_answers_the_others(self) -> None:
        m = TurnMachine(max_steps=3)
        plans = [CallPlan(call(1)), CallPlan(call(2), idempotent=True)]
        assert m.handle(Resume(1, plans)) == [
            result("c1", INTERRUPTED),
            RunTool(call(2), again=True),
        ]
        assert m.handle(ToolDone("c2", "two")) == [result("c2", "two"), CallModel()]

    def test_resume_records_results_in_call_order(self) -> None:
        m = TurnMachine(max_steps=3, max_parallel=8)
        plans = [CallPlan(call(1), idempotent=True), CallPlan(call(2))]
        assert m.handle(Resume(1, plans)) == [RunTool(call(1), again=True)]
        assert m.handle(ToolDone("c1", "one")) == [
            result("c1", "one"),
            result("c2", INTERRUPTED),
            CallModel(),
        ]

    def test_resume_without_rerun_answers_every_open_call(self) -> None:
        m = TurnMachine(max_steps=3, rerun=False)
        plans = [CallPlan(call(1), idempotent=True)]
        assert m.handle(Resume(1, plans)) == [result("c1", INTERRUPTED), CallModel()]

    def test_resume_keeps_waiting_calls_waiting(self) -> None:
        m = TurnMachine(max_steps=3)
        plans = [CallPlan(call(1), True), CallPlan(call(2), True)]
        actions = m.handle(Resume(1, plans, awaiting=frozenset({"c1"}), approved=frozenset({"c2"})))
        # c2 was approved while c1 waited, so it never started: it runs later,
        # once, in call order.
        assert actions == [AwaitApproval([call(1)])]
        assert m.handle(Decided("c1", True)) == [
            RecordDecision("c1", True),
            Commit(),
            RunTool(call(1)),
        ]
        assert m.handle(ToolDone("c1", "one")) == [result("c1", "one"), RunTool(call(2))]

    def test_resume_of_a_user_message_alone_calls_the_model(self) -> None:
        m = TurnMachine(max_steps=3)
        assert m.handle(Resume(0)) == [CallModel()]

    def test_resume_at_the_step_limit_fails_once_calls_are_answered(self) -> None:
        for stored_steps in (1, 5):  # 5: the limit was lowered since
            m = TurnMachine(max_steps=1)
            actions = m.handle(Resume(stored_steps, [CallPlan(call(1))]))
            assert actions[0] == result("c1", INTERRUPTED)
            assert isinstance(actions[1], Fail) and actions[1].code == "step_limit"

    @pytest.mark.parametrize("state", [TurnState.FINISHED, TurnState.FAILED])
    def test_nothing_happens_after_the_end(self, state: TurnState) -> None:
        m = started(TurnMachine(max_steps=3))
        if state is TurnState.FINISHED:
            m.handle(ModelAnswered(Message(Role.ASSISTANT, "bye")))
        else:
            m.handle(cancelled("x"))
        for event in (
            Begin("again"),
            Resume(0),
            ModelAnswered(Message(Role.ASSISTANT, "more")),
            ToolDone("c1", "x"),
            Decided("c1", True),
            Superseded(),
            cancelled("x"),
        ):
            with pytest.raises(TurnStateError, match=r"^a turn in state \w+ cannot take \w+$"):
                m.handle(event)
        assert m.state is state

    def test_the_table_names_a_method_for_every_row(self) -> None:
        for (state, event), (method, next_states) in TRANSITIONS.items():
            assert callable(getattr(TurnMachine, method)), (state, event)
            assert next_states <= set(TurnState)


# --- random walks -----------------------------------------------------------------


@attrs.define
class Shell:
    """Plays the conversation task. ``log`` is what was recorded, in order;
    ``committed`` how much of it is surely durable: the shell commits on
    ``Commit`` and before it pauses or ends, so a crash keeps at least that
    much (and maybe more, as writes commit in order). ``running`` are the
    calls started and not finished, ``starts`` every start in order."""

    max_parallel: int
    log: list[Message | Record | RecordDecision] = attrs.Factory(list)
    committed: int = 0
    runs: dict[str, int] = attrs.Factory(dict)
    plans: dict[str, CallPlan] = attrs.Factory(dict)
    running: list[str] = attrs.Factory(list)
    starts: list[str] = attrs.Factory(list)
    activations: list[tuple[str, str]] = attrs.Factory(list)
    waited: set[str] = attrs.Factory(set)
    """Calls that ever waited for a person."""
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
    def decisions(self) -> dict[str, bool]:
        return {a.call_id: a.approve for a in self.log if isinstance(a, RecordDecision)}

    @property
    def denials(self) -> set[str]:
        return {a.call_id for a in self.log if isinstance(a, RecordDecision) and not a.approve}

    @property
    def awaiting(self) -> set[str]:
        waiting: set[str] = set()
        for a in self.log:
            if isinstance(a, Message):
                waiting.discard(a.tool_call_id or "")
            elif isinstance(a, Record):
                waiting.update(a.awaiting)
                waiting.discard(a.message.tool_call_id or "")
            else:
                waiting.discard(a.call_id)  # its result, if any, comes with it
        return waiting

    def index_of_record(self, call_id: str, *, decision: bool) -> int:
        for i, a in enumerate(self.log):
            if decision and isinstance(a, RecordDecision) and a.call_id == call_id:
                return i
            message = a.message if isinstance(a, Record) else a
            if (
                not decision
                and isinstance(message, Message)
                and any(c.id == call_id for c in message.tool_calls)
            ):
                return i
        raise AssertionError(f"{call_id} is not recorded")

    def perform(self, actions: list[TurnAction]) -> TurnAction | None:
        """Apply records and starts; return what ends the list, if anything
        does (always last, and never beside a start or with calls running)."""
        for i, action in enumerate(actions):
            if isinstance(action, Message | Record | RecordDecision):
                if isinstance(action, RecordDecision):
                    assert action.call_id in self.awaiting
                if isinstance(action, Record):
                    self.waited.update(action.awaiting)
                self.log.append(action)
            elif isinstance(action, Commit):
                self.committed = len(self.log)
            elif isinstance(action, Activate):
                # Switched on as the call naming it starts (or is refused), in call order.
                nxt = actions[i + 1]
                assert isinstance(nxt, RunTool | Refuse) and nxt.call.name == action.by
                assert self.plans[nxt.call.id].toolset == action.toolset
                self.activations.append((action.toolset, nxt.call.id))
            elif isinstance(action, Refuse):
                assert self.plans[action.call.id].invalid == action.content
                assert action.call.id not in self.awaiting, "a refused call waited"
                self.starts.append(action.call.id)
            elif isinstance(action, RunTool):
                self.start(action.call.id)
            else:
                assert i == len(actions) - 1, f"{action!r} is not the last action"
                assert not self.running, f"{action!r} with calls running"
                if isinstance(action, CallModel):
                    self.model_calls += 1
                else:
                    self.committed = len(self.log)
                return action
        return None

    def start(self, call_id: str) -> None:
        plan = self.plans[call_id]
        assert plan.invalid is None, "an invalid call ran"
        assert call_id not in self.running
        # Write-ahead: the call (and its approval) is durable before it starts.
        if not plan.idempotent or call_id in self.waited:
            assert self.index_of_record(call_id, decision=False) < self.committed
        if call_id in self.waited:
            assert self.decisions.get(call_id) is True
            assert self.index_of_record(call_id, decision=True) < self.committed
        self.running.append(call_id)
        assert len(self.running) <= self.max_parallel
        sequential = [c for c in self.running if self.plans[c].sequential]
        assert not sequential or self.running == sequential, "a sequential call overlapped"
        self.runs[call_id] = self.runs.get(call_id, 0) + 1
        self.starts.append(call_id)

    def crash(self, keep: int) -> None:
        self.log = self.log[: max(self.committed, min(keep, len(self.log)))]
        self.committed = len(self.log)  # what survived is what a restart reads
        self.running.clear()

    def resume_event(self) -> Resume:
        """What a restarted shell reads back from storage."""
        stored = self.stored
        answered = {m.tool_call_id for m in stored if m.role is Role.TOOL}
        open_calls = [c for m in stored for c in m.tool_calls if c.id not in answered]
        steps = sum(1 for m in stored if m.role is Role.ASSISTANT)
        return Resume(
            steps,
            [self.plans[c.id] for c in open_calls],
            awaiting=frozenset(self.awaiting),
            approved=frozenset(k for k, v in self.decisions.items() if v),
        )


plan_st = st.tuples(
    st.booleans(),  # needs approval
    st.booleans(),  # idempotent
    st.integers(0, 5),  # 0: invalid arguments
    st.integers(0, 3),  # 0: sequential
    st.sampled_from([None, "a", "b"]),  # its toolset
)
plans_st = st.lists(plan_st, max_size=5)


def check_history(shell: Shell, waiting: set[str]) -> None:
    """Each recorded call has exactly one result, after it; only ``waiting``
    calls have none; the results of each answer's calls are recorded in call
    order, among those that never waited for a person and among those that
    did and were not denied."""
    seen_calls: dict[str, tuple[int, int]] = {}
    results: dict[str, int] = {}
    order: dict[int, list[tuple[bool, int]]] = {}
    for message in shell.stored:
        for position, c in enumerate(message.tool_calls):
            assert c.id not in seen_calls
            seen_calls[c.id] = (len(order), position)
        if message.tool_calls:
            order[len(order)] = []
        call_id = message.tool_call_id
        if call_id is not None:
            assert call_id in seen_calls, "a result before its call"
            results[call_id] = results.get(call_id, 0) + 1
            if call_id not in shell.denials:
                answer_no, position = seen_calls[call_id]
                order[answer_no].append((call_id in shell.waited, position))
    assert all(n == 1 for n in results.values()), results
    assert seen_calls.keys() - results.keys() == waiting
    for positions in order.values():
        for waited in (False, True):
            mine = [p for w, p in positions if w is waited]
            assert mine == sorted(mine), ("results out of call order", positions)


def check_starts(shell: Shell) -> None:
    """Calls start (and toolsets switch on) in call order within an answer,
    but for reruns after a crash, which start again from where it cut."""
    position = {
        c.id: (n, i) for n, m in enumerate(shell.stored) for i, c in enumerate(m.tool_calls)
    }
    firsts: list[str] = []
    for call_id in shell.starts:
        if call_id not in firsts:
            firsts.append(call_id)
    for waited in (False, True):
        mine = [position[c] for c in firsts if c in position and (c in shell.waited) is waited]
        assert mine == sorted(mine), ("started out of call order", mine)
    # Each activation comes with its call's start (``Shell.perform``): in call order too.
    assert {c for _, c in shell.activations} <= set(shell.starts)


class Crashed(Exception):
    pass


def drive(
    data: st.DataObject,
    machine: TurnMachine,
    shell: Shell,
    last: TurnAction | None,
    crash_in: int | None,
) -> TurnAction | None:
    """Answer the machine until the turn ends or is left waiting; raise
    ``Crashed`` after ``crash_in`` answers."""
    answers = 0
    while shell.running or isinstance(last, CallModel | AwaitApproval):
        if crash_in is not None and answers >= crash_in:
            raise Crashed
        answers += 1
        event: MachineEvent
        if shell.running:
            if data.draw(st.integers(0, 14)) == 0:
                event = cancelled("stop")
                shell.running.clear()  # cancelled with the turn
            else:
                call_id = data.draw(st.sampled_from(shell.running))  # any order
                shell.running.remove(call_id)
                event = ToolDone(call_id, f"ok {call_id}")
        elif isinstance(last, CallModel):
            if data.draw(st.integers(0, 9)) == 0:
                event = Stop(Failure.REPORTED, "down", "model_error")
            else:
                plans = []
                for approval, idempotent, invalid, sequential, toolset in data.draw(plans_st):
                    c = call(len(shell.plans), f"{toolset or 'core'}_x")
                    p = CallPlan(
                        c,
                        approval,
                        idempotent,
                        None if invalid else f"error: {c.id}",
                        sequential=sequential == 0,
                        toolset=toolset,
                    )
                    shell.plans[c.id] = p
                    plans.append(p)
                event = answer(*plans, text="t")
        else:
            assert isinstance(last, AwaitApproval)
            choice = data.draw(st.integers(0, 5))
            if choice == 0:
                return last  # left waiting
            if choice == 1:
                shell.perform(machine.handle(Superseded()))
                return None
            assert all(shell.plans[c.id].invalid is None for c in last.calls)
            target = data.draw(st.sampled_from(last.calls))
            event = Decided(target.id, data.draw(st.booleans()), "r")
        last = shell.perform(machine.handle(event))
    return last


@settings(max_examples=600, deadline=None)
@given(
    data=st.data(),
    max_steps=st.integers(1, 4),
    max_parallel=st.integers(1, 4),
    crashes=st.integers(0, 2),
)
def test_random_walks_keep_the_invariants(
    data: st.DataObject, max_steps: int, max_parallel: int, crashes: int
) -> None:
    """Several calls per answer finishing in any order, approvals, stops,
    crashes and resumes: every recorded call gets exactly one result, results
    in call order, calls and activations start in call order, at most
    ``max_parallel`` run (a sequential one alone), each only once its call
    (and approval) is committed, a call that is not idempotent runs at most
    once, and the step limit holds."""
    machine = TurnMachine(max_steps=max_steps, max_parallel=max_parallel)
    shell = Shell(max_parallel)
    last = shell.perform(machine.handle(Begin("hi", "k")))
    crashed = 0
    while True:
        crash_in = data.draw(st.integers(0, 8)) if crashes else None
        try:
            end = drive(data, machine, shell, last, crash_in)
            break
        except Crashed:
            crashes -= 1
            crashed += 1
            shell.crash(data.draw(st.integers(0, len(shell.log))))
            if not shell.stored:
                return  # not even the user message was committed: no turn to resume
            final = shell.stored[-1]
            if final.role is Role.ASSISTANT and not final.tool_calls:
                end = Finish(final.content)  # it had finished: nothing to resume
                break
            machine = TurnMachine(max_steps=max_steps, max_parallel=max_parallel)
            last = shell.perform(machine.handle(shell.resume_event()))
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
    check_starts(shell)
    decisions = shell.decisions
    for call_id, n in shell.runs.items():
        # Once, and once more per crash for an idempotent call.
        assert n <= (1 + crashed if shell.plans[call_id].idempotent else 1), (call_id, n)
        assert decisions.get(call_id) is not False, "a denied call ran"
    if isinstance(end, Finish):
        assert shell.stored[-1].role is Role.ASSISTANT and not shell.stored[-1].tool_calls
    if isinstance(end, Finish | Fail) or machine.state is TurnState.SUPERSEDED:
        for event in (Begin("x"), ToolDone("nope", "x"), cancelled("x")):
            with pytest.raises(TurnStateError):
                machine.handle(event)


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    count=st.integers(1, 12),
    max_parallel=st.integers(1, 6),
    sequential=st.sets(st.integers(0, 11)),
)
def test_one_batch_finishing_in_any_order_records_in_call_order(
    data: st.DataObject, count: int, max_parallel: int, sequential: set[int]
) -> None:
    """One answer of ``count`` calls, each finishing whenever the draw says:
    the results come in call order, every call once; never more than
    ``max_parallel`` run, and a sequential call runs alone."""
    m = started(TurnMachine(max_steps=2, max_parallel=max_parallel))
    plans = [CallPlan(call(i), sequential=i in sequential) for i in range(count)]
    actions = m.handle(answer(*plans))
    running = [a.call.id for a in actions if isinstance(a, RunTool)]
    recorded: list[str] = []
    while running:
        assert len(running) <= max_parallel
        if any(int(c[1:]) in sequential for c in running):
            assert len(running) == 1
        done = data.draw(st.sampled_from(running))
        running.remove(done)
        for action in m.handle(ToolDone(done, done)):
            if isinstance(action, RunTool):
                running.append(action.call.id)
            elif isinstance(action, Message):
                recorded.append(action.content)
    assert recorded == [f"c{i}" for i in range(count)]
    assert m.state is TurnState.MODEL


# --- a typed turn answered by the final-answer tool (``output_tool``) -----------

FINAL = "final_answer"

_ANSWER_KINDS = st.sampled_from(["text", "valid", "invalid", "beside"])


@given(kinds=st.lists(_ANSWER_KINDS, min_size=1, max_size=8), retries=st.integers(0, 3))
@settings(max_examples=200)
def test_final_answer_tool_walk(kinds: list[str], retries: int) -> None:
    """Random answers to a typed turn in tool mode: it finishes exactly at the
    first lone valid final-answer call, with the call, its result and the
    answer's JSON recorded; a text answer or invalid arguments are asked
    again (an invalid call answered by a tool result naming it, so the next
    request is valid) until ``output_retries`` run out (invalid_output); a
    final-answer call beside another call is refused and the other runs.
    Every recorded call has exactly one recorded result."""
    machine = TurnMachine(50, 4, output_retries=retries, output_tool=FINAL)
    stored: list[Message] = []
    actions = machine.handle(Begin("q"))
    tries = 0
    outcome: TurnAction | None = None
    for n, kind in enumerate(kinds):
        assert isinstance(actions[-1], CallModel)
        stored += [a for a in actions if isinstance(a, Message)]
        stored += [a.message for a in actions if isinstance(a, Record)]
        final = ToolCall(f"f{n}", FINAL, '{"a": 1}')
        if kind == "text":
            event = ModelAnswered(Message(Role.ASSISTANT, '{"a": 1}'))
        elif kind == "valid":
            event = answer(CallPlan(final), text="")
            event = attrs.evolve(event, output_text='{"a": 1}')
        elif kind == "invalid":
            event = attrs.evolve(answer(CallPlan(final)), invalid_output="field 'a' is required")
        else:
            event = answer(CallPlan(call(n, "t")), CallPlan(final))
        actions = machine.handle(event)
        if kind == "beside":
            runs = [a for a in actions if isinstance(a, RunTool)]
            refused = [a for a in actions if isinstance(a, Refuse)]
            assert [r.call.name for r in runs] == ["t"]
            assert [r.call.id for r in refused] == [final.id]
            assert "alone" in refused[0].content
            stored += [a for a in actions if isinstance(a, Message)]
            stored += [a.message for a in actions if isinstance(a, Record)]
            actions = machine.handle(ToolDone(runs[0].call.id, "ok"))
            continue
        if kind == "valid":
            assert isinstance(actions[-1], Finish) and actions[-1].text == '{"a": 1}'
            assert machine.state is TurnState.FINISHED
            recorded = [a for a in actions if isinstance(a, Message)]
            assert [m.role for m in recorded] == [Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
            assert recorded[1].tool_call_id == final.id
            assert recorded[2].content == '{"a": 1}' and not recorded[2].tool_calls
            stored += recorded
            outcome = actions[-1]
            break
        # text or invalid: asked again, or failed
        if tries == retries:
            assert isinstance(actions[-1], Fail) and actions[-1].code == "invalid_output"
            assert machine.state is TurnState.FAILED
            outcome = actions[-1]
            break
        tries += 1
        [again] = [a for a in actions if isinstance(a, AskAgain)]
        if kind == "invalid":
            assert again.feedback.role is Role.TOOL and again.feedback.tool_call_id == final.id
            assert FINAL in again.feedback.content
        else:
            assert again.feedback.role is Role.USER
            assert "not a call of the tool final_answer" in again.feedback.content
        assert not [a for a in actions if isinstance(a, Message | Record)]  # never stored
    calls = [c.id for m in stored for c in m.tool_calls]
    results = [m.tool_call_id for m in stored if m.role is Role.TOOL]
    if outcome is not None:
        assert sorted(calls) == sorted(results)

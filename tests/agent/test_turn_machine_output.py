"""The turn machine's typed-answer rows: an invalid answer is asked again
(``AskAgain``, ``CallModel``) while ``output_retries`` last, then the turn
fails ``invalid_output``; an invalid answer is never recorded. Pure, no trio."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentik._messages import Message, Role
from agentik.agent._turn_actions import AskAgain, CallModel, Fail, Finish, TurnAction
from agentik.agent._turn_events import INVALID_OUTPUT, ModelAnswered, TurnState, output_feedback
from agentik.agent._turn_machine import TurnMachine


def answered(text: str, invalid: str | None = None) -> ModelAnswered:
    return ModelAnswered(Message(Role.ASSISTANT, text), (), invalid)


def test_invalid_answer_is_asked_again_with_its_error() -> None:
    m = TurnMachine(max_steps=5, output_retries=2)
    m.begin("q")
    bad = Message(Role.ASSISTANT, "nope")
    actions = m.handle(answered("nope", "the answer is not JSON"))
    assert actions == [
        AskAgain(bad, Message(Role.USER, output_feedback("the answer is not JSON"))),
        CallModel(),
    ]
    assert m.state is TurnState.MODEL
    assert m.steps == 2
    good = Message(Role.ASSISTANT, "{}")
    assert m.handle(answered("{}")) == [good, Finish("{}")]
    assert m.state is TurnState.FINISHED


def test_retries_spent_fails_invalid_output_recording_nothing() -> None:
    m = TurnMachine(max_steps=5, output_retries=1)
    m.begin("q")
    m.handle(answered("a", "bad a"))
    actions = m.handle(answered("b", "bad b"))
    assert len(actions) == 1
    fail = actions[0]
    assert isinstance(fail, Fail)
    assert fail.code == INVALID_OUTPUT
    assert "after 2 tries" in fail.message
    assert fail.message.endswith("bad b")
    assert m.state is TurnState.FAILED


def test_step_limit_bounds_the_retries_too() -> None:
    m = TurnMachine(max_steps=1, output_retries=5)
    m.begin("q")
    actions = m.handle(answered("a", "bad"))
    assert isinstance(actions[-1], Fail)
    assert actions[-1].code == INVALID_OUTPUT


@given(
    retries=st.integers(0, 4),
    max_steps=st.integers(1, 8),
    valid=st.lists(st.booleans(), min_size=1, max_size=10),
)
def test_any_sequence_of_answers(retries: int, max_steps: int, valid: list[bool]) -> None:
    """Whatever the answers: invalid ones are never recorded, at most
    ``output_retries`` are sent back, model calls stay within ``max_steps``,
    and the turn finishes exactly when a valid answer comes in time."""
    m = TurnMachine(max_steps=max_steps, output_retries=retries)
    log: list[TurnAction] = list(m.begin("q"))
    calls = 1
    asked_again = 0
    for i, ok in enumerate(valid):
        actions = m.handle(answered(f"a{i}", None if ok else f"bad {i}"))
        log += actions
        asked_again += sum(isinstance(a, AskAgain) for a in actions)
        if m.state is not TurnState.MODEL:
            break
        assert actions[-1] == CallModel()
        calls += 1
    recorded = [a for a in log if isinstance(a, Message) and a.role is Role.ASSISTANT]
    assert all(valid[int(a.content[1:])] for a in recorded), "an invalid answer was recorded"
    assert asked_again <= retries
    assert calls <= max_steps
    first_valid = valid.index(True) if True in valid else None
    in_time = first_valid is not None and first_valid <= min(retries, max_steps - 1)
    if in_time:
        assert m.state is TurnState.FINISHED
        assert recorded == [Message(Role.ASSISTANT, f"a{first_valid}")]
    elif m.state is TurnState.FAILED:
        assert isinstance(log[-1], Fail)
        assert log[-1].code == INVALID_OUTPUT
        assert recorded == []
    else:  # the answers ran out while it still asks
        assert m.state is TurnState.MODEL
        assert len(valid) <= min(retries, max_steps - 1)

"""The context window on random conversations under random budgets (no trio).

Conversations mix plain text, tool calls, parallel tool calls, huge tool
outputs and error results; the budget ranges from too small for the current
turn to large enough for everything. Every window must fit, carry the current
turn whole, start (after the summary) with a user message, never split a call
from its result, and be as large as the rules allow.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import Message, Role, ToolCall
from agentik.agent._compaction import fit_summary, fold_point, summary_limit, summary_request
from agentik.agent._context import (
    MESSAGE_OVERHEAD,
    ContextExhausted,
    ContextPolicy,
    Window,
    estimate_tokens,
    message_tokens,
    select_window,
)

texts = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="abc 中文🦜", min_size=200, max_size=3000),  # huge tool outputs
)


@st.composite
def turns(draw: st.DrawFn, index: int, *, complete: bool) -> list[Message]:
    """One turn: a user message, rounds of calls with their results, and
    (when ``complete``) an answer."""
    out = [Message(Role.USER, draw(texts))]
    for round_ in range(draw(st.integers(0, 3))):
        width = draw(st.integers(1, 3))  # parallel calls
        calls = tuple(
            ToolCall(f"t{index}r{round_}c{c}", draw(st.sampled_from(["a", "b_c"])), draw(texts))
            for c in range(width)
        )
        out.append(Message(Role.ASSISTANT, draw(st.text(max_size=10)), calls))
        for call in draw(st.permutations(calls)):
            content = draw(texts | st.just("error: tool 'a' failed"))
            out.append(Message(Role.TOOL, content, tool_call_id=call.id))
    if complete:
        out.append(Message(Role.ASSISTANT, draw(texts)))
    return out


@st.composite
def conversations(draw: st.DrawFn) -> tuple[list[Message], int]:
    """Earlier turns (complete, or failed without an answer) and the current
    turn (no answer yet): the history and the current turn's start."""
    history: list[Message] = []
    for index in range(draw(st.integers(0, 6))):
        history += draw(turns(index, complete=draw(st.booleans())))
    start = len(history)
    history += draw(turns(99, complete=False))
    return history, start


def cost(message: Message) -> int:
    return message_tokens(message, estimate_tokens)


@settings(max_examples=600, deadline=None)
@given(
    conversation=conversations(),
    budget=st.integers(1, 20_000),
    system=st.integers(0, 500),
    with_summary=st.booleans(),
)
def test_every_window_keeps_the_rules(
    conversation: tuple[list[Message], int], budget: int, system: int, with_summary: bool
) -> None:
    history, start = conversation
    summary = Message(Role.USER, "[Summary] earlier things " * 20) if with_summary else None
    current = system + sum(cost(m) for m in history[start:])

    def select() -> Window:
        return select_window(
            system=system,
            summary=summary,
            history=history,
            turn_start=start,
            budget=budget,
            cost=cost,
        )

    if current > budget:
        with pytest.raises(ContextExhausted) as exhausted:
            select()
        assert exhausted.value.needed == current
        return
    window = select()
    messages = list(window.messages)
    assert window.tokens == system + sum(cost(m) for m in messages) <= budget
    assert messages[-(len(history) - start) :] == history[start:], "the current turn, whole"
    carried_summary = summary is not None and messages[0] is summary
    rest = messages[1:] if carried_summary else messages
    assert rest[0].role is Role.USER
    assert rest == history[window.first :]
    seen: set[str] = set()
    for message in rest:  # no orphan result, no call without its result
        seen.update(call.id for call in message.tool_calls)
        if message.tool_call_id is not None:
            assert message.tool_call_id in seen
    answered = {m.tool_call_id for m in rest}
    assert seen <= answered
    # Greedy and maximal: the summary is carried if it fits, and the next older
    # turn would not.
    if summary is not None and not carried_summary:
        assert current + cost(summary) > budget
    earlier = [i for i in range(window.first) if history[i].role is Role.USER]
    if earlier:
        older = sum(cost(m) for m in history[earlier[-1] : window.first])
        assert window.tokens + older > budget


def test_the_estimate_counts_bytes_by_three() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abc") == 1
    assert estimate_tokens("abcd") == 2
    assert estimate_tokens("中") == 1  # three bytes of UTF-8
    assert estimate_tokens("🦜") == 2  # four bytes


@given(st.text())
def test_the_estimate_is_the_utf8_size_by_three(text: str) -> None:
    size = len(text.encode("utf-8", "surrogatepass"))
    assert estimate_tokens(text) == -(-size // 3)


def test_a_message_costs_its_content_calls_and_framing() -> None:
    message = Message(Role.ASSISTANT, "abc", (ToolCall("x", "abcdef", "{}"),))
    assert message_tokens(message, estimate_tokens) == MESSAGE_OVERHEAD + 1 + (
        MESSAGE_OVERHEAD + 2 + 1
    )


def test_the_policy_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match=r"^max_tokens must be a positive integer, got 0$"):
        ContextPolicy(max_tokens=0)
    with pytest.raises(ValueError, match=r"^summarize_at must be in \(0, 1\], got 1.5$"):
        ContextPolicy(max_tokens=10, summarize_at=1.5)


# --- compaction: what to fold, and requests that fit ------------------------------


@settings(max_examples=300, deadline=None)
@given(conversation=conversations(), keep=st.integers(0, 5000))
def test_the_fold_point_keeps_the_last_turn_and_at_most_keep(
    conversation: tuple[list[Message], int], keep: int
) -> None:
    history, _ = conversation
    point = fold_point(history, cost, keep)
    users = [i for i, m in enumerate(history) if m.role is Role.USER]
    assert point == 0 or point in users, "folding ends at a turn's start"
    assert point <= users[-1], "the last turn is never folded"
    kept = sum(cost(m) for m in history[point:])
    if point < users[-1]:
        assert kept <= keep
    earlier = [i for i in users if i < point]
    if earlier:  # one more turn would not fit
        assert sum(cost(m) for m in history[earlier[-1] :]) > keep or point == users[-1]


@settings(max_examples=300, deadline=None)
@given(
    conversation=conversations(),
    budget=st.integers(200, 8000),
    previous=st.none() | st.text(max_size=600) | st.text(min_size=3000, max_size=40_000),
    answer=st.sampled_from(["short", "long"]),
)
def test_summary_requests_fit_the_budget_and_fold_everything(
    conversation: tuple[list[Message], int], budget: int, previous: str | None, answer: str
) -> None:
    """Every summary request fits, folds at least one message, and the chain
    reaches the end of the history however long the summary so far is (a
    summary longer than half the room is cut, not a reason to stop)."""
    history, _ = conversation
    position, text = 0, previous
    while position < len(history):
        built = summary_request(text, history[position:], budget, estimate_tokens)
        assert built is not None, "a summary request refused with a budget of 200 or more"
        request, taken = built
        assert taken >= 1
        assert request.purpose == "summary"
        tokens = sum(message_tokens(m, estimate_tokens) for m in request.messages)
        assert tokens <= budget, (tokens, budget)
        content = request.messages[1].content
        assert f"under {summary_limit(budget)} tokens" in content
        if text and budget >= 2000 and estimate_tokens(text) < budget // 8:
            # Well under half the room (the prompt's fixed part is ~200 tokens).
            assert text in content, "a short summary so far is carried whole"
        position += taken
        text = "a short summary so far" if answer == "short" else "many words " * budget


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=20_000), budget=st.integers(100, 8000))
def test_a_summary_is_cut_to_what_a_window_can_carry(text: str, budget: int) -> None:
    fitted = fit_summary(text, budget, estimate_tokens)
    limit = 2 * summary_limit(budget)
    if estimate_tokens(text) <= limit:
        assert fitted == text, "a summary within the limit is kept whole"
    else:
        assert estimate_tokens(fitted) <= limit
        assert fitted.endswith("[cut]")
        assert text.startswith(fitted.removesuffix(" … [cut]").removesuffix("… [cut]"))

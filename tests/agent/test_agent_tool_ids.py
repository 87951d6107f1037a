"""The child conversations of agent-tool calls (``agent_conversation_id``),
on random parents and calls: the same call always names the same child,
different calls different children, every id is one a transport takes, the
owner stays, and the depth counts the agent calls that led there."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from agentik._input import checked_id
from agentik._scope import SEPARATOR, scope_of, split_scope
from agentik.agent import agent_conversation_id
from agentik.agent._agent_tool import agent_depth

# Conversation ids as a transport takes them (printable, no separator), owned or not.
local_ids = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=200
).filter(lambda s: s.strip() != "" and s.isprintable() and SEPARATOR not in s)
owners = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,47}\Z")
parents = st.builds(
    lambda owner, local: local if owner is None else f"{owner}{SEPARATOR}{local}",
    st.none() | owners,
    local_ids,
)
names = st.from_regex(r"\A[A-Za-z0-9_-]{1,64}\Z")
seqs = st.integers(min_value=1, max_value=2**62)
call_ids = st.text(min_size=1, max_size=100)
calls = st.tuples(parents, names, seqs, call_ids)


@given(calls)
def test_a_child_id_is_deterministic_valid_and_owned_alike(
    call: tuple[str, str, int, str],
) -> None:
    parent, name, seq, call_id = call
    child = agent_conversation_id(parent, name, seq, call_id)
    assert child == agent_conversation_id(parent, name, seq, call_id)
    scope, local = split_scope(child)
    assert scope == scope_of(parent), "the child belongs to the parent's owner"
    assert checked_id(local) == local, "a transport takes the child's id"
    assert len(child) <= 200
    assert agent_depth(child) == agent_depth(parent) + 1


@given(calls, calls)
def test_different_calls_have_different_children(
    one: tuple[str, str, int, str], other: tuple[str, str, int, str]
) -> None:
    assume(one != other)
    assert agent_conversation_id(*one) != agent_conversation_id(*other)


@given(calls, st.integers(min_value=1, max_value=12))
def test_depth_counts_the_agent_calls_down_a_chain(
    call: tuple[str, str, int, str], length: int
) -> None:
    parent, name, seq, call_id = call
    start = agent_depth(parent)
    for level in range(1, length + 1):
        parent = agent_conversation_id(parent, name, seq, call_id)
        assert agent_depth(parent) == start + level
        assert scope_of(parent) == scope_of(call[0])


@given(parents, seqs, call_ids)
def test_a_seq_tells_calls_with_the_same_id_apart(parent: str, seq: int, call_id: str) -> None:
    """A model may give a call id again in a later turn: the message's seq differs."""
    assert agent_conversation_id(parent, "a", seq, call_id) != agent_conversation_id(
        parent, "a", seq + 1, call_id
    )

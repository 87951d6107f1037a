"""The server's packages (docs/server.md, "The server's packages"): each
protocol's door builds its handlers from the ``ServerContext`` alone, and
what a handler asks of the agent it is given when built, never patched onto
a shared object afterwards."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentik.agent import ChatAgent
from agentik.server import ServerConfig, ServerContext
from agentik.server.a2a import A2aEndpoint
from agentik.server.a2a._ledger import TaskLedger


def _context(running: set[tuple[str, str]], resuming: set[tuple[str, int]]) -> ServerContext:
    agent = SimpleNamespace(
        storage=SimpleNamespace(message_store=None),
        tracing=False,
        turn_in_progress=lambda stored, task: (stored, task) in running,
        resumes_interrupted=lambda stored, seq: (stored, seq) in resuming,
    )
    return ServerContext(
        agent=cast(ChatAgent, agent),
        config=ServerConfig(),
        model_label="m",
        demo_model=False,
        storage_label="s",
    )


keys = st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["t1", "t2"]))
seqs = st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 3))


@given(st.sets(keys), st.sets(seqs), keys, seqs)
def test_the_a2a_ledger_asks_the_agent_it_was_built_with(
    running: set[tuple[str, str]],
    resuming: set[tuple[str, int]],
    key: tuple[str, str],
    seq: tuple[str, int],
) -> None:
    """A task runs (WORKING) when the agent runs its turn, and an interrupted
    turn resumes when the agent says so: the door's ledger asks that agent."""
    ledger = A2aEndpoint(_context(running, resuming)).ledger
    assert ledger.runs(key) == (key in running)
    assert ledger.turn_resumes(*seq) == (seq in resuming)


def test_two_endpoints_on_one_context_keep_their_own_ledgers() -> None:
    """The ledger is the A2A endpoint's, not a field of the shared context."""
    ctx = _context(set(), set())
    first, second = A2aEndpoint(ctx), A2aEndpoint(ctx)
    first.ledger.start(("a", "t1"))
    assert first.ledger.runs(("a", "t1"))
    assert not second.ledger.runs(("a", "t1"))


def test_what_a_ledger_asks_the_agent_cannot_be_patched_later() -> None:
    """``turn_runs`` and ``turn_resumes`` are set when the ledger is built."""
    ledger = TaskLedger(turn_runs=lambda key: True)
    with pytest.raises(attrs.exceptions.FrozenAttributeError):
        ledger.turn_runs = lambda key: False  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenAttributeError):
        ledger.turn_resumes = lambda conversation_id, seq: True  # type: ignore[misc]
    assert ledger.runs(("a", "t1"))
    assert not TaskLedger().runs(("a", "t1"))

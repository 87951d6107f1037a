"""``relax_gc``: the collector's first threshold while an agent is open."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from agentik.agent import open_chat_agent
from agentik.agent._gc import DEFAULT_THRESHOLDS, RELAXED_THRESHOLDS
from agentik.models import ScriptedModel, bench_responder
from agentik.storage import in_memory_storage


@pytest.fixture(autouse=True)
def default_thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    gc.set_threshold(*DEFAULT_THRESHOLDS)
    yield
    gc.set_threshold(*saved)


def _open(relax_gc: bool = True):  # type: ignore[no-untyped-def]
    return open_chat_agent(
        model=ScriptedModel(bench_responder("none")),
        storage=in_memory_storage(),
        builtin_tools=False,
        relax_gc=relax_gc,
    )


async def test_relaxed_while_open_and_restored_on_close() -> None:
    """The defaults are raised while an agent is open, and come back after."""
    async with _open():
        assert gc.get_threshold() == RELAXED_THRESHOLDS
    assert gc.get_threshold() == DEFAULT_THRESHOLDS


async def test_nested_agents_restore_after_the_last() -> None:
    """Two agents: the thresholds stay relaxed until both have closed."""
    async with _open():
        async with _open():
            assert gc.get_threshold() == RELAXED_THRESHOLDS
        assert gc.get_threshold() == RELAXED_THRESHOLDS
    assert gc.get_threshold() == DEFAULT_THRESHOLDS


async def test_an_applications_own_thresholds_are_kept() -> None:
    """Thresholds the application chose are neither changed nor reset."""
    gc.set_threshold(1234, 5, 6)
    async with _open():
        assert gc.get_threshold() == (1234, 5, 6)
    assert gc.get_threshold() == (1234, 5, 6)


async def test_a_change_made_while_open_is_kept() -> None:
    """Thresholds changed while the agent was open are not reset on close."""
    async with _open():
        gc.set_threshold(2000, 10, 10)
    assert gc.get_threshold() == (2000, 10, 10)


async def test_opt_out() -> None:
    """``relax_gc=False`` leaves the collector alone."""
    async with _open(relax_gc=False):
        assert gc.get_threshold() == DEFAULT_THRESHOLDS


async def test_restored_when_the_body_raises() -> None:
    """An agent left by an exception restores the thresholds too."""
    with pytest.raises(KeyError):
        async with _open():
            raise KeyError("x")
    assert gc.get_threshold() == DEFAULT_THRESHOLDS

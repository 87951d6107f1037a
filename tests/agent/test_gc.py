"""``relax_gc``: the collector's thresholds while an agent is open, and the
reason they can be high: a turn leaves no cyclic garbage."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
import trio

from agentik import ModelBackendError, TurnError, tool
from agentik.agent import open_chat_agent
from agentik.agent._gc import DEFAULT_THRESHOLDS, RELAXED_THRESHOLDS
from agentik.models import ModelRequest, ModelResponse, ScriptedModel, bench_responder
from agentik.storage import StorageBundle, in_memory_storage, open_sqlite_storage
from tests.agent.helpers import call


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


async def test_python_313_defaults_are_relaxed_and_restored() -> None:
    """3.13's defaults (2,000) count as untouched: relaxed, and put back as found."""
    gc.set_threshold(2000, 10, 10)
    async with _open():
        assert gc.get_threshold() == RELAXED_THRESHOLDS
    assert gc.get_threshold() == (2000, 10, 10)


def test_the_young_generation_is_bounded() -> None:
    """The relaxed thresholds still collect: the first bounds the young
    generation (the docstring's memory argument), the others keep theirs."""
    first, second, third = RELAXED_THRESHOLDS
    assert 700 < first <= 100_000
    assert (second, third) == DEFAULT_THRESHOLDS[1:]


@tool
async def clock() -> str:
    """The time."""
    return "12:00"


@tool
async def broken() -> str:
    """Always fails."""
    raise RuntimeError("broken tool")


def _failing_tool(request: ModelRequest) -> ModelResponse:
    if request.messages[-1].role.value == "user":
        return call("broken")
    return ModelResponse(text="the tool failed")


def _failing_model(request: ModelRequest) -> ModelResponse:
    raise ModelBackendError("the model is down")


def _broken_model(request: ModelRequest) -> ModelResponse:
    raise RuntimeError("a bug in the model's code")


@asynccontextmanager
async def _sqlite(path: Path) -> AsyncIterator[StorageBundle]:
    async with open_sqlite_storage(str(path / "db")) as storage:
        yield storage


def _memory() -> AbstractAsyncContextManager[StorageBundle]:
    @asynccontextmanager
    async def opened() -> AsyncIterator[StorageBundle]:
        yield in_memory_storage()

    return opened()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.parametrize("responder", ["tool_call", "tool_fails", "model_fails", "model_breaks"])
async def test_turns_leave_no_cyclic_garbage(backend: str, responder: str, tmp_path: Path) -> None:
    """Turns of many conversations at once (new ones, then more turns of
    each), a tool call each, finished or with the tool failing: reference
    counting frees all they leave, so the collector finds nothing. A cycle per
    turn would make the relaxed thresholds hold it in memory until a young
    collection, and cost a walk of every object a turn keeps. A turn whose
    model fails leaves none either: its error reaches the caller, and no
    frame of the agent's keeps it."""
    respond = {
        "tool_call": bench_responder("clock"),
        "tool_fails": _failing_tool,
        "model_fails": _failing_model,
        "model_breaks": _broken_model,
    }[responder]
    storage = _memory() if backend == "memory" else _sqlite(tmp_path)
    async with (
        storage as bundle,
        open_chat_agent(
            model=ScriptedModel(respond),
            storage=bundle,
            tools=[clock, broken],
            builtin_tools=False,
            relax_gc=False,
        ) as agent,
    ):
        failures: list[str] = []

        async def conversation(name: str) -> None:
            for turn in range(3):
                try:
                    await agent.send(name, f"turn {turn}")
                except TurnError as error:
                    failures.append(error.code)

        await conversation("warm-up")  # imports, caches, first allocations
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(conversation, f"c{i}")
            gc.collect()
        finally:
            gc.set_debug(0)
            garbage = Counter(type(o).__qualname__ for o in gc.garbage)
            gc.garbage.clear()
    assert garbage == Counter()
    code = {"model_fails": "model_error", "model_breaks": "internal_error"}.get(responder)
    assert failures == ([] if code is None else [code] * 63)


async def test_the_first_threshold_follows_the_live_conversations() -> None:
    """64 young objects a live conversation: at 4,000 live conversations the
    first threshold is 400,000 (the next doubling of 100,000 above 256,000);
    back to 100,000 once they have retired; the defaults after close."""
    from agentik.agent._gc import YOUNG_PER_CONVERSATION

    async with _open() as agent:
        assert gc.get_threshold() == RELAXED_THRESHOLDS
        async with trio.open_nursery() as nursery:
            for i in range(4000):
                nursery.start_soon(agent.send, f"c{i}", "hi")
        assert agent.stats.live_conversations == 4000
        assert YOUNG_PER_CONVERSATION * 4000 == 256_000
        assert gc.get_threshold() == (400_000, *RELAXED_THRESHOLDS[1:])
        for i in range(4000):
            agent._registry.retire(agent._registry.handles[f"c{i}"])
        assert gc.get_threshold() == RELAXED_THRESHOLDS
    assert gc.get_threshold() == DEFAULT_THRESHOLDS


async def test_scaling_leaves_thresholds_set_meanwhile_alone() -> None:
    async with _open() as agent:
        gc.set_threshold(5000, 7, 7)
        async with trio.open_nursery() as nursery:
            for i in range(3000):
                nursery.start_soon(agent.send, f"c{i}", "hi")
        assert gc.get_threshold() == (5000, 7, 7)
    assert gc.get_threshold() == (5000, 7, 7)


async def test_without_relax_gc_conversations_do_not_move_the_thresholds() -> None:
    async with _open(relax_gc=False) as agent:
        async with trio.open_nursery() as nursery:
            for i in range(3000):
                nursery.start_soon(agent.send, f"c{i}", "hi")
        assert gc.get_threshold() == DEFAULT_THRESHOLDS

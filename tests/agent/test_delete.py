"""``ChatAgent.delete_conversation``: the conversation goes whole from the store,
and its live task keeps nothing of it (cache, keys, paused turn, toolsets,
notes, remembered failures, cached reflections); turns queued before the
delete run before it, turns after it start afresh at seq 1. On both backends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik import (
    ApprovalError,
    ContextPolicy,
    ModelRequest,
    ModelResponse,
    NamedTool,
    Role,
    ToolsetContribution,
    TurnError,
    tool,
)
from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import (
    StorageBundle,
    in_memory_storage,
    open_sqlite_storage,
)
from tests.agent.helpers import assert_valid_history, call, stored

Backend = Callable[[], AbstractAsyncContextManager[StorageBundle]]


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return lambda: open_sqlite_storage(tmp_path / "db")

    @asynccontextmanager
    async def memory() -> AsyncIterator[StorageBundle]:
        yield in_memory_storage()

    return memory


class Recorder:
    """A model that calls ``memory_add`` when told to, and records what it saw."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def respond(self, request: ModelRequest) -> ModelResponse:
        history = [m.content for m in request.messages[1:] if m.role is Role.USER]
        last = request.messages[-1]
        if last.role is Role.USER:
            self.seen.append(history)
            if last.content.startswith("note "):
                return call("memory_add", {"text": last.content[5:]}, id=last.content[5:])
            if last.content == "fail":
                return ModelResponse(text=None, tool_calls=())
        return ModelResponse(text="ok")


async def test_delete_removes_everything_and_the_next_turn_starts_afresh(
    backend: Backend,
) -> None:
    """Messages, notes and keys go; the live task forgets its cache, so the
    next turn is seq 1 and the model sees only it."""
    model = Recorder()
    async with backend() as storage:
        async with open_chat_agent(model=ScriptedModel(model.respond), storage=storage) as agent:
            await agent.send("c", "note likes tea", idempotency_key="k1")
            await agent.send("c", "hello")
            assert await agent.delete_conversation("c") is True
            assert await stored(storage, "c") == []
            assert await storage.working_memory_store.list("c") == []
            result = await agent.send("c", "fresh", idempotency_key="k1")
            assert [m.seq for m in result.messages] == [1, 2]
            assert model.seen[-1] == ["fresh"], "the model saw the deleted history"
            prompt_notes = agent.storage.working_memory_store
            assert await prompt_notes.list("c") == []
            assert await agent.delete_conversation("never") is False
            with pytest.raises(ValueError, match="conversation_id"):
                await agent.delete_conversation("")
            assert await agent.delete_conversation("c") is True
            assert await agent.delete_conversation("c") is False


async def test_the_working_memory_cache_is_dropped(backend: Backend) -> None:
    """Notes the task cached are not in the next system prompt."""
    prompts: list[str] = []

    def respond(request: ModelRequest) -> ModelResponse:
        prompts.append(request.messages[0].content)
        if request.messages[-1].content == "remember":
            return call("memory_add", {"text": "the code is 4711"})
        return ModelResponse(text="ok")

    async with backend() as storage:
        async with open_chat_agent(model=ScriptedModel(respond), storage=storage) as agent:
            await agent.send("c", "remember")
            await agent.send("c", "next")
            assert "4711" in prompts[-1]
            await agent.delete_conversation("c")
            await agent.send("c", "again")
            assert "4711" not in prompts[-1], "a deleted note stayed in the prompt"


async def test_turns_queued_before_run_first_and_turns_after_start_afresh() -> None:
    """The delete takes its place in the conversation's queue: a running turn
    and one queued before it finish (and are deleted), one queued after it
    starts at seq 1 and sees nothing of them."""
    gate = trio.Event()
    seen: list[list[str]] = []

    async def respond(request: ModelRequest) -> ModelResponse:
        seen.append([m.content for m in request.messages[1:]])
        if request.messages[-1].content == "slow":
            await gate.wait()
        return ModelResponse(text="ok")

    storage = in_memory_storage()
    async with open_chat_agent(model=ScriptedModel(respond), storage=storage) as agent:
        results: dict[str, object] = {}
        async with trio.open_nursery() as nursery:

            async def send(text: str) -> None:
                results[text] = await agent.send("c", text)

            async def delete() -> None:
                results["deleted"] = await agent.delete_conversation("c")

            nursery.start_soon(send, "slow")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(send, "queued before")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(delete)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(send, "after")
            await trio.testing.wait_all_tasks_blocked()
            gate.set()
    assert results["deleted"] is True
    after = results["after"]
    assert [m.seq for m in after.messages] == [1, 2]  # type: ignore[attr-defined]
    assert seen[-1] == ["after"]
    assert [m.content for m in await stored(storage, "c")] == ["after", "ok"]


async def test_a_paused_turn_is_forgotten() -> None:
    """A turn waiting for approval: after the delete nothing waits, and a
    decision about its call is refused as not waiting."""

    @tool(requires_approval=True)
    async def wire(amount: int) -> str:
        """Send money."""
        return "sent"

    def respond(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].content == "pay":
            return call("wire", {"amount": 1})
        return ModelResponse(text="ok")

    async with open_chat_agent(
        model=ScriptedModel(respond), storage=in_memory_storage(), tools=[wire]
    ) as agent:
        paused = await agent.send("c", "pay")
        assert paused.status == "awaiting_approval"
        assert await agent.delete_conversation("c")
        assert await agent.pending_approvals("c") == ()
        with pytest.raises(ApprovalError, match="not waiting"):
            await agent.decide("c", "c1", approve=True)
        result = await agent.send("c", "hello")
        assert [m.seq for m in result.messages] == [1, 2]


async def test_active_toolsets_are_switched_off() -> None:
    """A toolset the deleted conversation activated is not active afterwards."""

    async def find(arguments: dict[str, object]) -> str:
        return "found"

    books = ToolsetContribution(
        "books", "Books.", [NamedTool("books_find", "Find.", {"type": "object"}, find)]
    )

    def respond(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].content == "find":
            return call("books_find")
        return ModelResponse(text="ok")

    async with open_chat_agent(
        model=ScriptedModel(respond), storage=in_memory_storage(), toolsets=[books]
    ) as agent:
        await agent.send("c", "find")
        assert [s.active for s in agent.toolset_status("c")] == [True]
        await agent.delete_conversation("c")
        assert [s.active for s in agent.toolset_status("c")] == [False]


async def test_remembered_failures_and_cached_reflections_go() -> None:
    """The agent's memory of the conversation's failed turns, and the cached
    recent reflections drawn from it, do not outlive it."""

    def respond(request: ModelRequest) -> ModelResponse:
        if request.purpose == "reflection":
            mine = any(m.content == "hi from c" for m in request.messages)
            return ModelResponse(text="lesson from c" if mine else "lesson from other")
        if request.messages[-1].content == "boom":
            raise RuntimeError("model bug")
        return ModelResponse(text="ok")

    prompts: list[str] = []

    def recording(request: ModelRequest) -> ModelResponse:
        if request.purpose == "turn":
            prompts.append(request.messages[0].content)
        return respond(request)

    async with open_chat_agent(
        model=ScriptedModel(recording), storage=in_memory_storage(), reflection=True
    ) as agent:
        await agent.send("c", "hi from c")
        with pytest.raises(TurnError):
            await agent.send("c", "boom")
        await agent.send("other", "hi")
        assert "lesson from c" in prompts[-1]
        assert any(cid == "c" for cid, _ in agent._runtime.failures)
        await agent.delete_conversation("c")
        assert not any(cid == "c" for cid, _ in agent._runtime.failures)
        await agent.send("other", "again")
        reflections = await agent.storage.reflection_store.list_for_conversation("c")
        assert reflections == []
        assert prompts[-1].count("lesson from c") == 0, "a deleted reflection stayed cached"


async def test_delete_needs_a_store_that_can() -> None:
    """A seed message store (in a plain StorageBundle): a clear error, nothing done."""
    base = in_memory_storage()

    class Plain:
        def __getattr__(self, name: str) -> object:
            if name in ("delete_conversation", "idle_conversations"):
                raise AttributeError(name)
            return getattr(base.message_store, name)

    storage = StorageBundle(
        Plain(),  # type: ignore[arg-type]
        base.working_memory_store,
        base.reflection_store,
        base.skill_store,
    )
    async with open_chat_agent(
        model=ScriptedModel(lambda r: ModelResponse(text="ok")), storage=storage
    ) as agent:
        with pytest.raises(TypeError, match="cannot delete conversations"):
            await agent.delete_conversation("c")


# --- the class: no state of a deleted conversation survives, whatever the order ----

_OPS = st.lists(
    st.sampled_from(["turn", "note", "keyed", "delete", "concurrent"]), min_size=1, max_size=12
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_OPS)
async def test_history_is_what_followed_the_last_delete(ops: list[str]) -> None:
    """Random turns (plain, writing notes, keyed and retried), deletes, and a
    delete racing a turn: afterwards the stored history is exactly the turns
    served after the last delete (the model saw nothing older), valid, with
    seqs 1..n, and the notes are those of those turns."""
    model = Recorder()
    storage = in_memory_storage()
    expected: list[str] = []
    async with open_chat_agent(model=ScriptedModel(model.respond), storage=storage) as agent:
        for i, op in enumerate(ops):
            if op == "delete":
                await agent.delete_conversation("c")
                expected.clear()
            elif op == "note":
                await agent.send("c", f"note n{i}")
                expected.append(f"note n{i}")
            elif op == "keyed":
                await agent.send("c", f"k{i}", idempotency_key=f"key{i}")
                await agent.send("c", f"k{i}", idempotency_key=f"key{i}")  # a retry adds nothing
                expected.append(f"k{i}")
            elif op == "concurrent":
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(agent.send, "c", f"t{i}")
                    await trio.testing.wait_all_tasks_blocked()
                    nursery.start_soon(agent.delete_conversation, "c")
                expected.clear()  # the turn went in first, then the delete
            else:
                await agent.send("c", f"t{i}")
                expected.append(f"t{i}")
            if op != "delete" and op != "concurrent":
                assert model.seen[-1] == expected, "the model saw a deleted turn"
        history = await stored(storage, "c")
    assert [m.content for m in history if m.role is Role.USER] == expected
    assert_valid_history(history)
    notes = [e.text for e in await storage.working_memory_store.list("c")]
    assert notes == [t[5:] for t in expected if t.startswith("note ")]


async def test_summaries_go_from_the_store_and_the_live_task(backend: Backend) -> None:
    """Under a context policy the model summarized older turns; after a delete
    the store has no summary and the next request carries none."""
    requests: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        if request.purpose == "summary":
            return ModelResponse(text="SUMMARY-OF-OLD-TURNS")
        return ModelResponse(text="ok")

    async with backend() as storage:
        store = storage.message_store
        async with open_chat_agent(
            model=ScriptedModel(respond), storage=storage, context=ContextPolicy(max_tokens=300)
        ) as agent:
            for i in range(12):
                await agent.send("c", f"question {i} " * 5)
            assert await store.latest_summary("c") is not None, "no summary to delete"
            assert await agent.delete_conversation("c") is True
            assert await store.latest_summary("c") is None
            await agent.send("c", "fresh")
    last = [r for r in requests if r.purpose == "turn"][-1]
    assert [m.content for m in last.messages[1:]] == ["fresh"], "the summary outlived the delete"

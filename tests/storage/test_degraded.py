"""A seed-only backend (a plain ``StorageBundle``) through ``full_storage``: the
degraded behaviour docs/storage.md promises, from the store contract up to the
agent. A ``Storage`` passes through; a plain bundle is taken for its type (the
four seed stores), never probed, even when its stores could do more."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import attrs
import pytest

from agentik import (
    ContextPolicy,
    Message,
    ModelRequest,
    ModelResponse,
    NamedTool,
    Role,
    ToolCall,
    open_chat_agent,
)
from agentik.models import ScriptedModel
from agentik.storage import StorageBundle, full_storage, in_memory_storage
from agentik.testing import (
    MakeBundle,
    assert_valid_history,
    check_message_store,
    check_storage_bundle,
    check_working_memory_store,
)
from tests.storage.seed_stores import seed_only_storage


@asynccontextmanager
async def seed_bundles() -> AsyncIterator[StorageBundle]:
    yield seed_only_storage()


@asynccontextmanager
async def plain_bundles_of_full_stores() -> AsyncIterator[StorageBundle]:
    full = in_memory_storage()
    yield StorageBundle(
        full.message_store, full.working_memory_store, full.reflection_store, full.skill_store
    )


def test_a_storage_passes_through_and_a_plain_bundle_gets_stand_ins() -> None:
    """``full_storage`` returns a ``Storage`` itself; a plain bundle's message
    and note stores get stand-ins, its other stores and fields are kept."""
    full = in_memory_storage()
    assert full_storage(full) is full
    assert not full.degraded
    plain = StorageBundle(
        full.message_store, full.working_memory_store, full.reflection_store, full.skill_store
    )
    completed = full_storage(plain)
    assert completed.degraded
    assert completed.message_store is not full.message_store
    assert completed.working_memory_store is not full.working_memory_store
    assert completed.reflection_store is full.reflection_store
    assert completed.skill_store is full.skill_store
    assert (completed.ownership, completed.secret_store) == (None, None)
    # Taken for its type: the in-memory store could take this write at once.
    assert completed.message_store.submit_nowait("c", Message(Role.USER, "x")) is None


@pytest.mark.parametrize(
    "make", [seed_bundles, plain_bundles_of_full_stores], ids=["seed-only", "plain-of-full"]
)
async def test_a_plain_bundle_keeps_the_seed_contract_and_the_degraded_one(
    make: MakeBundle,
) -> None:
    """The whole contract passes: the seed cases on its stores, the degraded
    cases on the stand-ins."""
    await check_storage_bundle(make)


async def test_the_degraded_contract_catches_a_stand_in_that_does_more() -> None:
    """A ``Storage`` that says it is degraded but writes without waiting (the
    in-memory store does) fails the degraded case that says otherwise."""

    @asynccontextmanager
    async def pretending() -> AsyncIterator[StorageBundle]:
        yield attrs.evolve(in_memory_storage(), degraded=True)

    with pytest.raises(
        AssertionError,
        match=r"^store contract case _seed_never_writes_without_waiting: "
        r"a seed store's submit_nowait took a write",
    ):
        await check_message_store(pretending)
    with pytest.raises(
        AssertionError,
        match=r"^store contract case _seed_cannot_list_archived_notes: "
        r"listing archived notes: expected StoreError",
    ):
        await check_working_memory_store(pretending)


# --- the agent over a seed-only backend -----------------------------------------------


async def _add(arguments: dict[str, object]) -> str:
    return str(arguments["a"])


ADD = NamedTool("add", "Echo a.", {"type": "object"}, _add)
PAY = NamedTool("pay", "Pay.", {"type": "object"}, _add, requires_approval=True)


def _responder(requests: list[ModelRequest]) -> Callable[[ModelRequest], ModelResponse]:
    def respond(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        if request.purpose == "summary":
            return ModelResponse(text="SUMMARY")
        last = request.messages[-1]
        if last.role is Role.USER and last.content.startswith("add"):
            return ModelResponse(tool_calls=(ToolCall("c1", "add", '{"a": 1}'),))
        return ModelResponse(text=f"re: {last.content}")

    return respond


async def test_a_seed_only_backend_runs_turns_and_keyed_retries() -> None:
    """A turn with a tool call, and a keyed turn retried: the retry returns the
    first result and stores nothing (the seed's ``find_idempotency_key``)."""
    storage = seed_only_storage()
    requests: list[ModelRequest] = []
    async with open_chat_agent(
        model=ScriptedModel(_responder(requests)), storage=storage, tools=[ADD]
    ) as agent:
        assert agent.storage.degraded
        called = await agent.send("c", "add one")
        assert called.text == "re: 1"
        first = await agent.send("c", "keyed", idempotency_key="k")
        again = await agent.send("c", "keyed", idempotency_key="k")
        assert again.text == first.text == "re: keyed"
        assert [m.seq for m in again.messages] == [m.seq for m in first.messages]
    history = [m async for m in storage.message_store.get_messages("c")]
    assert_valid_history(history)
    assert [m.content for m in history if m.role is Role.USER] == ["add one", "keyed"]
    assert len(requests) == 3, "the retry asked the model again"


async def test_a_seed_only_backend_refuses_approval_tools_at_open() -> None:
    with pytest.raises(
        ValueError,
        match=r"^tools that require approval need a message store that keeps them \(a"
        r" FullMessageStore, in a Storage\); this bundle's is a seed MessageStore$",
    ):
        async with open_chat_agent(
            model=ScriptedModel(_responder([])), storage=seed_only_storage(), tools=[PAY]
        ):
            pass


async def test_a_seed_only_backend_refuses_deletes_before_anything_is_done() -> None:
    storage = seed_only_storage()
    async with open_chat_agent(model=ScriptedModel(_responder([])), storage=storage) as agent:
        await agent.send("c", "hi")
        for attempt in (
            lambda: agent.delete_conversation("c"),
            lambda: agent.delete_idle_conversations(datetime(3000, 1, 1, tzinfo=UTC)),
        ):
            with pytest.raises(TypeError, match=r"^this bundle's message store cannot delete"):
                await attempt()
        assert (await agent.send("c", "still here")).text == "re: still here"
    assert await storage.message_store.list_conversations() == ["c"]


@pytest.mark.parametrize("seed_only", [True, False], ids=["seed-only", "full"])
async def test_a_context_policy_asks_a_seed_only_backend_for_no_summary(seed_only: bool) -> None:
    """Compaction needs somewhere to keep a summary: over a seed-only backend the
    model is never asked for one (the window keeps the tail that fits); over a
    full one, the same turns are summarized."""
    requests: list[ModelRequest] = []
    storage = seed_only_storage() if seed_only else in_memory_storage()
    async with open_chat_agent(
        model=ScriptedModel(_responder(requests)),
        storage=storage,
        context=ContextPolicy(max_tokens=300),
    ) as agent:
        for i in range(12):
            assert (await agent.send("c", f"question {i} " * 5)).text.startswith("re: question")
    summaries = [r for r in requests if r.purpose == "summary"]
    assert bool(summaries) is not seed_only, f"{len(summaries)} summary requests"
    history = [m async for m in storage.message_store.get_messages("c")]
    assert len(history) == 24, "history was lost"

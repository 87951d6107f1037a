"""Human approval of tool calls, through the public API, on both backends.

A call that needs approval pauses its turn durably: ``send`` returns
``awaiting_approval`` once the call and its pending approval are committed,
``decide`` runs the turn on, and all of it survives closing and reopening the
storage (SQLite: a real file opened again).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from agentik import (
    ApprovalError,
    ApprovalRequest,
    Message,
    ModelRequest,
    ModelResponse,
    NamedTool,
    Role,
    ToolCall,
    ToolsetContribution,
    TurnError,
    open_chat_agent,
    tool,
)
from agentik.models import ScriptedModel
from tests.agent.helpers import assert_valid_history, stored
from tests.reliability.helpers import BACKENDS, Backend

RUNS: list[str] = []


@tool(requires_approval=True)
async def wire_money(amount: int) -> str:
    """Send money."""
    RUNS.append(f"wire {amount}")
    return f"sent {amount}"


@tool
async def balance() -> str:
    """Read the balance."""
    RUNS.append("balance")
    return "100"


def calls(*pairs: tuple[str, str]) -> ModelResponse:
    return ModelResponse(
        tool_calls=tuple(
            ToolCall(cid, name, '{"amount": 5}' if name == "wire_money" else "{}")
            for cid, name in pairs
        )
    )


def model_for(first: ModelResponse) -> ScriptedModel:
    """Answers the first model call of a turn asking to "pay" or "look" with
    ``first``, then with the tool results it saw (so a test can read what
    reached the model); any other message with "ok"."""

    def respond(request: ModelRequest) -> ModelResponse:
        messages = request.messages
        user_at = max(i for i, m in enumerate(messages) if m.role is Role.USER)
        turn = messages[user_at:]
        if turn[0].content not in ("pay", "look", "go"):
            return ModelResponse(text="ok")
        if len(turn) == 1:
            return first
        results = [m.content for m in turn if m.role is Role.TOOL]
        return ModelResponse(text=" | ".join(results))

    return ScriptedModel(respond)


@pytest.fixture(autouse=True)
def _clear_runs() -> None:
    RUNS.clear()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_call_needing_approval_pauses_until_decided(backend: str, tmp_path: Path) -> None:
    store = Backend(backend, tmp_path / "db")
    model = model_for(calls(("c1", "wire_money"), ("c2", "balance")))
    async with store.open() as storage:
        async with open_chat_agent(
            model=model, storage=storage, tools=[wire_money, balance]
        ) as agent:
            paused = await agent.send("conv", "pay", idempotency_key="k")
            assert paused.status == "awaiting_approval"
            assert paused.text == ""
            [request] = paused.approvals
            assert request == ApprovalRequest("conv", ToolCall("c1", "wire_money", '{"amount": 5}'))
            assert RUNS == ["balance"], "the call needing no approval ran, the other waits"
            assert await agent.pending_approvals("conv") == (request,)
            assert await agent.send("conv", "pay", idempotency_key="k") == paused  # a retry
            done = await agent.decide("conv", "c1", approve=True)
            assert done.status == "finished"
            assert done.approvals == ()
            assert done.text == "100 | sent 5"
            assert RUNS == ["balance", "wire 5"]
            assert await agent.pending_approvals("conv") == ()
            assert await agent.decide("conv", "c1", approve=True) == done  # the same again
            with pytest.raises(ApprovalError, match=r"^call 'c1' was already approved$") as info:
                await agent.decide("conv", "c1", approve=False)
            assert info.value.code == "already_decided"
        history = await stored(storage, "conv")
    assert_valid_history(history)
    assert [m.role for m in history] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.TOOL,
        Role.ASSISTANT,
    ]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_denied_call_never_runs_and_the_model_sees_why(
    backend: str, tmp_path: Path
) -> None:
    store = Backend(backend, tmp_path / "db")
    async with store.open() as storage:
        async with open_chat_agent(
            model=model_for(calls(("c1", "wire_money"))), storage=storage, tools=[wire_money]
        ) as agent:
            await agent.send("conv", "pay")
            result = await agent.decide("conv", "c1", approve=False, reason="too much")
            assert result.text == "denied: too much"
            assert RUNS == []
            with pytest.raises(ApprovalError) as info:
                await agent.decide("conv", "c1", approve=True)
            assert info.value.code == "already_decided"
            with pytest.raises(ApprovalError) as info:
                await agent.decide("conv", "nope", approve=True)
            assert info.value.code == "not_waiting"
        assert_valid_history(await stored(storage, "conv"))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_approvals_survive_a_restart(backend: str, tmp_path: Path) -> None:
    """Close the agent and the storage with a call waiting; reopen both and
    decide: the turn goes on from its committed state."""
    store = Backend(backend, tmp_path / "db")
    model = model_for(calls(("c1", "wire_money"), ("c2", "wire_money")))
    async with store.open() as storage:
        async with open_chat_agent(model=model, storage=storage, tools=[wire_money]) as agent:
            paused = await agent.send("conv", "pay", idempotency_key="k")
            assert [a.call.id for a in paused.approvals] == ["c1", "c2"]
            await agent.decide("conv", "c1", approve=True)  # c2 still waits
    assert RUNS == [], "an approved call waits for the other decisions"
    async with store.open() as storage:
        async with open_chat_agent(model=model, storage=storage, tools=[wire_money]) as agent:
            waiting = await agent.pending_approvals("conv")
            assert [a.call.id for a in waiting] == ["c2"]
            retried = await agent.send("conv", "pay", idempotency_key="k")
            assert retried.status == "awaiting_approval"
            done = await agent.decide("conv", "c2", approve=False, reason="once is enough")
            # A denial is recorded at once; approved calls run once all are decided.
            assert done.text == "denied: once is enough | sent 5"
    assert RUNS == ["wire 5"]
    async with store.open() as storage:
        history = await stored(storage, "conv")
    assert_valid_history(history)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_new_message_denies_what_waits(backend: str, tmp_path: Path) -> None:
    store = Backend(backend, tmp_path / "db")
    model = model_for(calls(("c1", "wire_money")))
    async with store.open() as storage:
        async with open_chat_agent(model=model, storage=storage, tools=[wire_money]) as agent:
            await agent.send("conv", "pay")
            await agent.send("conv", "never mind")
            assert await agent.pending_approvals("conv") == ()
            with pytest.raises(ApprovalError):
                await agent.decide("conv", "c1", approve=True)
        history = await stored(storage, "conv")
    assert_valid_history(history)
    assert history[2].content == "denied: the user sent a new message"
    assert history[3].content == "never mind"
    assert RUNS == []


async def test_the_approval_timeout_denies(autojump_clock: trio.testing.MockClock) -> None:
    from agentik import in_memory_storage

    storage = in_memory_storage()
    model = model_for(calls(("c1", "wire_money")))
    async with open_chat_agent(
        model=model, storage=storage, tools=[wire_money], approval_timeout=30
    ) as agent:
        start = trio.current_time()
        await agent.send("conv", "pay")
        await trio.sleep(29)
        assert len(await agent.pending_approvals("conv")) == 1
        await trio.sleep(2)
        assert await agent.pending_approvals("conv") == ()
        assert trio.current_time() - start >= 30
    history = await stored(storage, "conv")
    assert_valid_history(history)
    assert history[2].content == "denied: no decision within 30 s"
    assert history[-1].content == "denied: no decision within 30 s"  # what the model saw
    assert RUNS == []


async def test_policy_and_toolset_decide_what_needs_approval() -> None:
    from agentik import in_memory_storage

    async def plain(arguments: object) -> str:
        RUNS.append("plain")
        return "ok"

    writes = ToolsetContribution(
        "files",
        "Write files.",
        [NamedTool("files_write", "Write.", {"type": "object"}, plain)],
        requires_approval=True,
    )
    reader = NamedTool("read", "Read.", {"type": "object"}, plain)
    deleter = NamedTool("delete", "Delete.", {"type": "object"}, plain)
    seen: list[str] = []

    def policy(conversation_id: str, call: ToolCall) -> bool:
        seen.append(call.name)
        return call.name == "delete"

    model = model_for(
        ModelResponse(
            tool_calls=(
                ToolCall("a", "read", "{}"),
                ToolCall("b", "delete", "{}"),
                ToolCall("c", "files_write", "{}"),
            )
        )
    )
    async with open_chat_agent(
        model=model,
        storage=in_memory_storage(),
        tools=[reader, deleter],
        toolsets=[writes],
        approval_policy=policy,
    ) as agent:
        paused = await agent.send("conv", "go")
        assert [a.call.id for a in paused.approvals] == ["b", "c"]
        assert RUNS == ["plain"]
        assert seen == ["read", "delete"], "the policy is asked only where nothing decided"


async def test_a_raising_policy_asks_for_approval(caplog: pytest.LogCaptureFixture) -> None:
    from agentik import in_memory_storage

    def policy(conversation_id: str, call: ToolCall) -> bool:
        raise RuntimeError("rules unavailable")

    async with open_chat_agent(
        model=model_for(calls(("c1", "balance"))),
        storage=in_memory_storage(),
        tools=[balance],
        approval_policy=policy,
    ) as agent:
        paused = await agent.send("conv", "look")
        assert paused.status == "awaiting_approval"
    assert RUNS == []
    assert "the approval policy raised RuntimeError" in caplog.text


async def test_a_store_without_a_ledger_is_refused_at_open() -> None:
    from agentik import StorageBundle, in_memory_storage

    base = in_memory_storage()

    class Plain:
        def __getattr__(self, name: str) -> object:
            if name in ("submit_awaiting", "submit_decision", "submit_turn_failure", "turn_record"):
                raise AttributeError(name)
            return getattr(base.message_store, name)

    bundle = StorageBundle(
        Plain(),  # type: ignore[arg-type]
        base.working_memory_store,
        base.reflection_store,
        base.skill_store,
    )
    with pytest.raises(ValueError, match="need a message store that keeps them"):
        async with open_chat_agent(model=model_for(calls()), storage=bundle, tools=[wire_money]):
            pass


async def test_decide_checks_its_arguments() -> None:
    from agentik import in_memory_storage

    async with open_chat_agent(
        model=model_for(calls()), storage=in_memory_storage(), tools=[wire_money]
    ) as agent:
        with pytest.raises(ValueError, match="call_id must be a non-empty string"):
            await agent.decide("conv", "", approve=True)
        with pytest.raises(ValueError, match="reason must be valid Unicode text"):
            await agent.decide("conv", "c1", approve=False, reason="\ud800")
        with pytest.raises(ApprovalError) as info:
            await agent.decide("conv", "c1", approve=True)
        assert info.value.code == "not_waiting"


async def test_a_failing_turn_after_approval_is_a_turn_error() -> None:
    """The model fails once the turn runs on: ``decide`` raises the turn's
    error, and history stays valid."""
    from agentik import ModelBackendError, in_memory_storage

    answers = iter([calls(("c1", "wire_money"))])

    def respond(request: ModelRequest) -> ModelResponse:
        try:
            return next(answers)
        except StopIteration:
            raise ModelBackendError("down") from None

    storage = in_memory_storage()
    async with open_chat_agent(
        model=ScriptedModel(respond), storage=storage, tools=[wire_money]
    ) as agent:
        await agent.send("conv", "pay")
        with pytest.raises(TurnError) as info:
            await agent.decide("conv", "c1", approve=True)
        assert info.value.code == "model_error"
        assert await agent.pending_approvals("conv") == ()
    assert_valid_history(await stored(storage, "conv"))
    assert RUNS == ["wire 5"]


def test_the_flags_default_off_and_are_kept() -> None:
    async def handler(arguments: object) -> str:
        return ""

    plain = NamedTool("t", "d", {"type": "object"}, handler)
    assert (plain.requires_approval, plain.idempotent) == (False, False)
    assert (wire_money.requires_approval, wire_money.idempotent) == (True, False)

    @tool(idempotent=True)
    async def lookup() -> str:
        """Look up."""
        return ""

    assert (lookup.requires_approval, lookup.idempotent) == (False, True)
    assert Message(Role.USER, "x").tool_calls == ()

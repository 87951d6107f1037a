"""A Hypothesis state machine over whole agents: turns (plain, with a tool
that works, raises, hangs past its timeout, gets malformed arguments, or is
cancelled mid-call), with and without idempotency keys, retries of earlier
keys, conversations retiring when idle, and closing and reopening the agent
and its storage, all applied to two worlds at once: one on the in-memory
backend, one on SQLite in a real file.

Invariants after every step: each world's history is valid (gapless seqs,
every tool call answered exactly once); the two worlds agree on every turn's
outcome and on every conversation's messages; every acknowledged turn is
stored exactly once, where its result said; a retried key returns the first
result and adds nothing.

Rules are synchronous (Hypothesis drives them), so both worlds live in one
trio run on a background thread and each step is sent there with
``trio.from_thread.run``. The run uses trio's MockClock without autojump:
time moves only when a rule jumps it (a hanging tool's timeout, idleness), so
every step is deterministic. ``AGENTIK_LONG=1`` runs many more examples.
"""

from __future__ import annotations

import collections
import os
import shutil
import tempfile
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import attrs
import trio
import trio.testing
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from agentik import Message, ModelRequest, ModelResponse, NamedTool, Role, ToolCall, TurnError
from agentik.agent import ChatAgent, open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import StorageBundle
from tests.reliability.helpers import Backend, check_history, history, shape

T = TypeVar("T")
LONG = os.environ.get("AGENTIK_LONG") == "1"
CONVERSATIONS = ("a", "b")
KINDS = ("plain", "echo", "fail", "hang", "badargs", "cancel")
TOOL_TIMEOUT = 5.0
IDLE_TIMEOUT = 60.0
CALLS = {
    "echo": ("echo", '{"text": "hi"}'),
    "fail": ("boom", "{}"),
    "hang": ("hang", "{}"),
    "badargs": ("echo", '{"text": '),
    "cancel": ("block", "{}"),
}


def respond(request: ModelRequest) -> ModelResponse:
    """Deterministic in the history: the same history gets the same answer in
    both worlds. Call ids come from the history's length, unique per
    conversation as long as the history only grows."""
    messages = request.messages
    user_at = max(i for i, m in enumerate(messages) if m.role is Role.USER)
    text = messages[user_at].content
    kind = text.split(" ")[0]
    step = sum(1 for m in messages[user_at:] if m.role is Role.ASSISTANT)
    if step == 0 and kind in CALLS:
        name, arguments = CALLS[kind]
        return ModelResponse(tool_calls=(ToolCall(f"call-{len(messages)}", name, arguments),))
    results = [m.content for m in messages[user_at:] if m.role is Role.TOOL]
    return ModelResponse(text=f"answer to {text} after {results}")


@attrs.define
class Tools:
    """The tools of one world. ``hang`` and ``block`` wait only when a rule
    armed them (with the event they set on entry); otherwise they answer."""

    entered: trio.Event | None = None

    async def echo(self, arguments: dict[str, object]) -> str:
        return f"echo {arguments.get('text')}"

    async def boom(self, arguments: dict[str, object]) -> str:
        raise RuntimeError("kaput")

    async def wait_if_armed(self, arguments: dict[str, object]) -> str:
        if self.entered is None:
            return "not armed"
        self.entered.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    def named(self) -> list[NamedTool]:
        schema = {"type": "object", "properties": {"text": {"type": "string"}}}
        return [
            NamedTool("echo", "Echo.", schema, self.echo),
            NamedTool("boom", "Fails.", {"type": "object"}, self.boom),
            NamedTool("hang", "Hangs.", {"type": "object"}, self.wait_if_armed),
            NamedTool("block", "Blocks.", {"type": "object"}, self.wait_if_armed),
        ]


Outcome = tuple[Any, ...]


@attrs.define
class World:
    """One agent over one backend, opened and closed inside the trio run."""

    backend: Backend
    clock: trio.testing.MockClock
    tools: Tools = attrs.Factory(Tools)
    agent: ChatAgent | None = None
    storage: StorageBundle | None = None
    _close: trio.Event | None = None
    _closed: trio.Event | None = None

    async def open(self, nursery: trio.Nursery) -> None:
        await nursery.start(self._serve)

    async def _serve(self, task_status: trio.TaskStatus[None]) -> None:
        self._close, self._closed = trio.Event(), trio.Event()
        try:
            async with self.backend.open() as storage:
                async with open_chat_agent(
                    model=ScriptedModel(respond),
                    storage=storage,
                    tools=self.tools.named(),
                    tool_timeout=TOOL_TIMEOUT,
                    idle_timeout=IDLE_TIMEOUT,
                    builtin_tools=False,
                ) as agent:
                    self.agent, self.storage = agent, storage
                    task_status.started()
                    await self._close.wait()
        finally:
            self.agent = self.storage = None
            self._closed.set()

    async def reopen(self, nursery: trio.Nursery) -> None:
        assert self._close is not None and self._closed is not None
        self._close.set()
        await self._closed.wait()
        await self.open(nursery)

    async def turn(self, conversation: str, text: str, key: str | None, arm: bool) -> Outcome:
        agent = self.agent
        assert agent is not None
        kind = text.split(" ")[0]
        entered = self.tools.entered = trio.Event() if arm else None
        outcome: list[Outcome] = []

        async def send() -> None:
            try:
                result = await agent.send(conversation, text, idempotency_key=key)
                messages = tuple((m.seq, shape(m)) for m in result.messages)
                outcome.append(("ok", result.text, messages))
            except TurnError as exc:
                outcome.append(("error", exc.code))
            finally:
                if entered is not None:
                    entered.set()  # stop waiting for a tool that did not run

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            if entered is not None:
                await entered.wait()
                if not outcome:
                    if kind == "hang":
                        self.clock.jump(TOOL_TIMEOUT)
                    else:
                        assert await agent.cancel(conversation) == 1
        self.tools.entered = None
        return outcome[0]

    async def histories(self) -> dict[str, list[Message]]:
        assert self.storage is not None
        return {c: await history(self.storage, c) for c in CONVERSATIONS}


class Host:
    """A trio run on a background thread, with a MockClock; ``call`` runs an
    async function there and returns its result."""

    def __init__(self) -> None:
        self.clock = trio.testing.MockClock()
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self.nursery: trio.Nursery | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        trio.run(self._main, clock=self.clock)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            self._scope = nursery.cancel_scope
            self._ready.set()
            await trio.sleep_forever()

    def call(self, function: Callable[..., Awaitable[T]], *args: object) -> T:
        return trio.from_thread.run(function, *args, trio_token=self._token)

    def stop(self) -> None:
        if self._token is not None and self._scope is not None:
            trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        self._thread.join(timeout=60)


class AgentMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="agentik-sm-"))
        self.host = Host()
        self.worlds = [
            World(Backend("memory", self.directory / "unused"), self.host.clock),
            World(Backend("sqlite", self.directory / "db"), self.host.clock),
        ]
        for world in self.worlds:
            self.host.call(world.open, self.host.nursery)
        self.counter = 0
        self.keys: list[tuple[str, str, str]] = []
        """(conversation, text, key) of every keyed turn sent."""
        self.acknowledged: dict[str, Outcome] = {}
        """key -> the first successful outcome of that key."""
        self.acked: dict[str, list[Outcome]] = collections.defaultdict(list)

    def teardown(self) -> None:
        self.host.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _send(self, conversation: str, text: str, key: str | None, *, arm: bool) -> Outcome:
        outcomes = [self.host.call(w.turn, conversation, text, key, arm) for w in self.worlds]
        assert outcomes[0] == outcomes[1], outcomes
        outcome = outcomes[0]
        if outcome[0] == "ok":
            self.acked[conversation].append(outcome)
        return outcome

    @rule(
        conversation=st.sampled_from(CONVERSATIONS),
        kind=st.sampled_from(KINDS),
        keyed=st.booleans(),
    )
    def turn(self, conversation: str, kind: str, keyed: bool) -> None:
        self.counter += 1
        text = f"{kind} #{self.counter}"
        key = f"k{self.counter}" if keyed else None
        outcome = self._send(conversation, text, key, arm=kind in ("hang", "cancel"))
        if kind == "cancel":
            assert outcome == ("error", "cancelled")
        else:
            assert outcome[0] == "ok"
            assert outcome[2][0][1][1] == text  # the user message comes first
        if key is not None:
            self.keys.append((conversation, text, key))
            if outcome[0] == "ok":
                self.acknowledged[key] = outcome

    @precondition(lambda self: bool(self.keys))
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        conversation, text, key = data.draw(st.sampled_from(self.keys))
        before = [self.host.call(w.histories) for w in self.worlds]
        outcome = self._send(conversation, text, key, arm=False)
        if key in self.acknowledged:
            assert outcome == self.acknowledged[key]
            after = [self.host.call(w.histories) for w in self.worlds]
            assert after == before  # a retried key never adds messages
        elif outcome[0] == "ok":
            self.acknowledged[key] = outcome

    @rule(what=st.sampled_from(["reopen", "idle"]))
    def disrupt(self, what: str) -> None:
        """Close and reopen both agents and their storage, or let time pass
        so every conversation task retires and reloads on its next turn."""
        if what == "reopen":
            for world in self.worlds:
                self.host.call(world.reopen, self.host.nursery)
            return

        async def pass_time() -> None:
            self.host.clock.jump(2 * IDLE_TIMEOUT)
            await trio.testing.wait_all_tasks_blocked()

        self.host.call(pass_time)
        for world in self.worlds:
            assert world.agent is not None
            assert world.agent.live_conversations == 0

    @invariant()
    def histories_are_valid_equal_and_complete(self) -> None:
        memory, sqlite = (self.host.call(w.histories) for w in self.worlds)
        for conversation in CONVERSATIONS:
            stored = sqlite[conversation]
            check_history(stored)
            check_history(memory[conversation])
            assert [shape(m) for m in memory[conversation]] == [shape(m) for m in stored]
            users = collections.Counter(m.content for m in stored if m.role is Role.USER)
            for _, _, messages in self.acked[conversation]:
                for seq, message_shape in messages:
                    assert shape(stored[seq - 1]) == message_shape
                assert users[messages[0][1][1]] == 1


def test_agent_state_machine() -> None:
    """Turns, faults, cancellations, retries, idleness and reopening keep both
    backends valid, in agreement, and exactly-once."""
    run_state_machine_as_test(
        AgentMachine,
        settings=settings(
            max_examples=200 if LONG else 20,
            stateful_step_count=50 if LONG else 20,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )

"""Assertions on what an agent stored and holds, for users' tests.

Each raises ``AssertionError`` with a message naming what was expected and
what was there, so a failing test reads without a debugger.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from agentik._messages import Message, Role, ToolCall
from agentik.agent import ApprovalRequest, ChatAgent
from agentik.storage import StorageBundle
from agentik.testing._script import arguments_of


async def history(source: ChatAgent | StorageBundle, conversation_id: str) -> list[Message]:
    """The conversation's stored messages, oldest first (from an agent's storage
    or a bundle)."""
    storage = source.storage if isinstance(source, ChatAgent) else source
    return [m async for m in storage.message_store.get_messages(conversation_id)]


def _check(condition: bool, message: str) -> None:
    # Not ``assert``: pytest rewrites the asserts of a plugin's package, which
    # would append its own explanation to these messages.
    if not condition:
        raise AssertionError(message)


def assert_valid_history(
    messages: Sequence[Message], *, awaiting: Iterable[ApprovalRequest | str] = ()
) -> None:
    """What a model API accepts: seqs 1, 2, 3 …; every assistant tool call has
    exactly one result, before the next user message; no result without its call.

    A turn paused for a person's approval is valid too when ``awaiting`` names
    its waiting calls (``result.approvals``, ``await agent.pending_approvals(…)``,
    or call ids): they, and the other calls of the same model answer (approved,
    waiting for the rest to be decided), may be without results, and nothing
    may follow that answer. Without ``awaiting`` every call needs its result."""
    seqs = [m.seq for m in messages]
    _check(seqs == list(range(1, len(messages) + 1)), f"seqs are not 1, 2, 3 …: {seqs}")
    open_calls: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        if m.role is Role.USER:
            _check(not open_calls, f"user message {m.seq} while calls {sorted(open_calls)} wait")
        open_calls.update(c.id for c in m.tool_calls)
        if m.role is Role.TOOL:
            call_id = m.tool_call_id or ""
            _check(call_id in open_calls, f"message {m.seq} answers unknown call {call_id!r}")
            _check(call_id not in answered, f"call {call_id!r} has two results")
            open_calls.discard(call_id)
            answered.add(call_id)
    waiting = {a if isinstance(a, str) else a.call.id for a in awaiting}
    if not waiting:
        _check(
            not open_calls,
            f"calls without results: {sorted(open_calls)} (for a turn paused for approval,"
            " pass awaiting=result.approvals)",
        )
        return
    _check_paused(messages, waiting, open_calls, answered)


def _check_paused(
    messages: Sequence[Message], waiting: set[str], open_calls: set[str], answered: set[str]
) -> None:
    """The calls without results are those of the last model answer that
    called tools, ``waiting`` among them, and no message but results follows it."""
    decided = sorted(waiting & answered)
    _check(not decided, f"calls {decided} are said to wait for approval but have results")
    at = max((i for i, m in enumerate(messages) if m.tool_calls), default=-1)
    ids = {c.id for c in messages[at].tool_calls} if at >= 0 else set()
    unknown = sorted(waiting - ids)
    _check(
        not unknown,
        f"calls {unknown} are said to wait for approval but are not calls of the last"
        " model answer that called tools",
    )
    elsewhere = sorted(open_calls - ids)
    _check(not elsewhere, f"calls without results: {elsewhere}")
    after = [m.seq for m in messages[at + 1 :] if m.role is not Role.TOOL]
    _check(not after, f"messages {after} follow the answer whose calls wait for approval")


def assert_tool_called(
    messages: Sequence[Message], tool: str, arguments: Mapping[str, object] | None = None
) -> ToolCall:
    """The first call of ``tool`` (with exactly ``arguments``, parsed as JSON,
    when given); its result must be stored too. Returns the call."""
    calls = [c for m in messages if m.role is Role.ASSISTANT for c in m.tool_calls]
    named = [c for c in calls if c.name == tool]
    _check(bool(named), f"tool {tool!r} was not called; calls: {[c.name for c in calls] or 'none'}")
    if arguments is not None:
        wanted = dict(arguments)
        matching = [c for c in named if arguments_of(c) == wanted]
        _check(
            bool(matching),
            f"tool {tool!r} was not called with {wanted!r}; it was called with"
            f" {[c.arguments for c in named]}",
        )
        named = matching
    call = named[0]
    results = [m for m in messages if m.role is Role.TOOL and m.tool_call_id == call.id]
    _check(bool(results), f"the call {call.id!r} of tool {tool!r} has no stored result")
    return call


def tool_result(messages: Sequence[Message], call: ToolCall) -> str:
    """The stored result of ``call`` (``AssertionError`` if it has none)."""
    for m in messages:
        if m.role is Role.TOOL and m.tool_call_id == call.id:
            return m.content
    raise AssertionError(f"the call {call.id!r} of tool {call.name!r} has no stored result")


def assert_toolset_active(agent: ChatAgent, conversation_id: str, name: str) -> None:
    """The toolset ``name`` is active in the conversation now (the agent's
    clock: on a MockClock, expiry follows the mock time)."""
    status = {s.name: s for s in agent.toolset_status(conversation_id)}
    _check(name in status, f"toolset {name!r} is not one of the agent's: {sorted(status)}")
    active = sorted(s.name for s in status.values() if s.active)
    _check(status[name].active, f"toolset {name!r} is not active; active: {active or 'none'}")


def assert_toolset_inactive(agent: ChatAgent, conversation_id: str, name: str) -> None:
    """The toolset ``name`` is one of the agent's and is not active in the conversation."""
    status = {s.name: s for s in agent.toolset_status(conversation_id)}
    _check(name in status, f"toolset {name!r} is not one of the agent's: {sorted(status)}")
    _check(not status[name].active, f"toolset {name!r} is active")

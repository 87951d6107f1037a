"""What a turn and its helpers use of the conversation they run in.

``Conversation`` (``_conversation``) starts turns (``_turn``), and the turn's
helpers (``_request``, ``_tool_run``, ``_turn_spans``, ``_turn_writes``) read
and extend the conversation's state. Naming that state here, as a protocol,
keeps the import graph a tree: the helpers depend on this page, not on the
class that imports them. Only the conversation's own task calls into a turn,
so every field here is read and written by that one task.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from agentik._messages import Message
from agentik.agent._builtin_tools import ConversationState
from agentik.toolsets import ToolsetActivation, ToolsetIndex

if TYPE_CHECKING:
    from agentik.agent._history_cache import HistoryCache
    from agentik.agent._requests import Request
    from agentik.agent._runtime import AgentRuntime

PromptInputs = tuple[
    ToolsetIndex, frozenset[str], Sequence[object], Sequence[object], tuple[int, ...]
]
"""What agentik's own prompt contributors read: the toolsets, the active ones,
the skills catalog, recent reflections (both cached lists: the same object
until a write), and the working-memory notes (by id: notes never change)."""


class TurnHost(ConversationState, Protocol):
    """The conversation as its turn sees it (``Conversation`` implements it);
    its conversation-bound tools see the smaller ``ConversationState``."""

    runtime: AgentRuntime
    activation: ToolsetActivation
    cache: HistoryCache
    """The stored history (the turn's messages appended as they are
    submitted), the idempotency keys seen, the writes in flight."""
    system_prompt: tuple[PromptInputs, Message] | None
    """The last system message and what it was built from (reused while equal)."""
    toolsets_seen: frozenset[str]

    @property
    def running(self) -> Request | None: ...

    @property
    def interrupted(self) -> bool: ...

    async def check_tenure(self) -> None:
        """Stop the turn (interrupted) if this node no longer holds the conversation."""
        ...

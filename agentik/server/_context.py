"""What every handler shares: the agent, the configuration, and server-wide counters.

One ``ServerContext`` per running server. It holds no conversation state:
history, activations and turns live in the agent and its store. The A2A task
ledger only remembers which task ids this process is running, cancelled or
created, so GetTask can say WORKING and ListTasks has ids to list.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from agentik._config import ServerConfig
from agentik.agent import ChatAgent
from agentik.storage import WriterStats

if TYPE_CHECKING:
    from agentik.mcp import McpToolset

TASK_LEDGER_SIZE = 10_000


@attrs.define
class TaskLedger:
    """A2A task ids this process has seen, bounded; history stays the source of truth."""

    running: dict[str, str] = attrs.field(factory=dict)
    """task id -> context id, while its turn runs."""
    cancelled: collections.OrderedDict[str, None] = attrs.field(factory=collections.OrderedDict)
    created: collections.OrderedDict[str, str] = attrs.field(factory=collections.OrderedDict)
    """task id -> context id, oldest first."""

    def start(self, task_id: str, context_id: str) -> None:
        self.running[task_id] = context_id
        if len(self.running) > TASK_LEDGER_SIZE:  # streams left early never saw their end
            del self.running[next(iter(self.running))]
        self.created[task_id] = context_id
        self.created.move_to_end(task_id)
        while len(self.created) > TASK_LEDGER_SIZE:
            self.created.popitem(last=False)

    def finish(self, task_id: str) -> None:
        self.running.pop(task_id, None)

    def mark_cancelled(self, task_id: str) -> None:
        self.cancelled[task_id] = None
        while len(self.cancelled) > TASK_LEDGER_SIZE:
            self.cancelled.popitem(last=False)


@attrs.define
class ServerContext:
    agent: ChatAgent
    config: ServerConfig
    model_label: str
    """What answers: ``scripted demo model`` or ``<model> at <base_url>``."""
    demo_model: bool
    storage_label: str
    writer_gauges: Callable[[], WriterStats | None] = lambda: None
    started: float = attrs.field(factory=time.monotonic)
    http_requests: collections.Counter[str] = attrs.field(factory=collections.Counter)
    tasks: TaskLedger = attrs.field(factory=TaskLedger)
    mcp: tuple[McpToolset, ...] = ()
    """MCP servers served as toolsets, for their health."""
    base_url: str = "http://127.0.0.1:8080"
    """The URL clients reach this server at (the A2A card's interface URL)."""

    @property
    def uptime(self) -> float:
        return time.monotonic() - self.started

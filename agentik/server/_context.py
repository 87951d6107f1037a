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
from typing import TYPE_CHECKING, TypeAlias

import attrs
import trio

from agentik._config import ServerConfig
from agentik.agent import ChatAgent
from agentik.storage import WriterStats

if TYPE_CHECKING:
    from agentik.mcp import McpToolset

TASK_LEDGER_SIZE = 10_000

TaskKey: TypeAlias = tuple[str, str]
"""(stored context id, task id): the stored id carries the owner, so two owners'
tasks never share an entry even when their task ids are equal."""


def _bounded_add(entries: collections.OrderedDict[TaskKey, None], key: TaskKey) -> None:
    entries[key] = None
    entries.move_to_end(key)
    while len(entries) > TASK_LEDGER_SIZE:
        entries.popitem(last=False)


@attrs.define
class TaskLedger:
    """A2A tasks this process has seen, bounded; history stays the source of truth."""

    running: collections.OrderedDict[TaskKey, None] = attrs.field(factory=collections.OrderedDict)
    """While its turn runs (bounded: streams left early never saw their end)."""
    cancelled: collections.OrderedDict[TaskKey, None] = attrs.field(factory=collections.OrderedDict)
    created: collections.OrderedDict[TaskKey, None] = attrs.field(factory=collections.OrderedDict)
    """Oldest first."""

    def start(self, key: TaskKey) -> None:
        _bounded_add(self.running, key)
        _bounded_add(self.created, key)

    def finish(self, key: TaskKey) -> None:
        self.running.pop(key, None)

    def mark_cancelled(self, key: TaskKey) -> None:
        _bounded_add(self.cancelled, key)


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
    background: trio.Nursery | None = None
    """Where turns that outlive their request run (A2A ``returnImmediately``):
    the server's own nursery, so shutdown waits for them."""

    @property
    def uptime(self) -> float:
        return time.monotonic() - self.started

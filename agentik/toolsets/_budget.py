"""The tools budget: the active toolsets' schemas fit it, least recently used out first.

A conversation's active toolsets take at most ``budget`` tokens of tool
schemas (``ContextPolicy.tools_budget``). Switching one on when that would
not fit first switches off the least recently used others until it does,
with room to spare (below); a
toolset that alone needs more than the budget is refused (``OverBudget``).
``budget=None`` (no context policy) bounds nothing.

Switching off makes room in one go, down to a quarter of the budget
(``LOW_WATER``), not just enough for the toolset switched on: every
switch-off rewrites the tools array in the middle, which costs the
provider's prompt cache the whole request after it (tools come before the
system prompt and the history), so one switch-off that leaves headroom is
cheaper than one on every later enable; and fewer stale schemas ride along
on every request. Between switch-offs the array only grows at its end
(enabling only adds, ``ToolsetActivation``), so each switch-off is the one
request whose tools array does not start with the one before.

What to switch off is decided by ``room_for`` from the activation's recency
and the index's costs, reading no clock of its own; ``switch_on`` applies it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from agentik._errors import ToolError
from agentik.toolsets._activation import ToolsetActivation
from agentik.toolsets._dispatch import ToolsetIndex

LOW_WATER = 4
"""When switching on would pass the budget, the least recently used toolsets
go until the active ones take at most ``budget // LOW_WATER``, or no other is
left. Measured on bench.toolsets (seeds 1 to 4): fewer tokens and prefix
breaks than half, and within 0.3 points of flat's tokens and one break of
switching off every other toolset, while the toolsets used last (the task
under way's, which a conversation comes back to) stay (docs/toolsets.md)."""


class OverBudget(ToolError):
    """A toolset (or the tools asked of it) needs more than the whole tools budget."""

    def __init__(self, name: str, needed: int, budget: int) -> None:
        super().__init__(
            f"toolset {name!r} needs {needed:,} tokens of tool schemas, more than the"
            f" tools budget of {budget:,} tokens"
        )
        self.name = name
        self.needed = needed
        self.budget = budget


def room_for(
    index: ToolsetIndex,
    activation: ToolsetActivation,
    name: str,
    tools: frozenset[str] | None,
    budget: int | None,
) -> tuple[str, ...]:
    """The active toolsets to switch off, least recently used first, so that
    ``name`` (only ``tools`` of it, or whole) fits ``budget`` with the rest:
    none when it fits; else down to ``budget // LOW_WATER`` with it, or as
    near as switching off every other toolset gets.

    Raises ``OverBudget`` when ``name`` alone does not fit.
    """
    if budget is None:
        return ()
    needed = index.cost_of(name, tools)
    if needed > budget:
        raise OverBudget(name, needed, budget)
    costs = {
        other: index.cost_of(other, chosen)
        for other, chosen in activation.selection()
        if other != name and index.get(other) is not None  # a vanished toolset costs nothing
    }
    total = needed + sum(costs.values())
    if total <= budget:
        return ()
    low = budget // LOW_WATER
    out: list[str] = []
    for other in activation.least_recently_used():
        if total <= low:
            break
        if other in costs:
            total -= costs[other]
            out.append(other)
    return tuple(out)


def selection_after(
    index: ToolsetIndex, activation: ToolsetActivation, name: str, tools: frozenset[str] | None
) -> frozenset[str] | None:
    """What of toolset ``name`` is enabled once ``tools`` of it are (None:
    whole): enabling only adds, so the union with what is enabled of it
    already; whole once it holds every tool of the toolset."""
    if tools is None or not activation.is_active(name):
        return _whole_if_all(index, name, tools)
    before = activation.tools_of(name)
    return None if before is None else _whole_if_all(index, name, before | tools)


def _whole_if_all(
    index: ToolsetIndex, name: str, tools: frozenset[str] | None
) -> frozenset[str] | None:
    contribution = index.get(name)
    if tools is None or contribution is None:
        return tools
    return None if tools.issuperset(t.name for t in contribution.tools) else tools


def switch_on(
    index: ToolsetIndex,
    activation: ToolsetActivation,
    name: str,
    tools: Collection[str] | None,
    budget: int | None,
) -> tuple[str, ...]:
    """Switch ``name`` on (only ``tools`` of it, or whole), adding to what
    is enabled of it already, within ``budget``; the toolsets switched off to
    make room, least recently used first. ``name`` itself among them means
    its tools enabled before had to go: with them, it would not fit even
    alone (it keeps only ``tools``)."""
    chosen = None if tools is None else frozenset(tools)
    after = selection_after(index, activation, name, chosen)
    try:
        evicted = room_for(index, activation, name, after, budget)
    except OverBudget:
        alone = _whole_if_all(index, name, chosen)
        if after == alone:
            raise
        evicted = (name, *room_for(index, activation, name, alone, budget))
        after = alone
    for other in evicted:
        if other == name:
            assert chosen is not None  # ``after`` would equal ``alone``
            activation.keep_only(name, chosen)
        else:
            activation.disable(other)
    activation.enable(name, after if after is None else chosen)
    return evicted


def activate_for_call(
    index: ToolsetIndex,
    activation: ToolsetActivation,
    toolset: str,
    tool: str,
    budget: int | None,
) -> None:
    """A call of ``tool`` starts: count a use of its ``toolset``, switching on
    what the call needs (the whole toolset if it fits the budget, else the
    tool alone, added to those enabled of a toolset enabled in part, or
    instead of them if both do not fit), never past the budget. A tool that
    alone needs more than the budget runs without being switched on. The
    model is told nothing: the call runs and returns its own result."""
    if index.get(toolset) is None:  # its source changed since the call was planned
        activation.enable(toolset)
        return
    attempts: Sequence[frozenset[str] | None]
    if activation.is_active(toolset):
        chosen = activation.tools_of(toolset)
        if chosen is None or tool in chosen:
            activation.touch(toolset)
            return
        attempts = (frozenset({tool}),)  # added, or instead of the others if need be
    else:
        attempts = (None, frozenset({tool}))
    for tools in attempts:
        try:
            switch_on(index, activation, toolset, tools, budget)
        except OverBudget:
            continue
        return
    activation.touch(toolset)


def switched_off_text(names: Sequence[str], enabled: str | None = None) -> str:
    """``'Y' was switched off to make room.`` or ``'Y' and 'Z' were …``;
    ``enabled`` among ``names`` is said ``its other tools``."""
    quoted = ["its other tools" if name == enabled else f"'{name}'" for name in names]
    if len(quoted) == 1 and names[0] != enabled:
        return f"{quoted[0]} was switched off to make room."
    if len(quoted) == 1:
        return f"{quoted[0]} were switched off to make room."
    return f"{', '.join(quoted[:-1])} and {quoted[-1]} were switched off to make room."

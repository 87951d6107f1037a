"""Dispatch: which tool a call runs, and which toolset it switches on. Pure.

``dispatch(active, contributions, call, core_tools) -> Run | Error`` decides, in
this order: a core tool; a tool of an active toolset; a tool of an inactive
toolset (``Run`` with ``activates`` set, and the caller enables it before
running — the model is never told); otherwise ``Error("tool 'X' not found")``.
Only the tool *name* counts: arguments are checked later, so a malformed call
to an inactive toolset's tool still activates it.

No I/O, no clock, no mutation of its inputs: the conversation actor applies the
outcome. ``ToolsetIndex`` is built once per set of contributions so each
dispatch is a couple of dict look-ups, whatever the number of toolsets.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import overload

import attrs

from agentik._messages import ToolCall
from agentik.toolsets._contribution import ToolsetContribution
from agentik.toolsets._cost import ToolCosts
from agentik.toolsets._failure import quoted
from agentik.toolsets._named_tool import NamedTool
from agentik.toolsets._prompt import render_toolset_section
from agentik.toolsets._search import BM25, words


@attrs.frozen
class Run:
    """Run ``tool``; first enable ``activates`` if it is set."""

    tool: NamedTool
    activates: str | None = None
    """The inactive toolset to enable before running, or None."""
    toolset: str | None = attrs.field(default=None, eq=False)
    """The toolset the tool belongs to (None for a core tool): the one to touch as used.

    Derived from the dispatch (the tool name's prefix, unless a core tool took
    the name), so it takes no part in equality: ``Run(tool, activates)`` is the
    contract of DESIGN.md.
    """


@attrs.frozen
class Error:
    """The call cannot run; ``message`` becomes the error tool result the model sees."""

    message: str


_SECTION_CACHE_SIZE = 32
_ESTIMATED = ToolCosts()
"""Costs under the offline estimate: an index built without a policy's counter."""

Selection = tuple[tuple[str, frozenset[str] | None], ...]
"""Active toolsets in activation order, each with the tools enabled of it
(None: all of them): ``ToolsetActivation.selection()``."""


def _not_found(name: str) -> Error:
    return Error(f"tool {quoted(name)} not found")


class ToolsetIndex(Sequence[ToolsetContribution]):
    """Contributions indexed by toolset name and by tool name, built once.

    It is itself the (immutable) sequence of contributions, so it can be passed
    wherever contributions are expected. Raises ``ValueError`` when two
    contributions share a toolset name. ``costs`` measures the tools'
    schemas (the context policy's counter; the offline estimate by default);
    each toolset's cost is summed once, on first use.
    """

    __slots__ = (
        "_by_name",
        "_contributions",
        "_costs",
        "_names",
        "_search",
        "_sections",
        "_set_costs",
        "_tools",
    )

    def __init__(
        self, contributions: Sequence[ToolsetContribution] = (), costs: ToolCosts | None = None
    ) -> None:
        items = tuple(contributions)
        by_name: dict[str, ToolsetContribution] = {}
        # tool name -> (toolset, outcome when active, outcome when inactive): the
        # outcomes are immutable, so they are built once here, not per call.
        tools: dict[str, tuple[str, Run, Run]] = {}
        for contribution in items:
            if not isinstance(contribution, ToolsetContribution):
                raise ValueError(f"expected a ToolsetContribution, got {contribution!r}")
            if contribution.name in by_name:
                raise ValueError(f"toolset {contribution.name!r} is contributed twice")
            by_name[contribution.name] = contribution
            for named in contribution.tools:
                # Unique toolset names and the prefix rule make tool names unique too.
                name = contribution.name
                tools[named.name] = (name, Run(named, None, name), Run(named, name, name))
        self._contributions = items
        self._by_name = by_name
        self._tools = tools
        self._names = tuple(by_name)
        self._sections: dict[frozenset[str], str | None] = {}
        self._costs = _ESTIMATED if costs is None else costs
        self._set_costs: dict[str, int] | None = None
        self._search: tuple[BM25, tuple[tuple[str, NamedTool], ...]] | None = None

    @property
    def costs(self) -> ToolCosts:
        """What measures the tools' schemas."""
        return self._costs

    @property
    def toolset_costs(self) -> Mapping[str, int]:
        """Tokens of each toolset's schemas (all its tools), by name."""
        if self._set_costs is None:
            total = self._costs.total
            self._set_costs = {c.name: total(c.tools) for c in self._contributions}
        return self._set_costs

    @property
    def total_cost(self) -> int:
        """Tokens of every toolset's schemas: what offering them all would take."""
        return sum(self.toolset_costs.values())

    def cost_of(self, name: str, tools: frozenset[str] | None = None) -> int:
        """Tokens of toolset ``name``'s schemas, or of those of its ``tools`` only."""
        if tools is None:
            return self.toolset_costs[name]
        of = self._costs.of
        return sum(of(t) for t in self._by_name[name].tools if t.name in tools)

    def tools_of(
        self, selection: Iterable[tuple[str, frozenset[str] | None]]
    ) -> tuple[NamedTool, ...]:
        """The tools ``selection`` enables, entry by entry in its order (an
        entry's tools in their contribution order): a stable tools array, so
        consecutive requests share the longest prefix. A toolset may come in
        several entries (``ToolsetActivation.offer_order``): a later None
        entry adds its tools not given before. Unknown names are skipped."""
        out: list[NamedTool] = []
        by_name = self._by_name
        given: dict[str, set[str]] = {}
        for name, tools in selection:
            contribution = by_name.get(name)
            if contribution is None:
                continue
            if tools is None:
                before = given.get(name)
                picked = [t for t in contribution.tools if before is None or t.name not in before]
            else:
                picked = [t for t in contribution.tools if t.name in tools]
            out.extend(picked)
            given.setdefault(name, set()).update(t.name for t in picked)
        return tuple(out)

    def find_tools(self, query: str, limit: int) -> tuple[tuple[str, NamedTool], ...]:
        """The ``limit`` tools of all toolsets that best match ``query``
        (BM25 over names and descriptions), best first, each with its
        toolset; none when no word matches. Indexed on first use."""
        if self._search is None:
            entries = tuple((c.name, t) for c in self._contributions for t in c.tools)
            documents = [
                words(f"{t.name} {t.description} {name} {self._by_name[name].description}")
                for name, t in entries
            ]
            self._search = (BM25(documents), entries)
        ranking, entries = self._search
        return tuple(entries[i] for i in ranking.top(words(query), limit))

    @property
    def names(self) -> tuple[str, ...]:
        """The toolset names, in contribution order."""
        return self._names

    def get(self, name: str) -> ToolsetContribution | None:
        """The contribution called ``name``, or None."""
        return self._by_name.get(name)

    def toolset_of(self, tool_name: str) -> str | None:
        """The toolset containing the tool ``tool_name``, or None."""
        entry = self._tools.get(tool_name)
        return None if entry is None else entry[0]

    def tools_for(self, active: frozenset[str] | set[str]) -> tuple[NamedTool, ...]:
        """The tools of the active toolsets, in contribution order: what the model is offered."""
        return tuple(
            named
            for contribution in self._contributions
            if contribution.name in active
            for named in contribution.tools
        )

    def render_section(self, active: frozenset[str]) -> str | None:
        """``render_toolset_section(self, active, self.toolset_costs)``, remembered
        for the last few active sets.

        Most conversations share a handful of active sets (often the empty
        one), so the catalog text is built once per set, not once per request.
        """
        sections = self._sections
        if active in sections:
            return sections[active]
        section = render_toolset_section(
            self._contributions, active, self.toolset_costs if self._contributions else None
        )
        if len(sections) >= _SECTION_CACHE_SIZE:
            del sections[next(iter(sections))]
        sections[active] = section
        return section

    def dispatch(
        self, active: frozenset[str], call: ToolCall, core_tools: Mapping[str, NamedTool]
    ) -> Run | Error:
        """Decide what ``call`` runs; see the module docstring for the order."""
        name = call.name
        core = core_tools.get(name)
        if core is not None:
            return Run(core)
        entry = self._tools.get(name)
        if entry is None:
            return _not_found(name)
        return entry[1] if entry[0] in active else entry[2]

    def __len__(self) -> int:
        return len(self._contributions)

    @overload
    def __getitem__(self, index: int) -> ToolsetContribution: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[ToolsetContribution]: ...
    def __getitem__(
        self, index: int | slice
    ) -> ToolsetContribution | Sequence[ToolsetContribution]:
        return self._contributions[index]

    def __iter__(self) -> Iterator[ToolsetContribution]:
        return iter(self._contributions)

    def __repr__(self) -> str:
        return f"ToolsetIndex({list(self._names)!r})"


def index_of(contributions: Sequence[ToolsetContribution]) -> ToolsetIndex:
    """The index of ``contributions``: itself if it is one, else a fresh one."""
    if isinstance(contributions, ToolsetIndex):
        return contributions
    return ToolsetIndex(contributions)


def dispatch(
    active: frozenset[str],
    contributions: Sequence[ToolsetContribution],
    call: ToolCall,
    core_tools: Mapping[str, NamedTool],
) -> Run | Error:
    """Decide what ``call`` runs: core tool, active toolset tool, inactive
    toolset tool (auto-activated), or ``Error("tool 'X' not found")``.

    O(1) in the number of toolsets and tools when ``contributions`` is a
    ``ToolsetIndex`` (build it once and keep it, as the runtime does); any
    other sequence is indexed afresh on every call.
    """
    return index_of(contributions).dispatch(active, call, core_tools)

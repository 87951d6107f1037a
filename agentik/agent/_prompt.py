"""The system prompt, assembled from small contributors.

Each contributor renders one section from a ``PromptContext`` (what the
conversation knows right now) or returns None to stay out. The system message
is built afresh for every model request and never stored, so a toolset
enabled mid-turn shows in the very next request.

The sections of stored data (skills, notes, reflections) take at most their
budget of tokens (``PromptContext.*_budget``, from ``ContentLimits`` and the
context policy): past it a section keeps each row that still fits, in order
of preference (the newest notes and reflections first, the skills in catalog
order), and says in one line what it left out (the notes: their ids, so the
model can compact them). So no amount of stored data can crowd the
conversation out of a request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import attrs

from agentik._errors import TurnError
from agentik._memory import MemoryEntry, Reflection, SkillSummary
from agentik.agent._context import estimate_tokens
from agentik.agent._failures import component_error
from agentik.toolsets import ToolsetContribution, ToolsetIndex, render_toolset_section


@attrs.frozen
class PromptContext:
    """What the contributors may look at; all of it already in memory."""

    conversation_id: str
    contributions: Sequence[ToolsetContribution]
    active_toolsets: frozenset[str]
    skills: Sequence[SkillSummary]
    memory: Sequence[MemoryEntry]
    reflections: Sequence[Reflection]
    skills_budget: int | None = None
    """Tokens the skills section may take (None: no bound)."""
    memory_budget: int | None = None
    """Tokens the working-memory section may take (None: no bound)."""
    reflections_budget: int | None = None
    """Tokens the reflections section may take (None: no bound)."""
    count_tokens: Callable[[str], int] = estimate_tokens
    """How the budgets count: the context policy's counter, or the estimate."""


class SystemPromptContributor(Protocol):
    """One section of the system prompt."""

    def render(self, context: PromptContext) -> str | None: ...


@attrs.frozen
class BasePrompt:
    """The configured system prompt, verbatim."""

    text: str

    def render(self, context: PromptContext) -> str | None:
        return self.text or None


@attrs.frozen
class ToolsetSection:
    """The toolset catalog (absent when there are no toolsets)."""

    def render(self, context: PromptContext) -> str | None:
        contributions = context.contributions
        if isinstance(contributions, ToolsetIndex):
            # The index remembers the text per active set: no rebuild per request.
            return contributions.render_section(context.active_toolsets)
        return render_toolset_section(contributions, context.active_toolsets)


@attrs.frozen
class SkillsCatalog:
    """Names and descriptions of saved skills; bodies load on demand."""

    def render(self, context: PromptContext) -> str | None:
        if not context.skills:
            return None
        head = '## Skills\nLoad one with skill_load({"name": X}) before following it.\n\n'
        rows = [f"{s.name} — {s.description}" for s in context.skills]
        return fit_rows(
            head,
            rows,
            context.skills_budget,
            context.count_tokens,
            lambda dropped: (
                f"… and {len(dropped)} more skill{_s(len(dropped))} not listed"
                " (skill_load loads any by name)"
            ),
        )


_IDS_SHOWN = 10
"""Ids of notes left out of the prompt that it names (the model may compact them)."""


@attrs.frozen
class WorkingMemorySection:
    """The conversation's active working-memory notes, with their ids."""

    def render(self, context: PromptContext) -> str | None:
        if not context.memory:
            return None
        head = (
            "## Working memory\nYour notes for this conversation (memory_add, memory_compact):\n\n"
        )
        notes = context.memory
        rows = [f"[{e.id}] {e.text}" for e in notes]

        def left_out(dropped: Sequence[int]) -> str:
            n = len(dropped)
            ids = ", ".join(f"[{notes[i].id}]" for i in dropped[:_IDS_SHOWN])
            if n > _IDS_SHOWN:
                ids += ", …"
            return (
                f"({n} note{_s(n)} not shown: {ids}; memory_compact or"
                " memory_archive them to make room)"
            )

        return fit_rows(
            head, rows, context.memory_budget, context.count_tokens, left_out, newest_last=True
        )


@attrs.frozen
class ReflectionsSection:
    """Recent lessons drawn after earlier turns, newest first."""

    def render(self, context: PromptContext) -> str | None:
        if not context.reflections:
            return None
        return fit_rows(
            "## Lessons from earlier conversations\n",
            [f"- {r.text}" for r in context.reflections],
            context.reflections_budget,
            context.count_tokens,
            lambda dropped: f"({len(dropped)} lesson{_s(len(dropped))} not shown)",
        )


def fit_rows(
    head: str,
    rows: Sequence[str],
    budget: int | None,
    count: Callable[[str], int],
    left_out: Callable[[Sequence[int]], str],
    *,
    newest_last: bool = False,
) -> str | None:
    """``head`` and ``rows``, one a line, in at most ``budget`` tokens.

    Past the budget it takes rows in order of preference (first to last; last
    to first with ``newest_last``, rows being oldest first), each that still
    fits, so one huge row hides no other; shows them in their own order; and
    adds the line ``left_out(indices)`` for those it dropped (first, when
    ``newest_last``). None when not even the head and that line fit."""
    text = head + "\n".join(rows)
    if budget is None or count(text) <= budget:
        return text
    everything = range(len(rows))
    # Rows cost what they count plus their newline: counted one by one, as
    # the offline estimate rounds up per row, the sum is never below the whole.
    room = budget - count(head) - count(left_out(everything)) - 1
    kept: list[int] = []
    for i in reversed(everything) if newest_last else everything:
        cost = count(rows[i]) + 1
        if cost <= room:
            kept.append(i)
            room -= cost
    while True:  # a counter that is not additive may need fewer rows
        chosen = sorted(kept)
        taken = set(chosen)
        line = left_out([i for i in everything if i not in taken])
        shown = [rows[i] for i in chosen]
        text = head + "\n".join([line, *shown] if newest_last else [*shown, line])
        if count(text) <= budget:
            return text
        if not kept:
            return None
        kept.pop()  # the least preferred of those kept


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def default_contributors(system_prompt: str) -> tuple[SystemPromptContributor, ...]:
    """The standard chain: base prompt, toolsets, skills, memory, reflections."""
    return (
        BasePrompt(system_prompt),
        ToolsetSection(),
        SkillsCatalog(),
        WorkingMemorySection(),
        ReflectionsSection(),
    )


def render_system_prompt(
    contributors: Sequence[SystemPromptContributor], context: PromptContext
) -> str:
    """Join the sections that have something to say, one blank line apart.

    Raises ``TurnError`` (``internal_error``) naming a contributor that raised
    or returned something other than a string or None: it fails the turn
    that asked, not the conversation."""
    sections = []
    for contributor in contributors:
        try:
            section = contributor.render(context)
        except Exception as exc:
            raise component_error(_named("system prompt contributor", contributor), exc) from exc
        if section is None:
            continue
        if not isinstance(section, str):
            raise TurnError(
                f"{_named('system prompt contributor', contributor)} returned"
                f" {type(section).__name__}, expected str or None",
                code="internal_error",
            )
        sections.append(section)
    return "\n\n".join(sections)


def _named(what: str, contributor: object) -> str:
    return f"{what} {type(contributor).__name__}"

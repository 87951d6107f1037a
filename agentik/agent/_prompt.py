"""The system prompt, assembled from small contributors.

Each contributor renders one section from a ``PromptContext`` (what the
conversation knows right now) or returns None to stay out. The system message
is built afresh for every model request and never stored, so a toolset
enabled mid-turn shows in the very next request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from agentik._errors import TurnError
from agentik._memory import MemoryEntry, Reflection, SkillSummary
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
        rows = "\n".join(f"{s.name} — {s.description}" for s in context.skills)
        return f'## Skills\nLoad one with skill_load({{"name": X}}) before following it.\n\n{rows}'


@attrs.frozen
class WorkingMemorySection:
    """The conversation's active working-memory notes, with their ids."""

    def render(self, context: PromptContext) -> str | None:
        if not context.memory:
            return None
        rows = "\n".join(f"[{e.id}] {e.text}" for e in context.memory)
        return (
            "## Working memory\n"
            "Your notes for this conversation (memory_add, memory_compact):\n\n" + rows
        )


@attrs.frozen
class ReflectionsSection:
    """Recent lessons drawn after earlier turns, newest first."""

    def render(self, context: PromptContext) -> str | None:
        if not context.reflections:
            return None
        rows = "\n".join(f"- {r.text}" for r in context.reflections)
        return "## Lessons from earlier conversations\n" + rows


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

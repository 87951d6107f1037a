"""Bounds on skills and notes: what may be stored, and how much of a system prompt they take.

Skills and working-memory notes are written by the model (the built-in
tools), by HTTP clients and by Python code, and every system prompt of their
owner carries them. Unbounded, one 900 KB skill description exhausted every
conversation's context. So there are two kinds of bound, both in
``ContentLimits``:

- **Sizes**, checked on every write made through the agent
  (``ChatAgent.storage``, which the built-in tools and the HTTP routes use):
  a skill's name, description and body, a note's text, in characters. A
  write past one raises ``TooLargeError`` and stores nothing.
- **Prompt shares**, in tokens: the skills catalog, the notes and the recent
  reflections each take at most their budget of a system message; with a
  context policy, also at most a fixed share of its ``max_tokens``
  (``SKILLS_SHARE``, ``NOTES_SHARE``, ``REFLECTIONS_SHARE``: 30 % together), so
  no amount of stored data can exhaust the window a turn needs. A section cut
  to its budget says how many rows it left out (``_prompt``). A tool result
  (``skill_load``'s body among them) takes at most ``TOOL_RESULT_SHARE``.
"""

from __future__ import annotations

from typing import final

import attrs

from agentik._errors import TooLargeError
from agentik._memory import Skill
from agentik._scope import split_scope

SKILLS_SHARE = 0.10
"""With a context policy, the skills catalog takes at most this share of ``max_tokens``."""
NOTES_SHARE = 0.15
"""With a context policy, the working-memory notes take at most this share."""
REFLECTIONS_SHARE = 0.05
"""With a context policy, the recent reflections take at most this share."""
TOOL_RESULT_SHARE = 0.25
"""With a context policy, one tool result (a loaded skill's body, say) takes at
most this share of ``max_tokens``; the rest is cut, as ``max_tool_output`` cuts."""


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


@final
@attrs.frozen(kw_only=True)
class ContentLimits:
    """Size limits on skills and notes (characters), and the tokens of a system
    prompt their sections may take (``open_chat_agent(content_limits=...)``;
    ``agentik serve``: the ``[limits]`` settings of the same names)."""

    max_skill_name: int = attrs.field(default=64, validator=_positive)
    max_skill_description: int = attrs.field(default=500, validator=_positive)
    """One line that says when to use the skill: every prompt of its owner shows it."""
    max_skill_body: int = attrs.field(default=32_000, validator=_positive)
    """Loaded on demand (``skill_load``), so larger; still one tool result."""
    max_note: int = attrs.field(default=4_000, validator=_positive)
    """A working-memory note (``memory_add``), or the summary that replaces
    several (``memory_compact``)."""
    skills_prompt_tokens: int = attrs.field(default=2_000, validator=_positive)
    """Tokens the skills catalog may take in a system message."""
    notes_prompt_tokens: int = attrs.field(default=4_000, validator=_positive)
    """Tokens the working-memory notes may take (the newest are kept)."""
    reflections_prompt_tokens: int = attrs.field(default=1_000, validator=_positive)
    """Tokens the recent reflections may take (the newest are kept)."""

    def check_skill(self, skill: Skill) -> None:
        """Raise ``TooLargeError`` (or ``ValueError``, for a name that is empty or
        not printable) unless ``skill`` may be stored. Its name may carry an
        owner scope (``_scope``): the limit counts the name without it."""
        _, name = split_scope(skill.name)
        if not name.strip() or not name.isprintable():
            raise ValueError(
                f"a skill name must be printable characters, not only spaces, got {name[:40]!r}"
            )
        _check_size("the skill name", name, self.max_skill_name, "max_skill_name")
        what = f"skill {name!r}:"
        _check_size(
            f"{what} the description",
            skill.description,
            self.max_skill_description,
            "max_skill_description",
        )
        _check_size(f"{what} the body", skill.body, self.max_skill_body, "max_skill_body")

    def check_note(self, text: str) -> None:
        """Raise ``TooLargeError`` unless a note of ``text`` may be stored."""
        _check_size("the note", text, self.max_note, "max_note")


def _check_size(what: str, text: str, limit: int, setting: str) -> None:
    if len(text) > limit:
        raise TooLargeError(
            f"{what} has {len(text)} characters; at most {limit} are allowed ({setting})"
        )


@final
@attrs.frozen
class PromptBudgets:
    """Tokens each stored-data section of a system message may take, as
    ``ContentLimits`` and the context policy (if any) give them."""

    skills: int
    notes: int
    reflections: int
    tool_result: int | None = None
    """Tokens one tool result may take (None: no context policy, no bound but
    ``max_tool_output``)."""

    @classmethod
    def of(cls, limits: ContentLimits, max_tokens: int | None) -> PromptBudgets:
        if max_tokens is None:
            return cls(
                limits.skills_prompt_tokens,
                limits.notes_prompt_tokens,
                limits.reflections_prompt_tokens,
            )
        return cls(
            min(limits.skills_prompt_tokens, int(max_tokens * SKILLS_SHARE)),
            min(limits.notes_prompt_tokens, int(max_tokens * NOTES_SHARE)),
            min(limits.reflections_prompt_tokens, int(max_tokens * REFLECTIONS_SHARE)),
            int(max_tokens * TOOL_RESULT_SHARE),
        )

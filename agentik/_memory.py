"""Value types of what an agent remembers: notes, reflections, skills."""

from __future__ import annotations

from datetime import datetime

import attrs


@attrs.frozen
class MemoryEntry:
    """A working-memory note of one conversation."""

    id: int
    conversation_id: str
    text: str
    created_at: datetime


@attrs.frozen
class Reflection:
    """A lesson the model drew after a turn; shared across conversations."""

    id: int
    conversation_id: str
    text: str
    created_at: datetime


@attrs.frozen
class SkillSummary:
    """A skill's catalog row: what the model sees before loading the body."""

    name: str
    description: str


@attrs.frozen
class Skill:
    """A named, reusable procedure the model can save and load."""

    name: str
    description: str
    body: str
    updated_at: datetime | None = None

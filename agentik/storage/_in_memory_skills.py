"""The in-memory skill store: skills in a dict by name (``_in_memory``)."""

from __future__ import annotations

import builtins
from typing import final

import attrs
import trio

from agentik._memory import Skill, SkillSummary
from agentik.storage._common import Clock, utc_now


@final
class InMemorySkillStore:
    """Skills in a dict by name."""

    def __init__(self, clock: Clock = utc_now) -> None:
        self._skills: dict[str, Skill] = {}
        self._clock = clock

    async def catalog(self) -> builtins.list[SkillSummary]:
        await trio.lowlevel.checkpoint()
        return [SkillSummary(name=s.name, description=s.description) for s in self._sorted()]

    async def upsert(self, skill: Skill) -> Skill:
        await trio.lowlevel.checkpoint()
        stored = attrs.evolve(skill, updated_at=self._clock())
        self._skills[skill.name] = stored
        return stored

    async def remove(self, name: str) -> bool:
        await trio.lowlevel.checkpoint()
        self._clock()
        return self._skills.pop(name, None) is not None

    async def exists(self, name: str) -> bool:
        await trio.lowlevel.checkpoint()
        return name in self._skills

    async def all(self) -> builtins.list[Skill]:
        await trio.lowlevel.checkpoint()
        return self._sorted()

    async def get(self, name: str) -> Skill | None:
        await trio.lowlevel.checkpoint()
        return self._skills.get(name)

    def _sorted(self) -> builtins.list[Skill]:
        return [self._skills[name] for name in sorted(self._skills)]

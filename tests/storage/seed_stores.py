"""A user's seed-only backend, as DESIGN.md allows one: the four seed protocols
and nothing else, here the in-memory stores behind wrappers that expose only
the seed methods (so nothing of the full protocol can leak through)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime

from agentik import MemoryEntry, Message, Reflection, Skill, SkillSummary, TokenStats
from agentik.storage import (
    MessageStore,
    Pending,
    ReflectionStore,
    SkillStore,
    StorageBundle,
    WorkingMemoryStore,
    in_memory_storage,
)


class SeedMessages:
    def __init__(self, inner: MessageStore) -> None:
        self._inner = inner

    async def append(
        self, conversation_id: str, message: Message, *, idempotency_key: str | None = None
    ) -> Message:
        return await self._inner.append(conversation_id, message, idempotency_key=idempotency_key)

    async def submit(
        self, conversation_id: str, message: Message, *, idempotency_key: str | None = None
    ) -> Pending[Message]:
        return await self._inner.submit(conversation_id, message, idempotency_key=idempotency_key)

    def get_messages(
        self, conversation_id: str, *, after_seq: int = 0, page_size: int = 500
    ) -> AsyncIterator[Message]:
        return self._inner.get_messages(conversation_id, after_seq=after_seq, page_size=page_size)

    async def token_stats(self, conversation_id: str) -> TokenStats:
        return await self._inner.token_stats(conversation_id)

    async def find_idempotency_key(self, conversation_id: str, key: str) -> int | None:
        return await self._inner.find_idempotency_key(conversation_id, key)

    async def list_conversations(self, *, after: str | None = None, limit: int = 100) -> list[str]:
        return await self._inner.list_conversations(after=after, limit=limit)


class SeedNotes:
    def __init__(self, inner: WorkingMemoryStore) -> None:
        self._inner = inner

    async def append(self, conversation_id: str, text: str) -> MemoryEntry:
        return await self._inner.append(conversation_id, text)

    async def list(self, conversation_id: str) -> list[MemoryEntry]:
        return await self._inner.list(conversation_id)

    async def compact(
        self, conversation_id: str, entry_ids: Sequence[int], summary: str
    ) -> MemoryEntry:
        return await self._inner.compact(conversation_id, entry_ids, summary)

    async def archive(self, conversation_id: str, entry_ids: Sequence[int]) -> int:
        return await self._inner.archive(conversation_id, entry_ids)


class SeedReflections:
    def __init__(self, inner: ReflectionStore) -> None:
        self._inner = inner

    async def insert(self, conversation_id: str, text: str) -> Reflection:
        return await self._inner.insert(conversation_id, text)

    async def list_recent(self, limit: int) -> list[Reflection]:
        return await self._inner.list_recent(limit)

    async def count(self) -> int:
        return await self._inner.count()

    async def list_for_conversation(self, conversation_id: str) -> list[Reflection]:
        return await self._inner.list_for_conversation(conversation_id)

    async def delete_older_than(self, cutoff: datetime) -> int:
        return await self._inner.delete_older_than(cutoff)


class SeedSkills:
    def __init__(self, inner: SkillStore) -> None:
        self._inner = inner

    async def catalog(self) -> list[SkillSummary]:
        return await self._inner.catalog()

    async def upsert(self, skill: Skill) -> Skill:
        return await self._inner.upsert(skill)

    async def remove(self, name: str) -> bool:
        return await self._inner.remove(name)

    async def exists(self, name: str) -> bool:
        return await self._inner.exists(name)

    async def all(self) -> list[Skill]:
        return await self._inner.all()

    async def get(self, name: str) -> Skill | None:
        return await self._inner.get(name)


def seed_only_storage() -> StorageBundle:
    """A fresh seed-only bundle over in-memory stores, no secret store."""
    inner = in_memory_storage()
    return StorageBundle(
        SeedMessages(inner.message_store),
        SeedNotes(inner.working_memory_store),
        SeedReflections(inner.reflection_store),
        SeedSkills(inner.skill_store),
    )

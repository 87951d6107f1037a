"""The in-memory working memory and reflection stores: a conversation's notes,
and the lessons drawn from it.

Each method checkpoints first and then applies its change without awaiting
(``_in_memory``). The message store deletes, exports and imports a
conversation's notes and reflections with it (``_drop``, ``_of``, ``_restore``).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from datetime import datetime
from typing import final

import attrs
import trio

from agentik._errors import StoreError
from agentik._memory import MemoryEntry, Reflection
from agentik.storage._archive import ArchivedNote
from agentik.storage._common import Clock, check_at_least, to_micros, utc_now


@attrs.define
class _Note:
    entry: MemoryEntry
    archived: bool = False


@final
class InMemoryWorkingMemoryStore:
    """Notes kept in one dict by id; ids count up from 1 across conversations."""

    def __init__(self, clock: Clock = utc_now) -> None:
        self._notes: dict[int, _Note] = {}
        self._last_id = 0
        self._clock = clock

    async def append(self, conversation_id: str, text: str) -> MemoryEntry:
        await trio.lowlevel.checkpoint()
        return self._add(conversation_id, text, self._clock())

    async def list(self, conversation_id: str) -> builtins.list[MemoryEntry]:
        await trio.lowlevel.checkpoint()
        return self._active_of(conversation_id)

    def _active_of(self, conversation_id: str) -> builtins.list[MemoryEntry]:
        return [
            note.entry
            for note in self._notes.values()
            if not note.archived and note.entry.conversation_id == conversation_id
        ]

    async def list_archived(
        self, conversation_id: str, *, after_id: int = 0, limit: int = 100
    ) -> builtins.list[MemoryEntry]:
        await trio.lowlevel.checkpoint()
        archived = [
            note.entry
            for note in self._notes.values()
            if note.archived
            and note.entry.conversation_id == conversation_id
            and note.entry.id > after_id
        ]
        return archived[:limit]

    async def compact(
        self, conversation_id: str, entry_ids: Sequence[int], summary: str
    ) -> MemoryEntry:
        await trio.lowlevel.checkpoint()
        now = self._clock()
        wanted = set(entry_ids)
        active = self._active(conversation_id, wanted)
        missing = sorted(wanted - {note.entry.id for note in active})
        if missing:
            raise StoreError(
                f"memory entries {missing} are not active entries of conversation"
                f" {conversation_id!r}; nothing was compacted"
            )
        for note in active:
            note.archived = True
        return self._add(conversation_id, summary, now)

    async def archive(self, conversation_id: str, entry_ids: Sequence[int]) -> int:
        await trio.lowlevel.checkpoint()
        self._clock()  # every write reads the clock once, as the SQLite writer does per batch
        active = self._active(conversation_id, set(entry_ids))
        for note in active:
            note.archived = True
        return len(active)

    def _active(self, conversation_id: str, ids: set[int]) -> builtins.list[_Note]:
        notes = (self._notes.get(i) for i in ids)
        return [
            note
            for note in notes
            if note is not None
            and not note.archived
            and note.entry.conversation_id == conversation_id
        ]

    def _add(self, conversation_id: str, text: str, now: datetime) -> MemoryEntry:
        self._last_id += 1
        entry = MemoryEntry(
            id=self._last_id, conversation_id=conversation_id, text=text, created_at=now
        )
        self._notes[entry.id] = _Note(entry)
        return entry

    def _of(self, conversation_id: str) -> builtins.list[ArchivedNote]:
        """The conversation's notes, archived ones too, oldest first."""
        return [
            ArchivedNote(entry=note.entry, archived=note.archived)
            for note in self._notes.values()
            if note.entry.conversation_id == conversation_id
        ]

    def _drop(self, conversation_id: str) -> bool:
        mine = [i for i, n in self._notes.items() if n.entry.conversation_id == conversation_id]
        for note_id in mine:
            del self._notes[note_id]
        return bool(mine)

    def _restore(self, conversation_id: str, notes: Sequence[ArchivedNote]) -> None:
        """Add ``notes`` with new ids, keeping their order, text, times and flags."""
        for note in notes:
            entry = self._add(conversation_id, note.entry.text, note.entry.created_at)
            self._notes[entry.id].archived = note.archived


@final
class InMemoryReflectionStore:
    """Reflections in insertion order; ids count up from 1 and are never reused."""

    def __init__(self, clock: Clock = utc_now) -> None:
        self._reflections: dict[int, Reflection] = {}
        self._last_id = 0
        self._clock = clock

    async def insert(self, conversation_id: str, text: str) -> Reflection:
        await trio.lowlevel.checkpoint()
        now = self._clock()
        self._last_id += 1
        reflection = Reflection(
            id=self._last_id, conversation_id=conversation_id, text=text, created_at=now
        )
        self._reflections[reflection.id] = reflection
        return reflection

    async def list_recent(self, limit: int) -> builtins.list[Reflection]:
        check_at_least("limit", limit, 0)
        await trio.lowlevel.checkpoint()
        newest_first = sorted(
            self._reflections.values(), key=lambda r: (r.created_at, r.id), reverse=True
        )
        return newest_first[:limit]

    async def count(self) -> int:
        await trio.lowlevel.checkpoint()
        return len(self._reflections)

    async def list_for_conversation(self, conversation_id: str) -> builtins.list[Reflection]:
        await trio.lowlevel.checkpoint()
        mine = [r for r in self._reflections.values() if r.conversation_id == conversation_id]
        return sorted(mine, key=lambda r: (r.created_at, r.id))

    async def delete_older_than(self, cutoff: datetime) -> int:
        cutoff_micros = to_micros(cutoff)
        await trio.lowlevel.checkpoint()
        self._clock()
        old = [i for i, r in self._reflections.items() if to_micros(r.created_at) < cutoff_micros]
        for reflection_id in old:
            del self._reflections[reflection_id]
        return len(old)

    def _drop(self, conversation_id: str) -> bool:
        mine = [i for i, r in self._reflections.items() if r.conversation_id == conversation_id]
        for reflection_id in mine:
            del self._reflections[reflection_id]
        return bool(mine)

    def _restore(self, conversation_id: str, reflections: Sequence[Reflection]) -> None:
        """Add ``reflections`` with new ids, keeping their order, text and times."""
        for reflection in reflections:
            self._last_id += 1
            self._reflections[self._last_id] = attrs.evolve(
                reflection, id=self._last_id, conversation_id=conversation_id
            )

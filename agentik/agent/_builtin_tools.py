"""Core tools every conversation has: working memory and skills.

They need the conversation they run in (its id, its cached notes, its
owner's skill scope), which a plain ``NamedTool`` handler does not get. So
they are ``ConversationTool``s: the actor calls ``run(state, arguments)``
instead of ``handler(arguments)``. One set of definitions serves every
conversation, so they cost nothing per conversation.

Skills are the conversation owner's (``_scope``): ``skill_save`` in one of
alice's conversations stores ``alice`` U+001F ``<name>``, and only her
conversations load, list or remove it. A note or skill past ``ContentLimits``
is refused with an error result the model can act on; nothing is stored.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import attrs

from agentik._errors import StoreError, ToolError
from agentik._json import JsonObject
from agentik._memory import MemoryEntry, Skill
from agentik._scope import split_scope
from agentik.storage import StorageBundle
from agentik.toolsets import NamedTool


class ConversationState(Protocol):
    """What a conversation-bound tool may touch."""

    @property
    def conversation_id(self) -> str: ...

    @property
    def storage(self) -> StorageBundle: ...

    @property
    def memory(self) -> list[MemoryEntry]:
        """The conversation's active notes, kept in step with the store."""
        ...

    @property
    def skill_scope(self) -> str:
        """The owner prefix of this conversation's skill names (``_scope``)."""
        ...


async def _needs_conversation(arguments: JsonObject) -> str:
    raise ToolError("this tool runs only inside a conversation")


@attrs.frozen(eq=False)
class ConversationTool(NamedTool):
    """A core tool that runs against the calling conversation's state. Its
    calls run alone (``sequential``) unless it says otherwise: they read and
    change state the other calls of the answer may touch (the notes, the
    toolset activation)."""

    handler: Callable[[JsonObject], Awaitable[str]] = attrs.field(
        default=_needs_conversation, repr=False
    )
    run: Callable[[ConversationState, JsonObject], Awaitable[str]] = attrs.field(
        kw_only=True, repr=False
    )
    sequential: bool = attrs.field(
        default=True, kw_only=True, validator=attrs.validators.instance_of(bool)
    )


def _text(arguments: JsonObject, key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"'{key}' must be a non-empty string")
    return value


async def _memory_add(state: ConversationState, arguments: JsonObject) -> str:
    try:
        entry = await state.storage.working_memory_store.append(
            state.conversation_id, _text(arguments, "text")
        )
    except ValueError as exc:  # past ContentLimits.max_note
        raise ToolError(f"{exc}; shorten it") from exc
    state.memory.append(entry)
    return f"Noted as [{entry.id}]."


def _note_ids(state: ConversationState, arguments: JsonObject) -> list[int]:
    """The ``entry_ids`` argument: ids of this conversation's active notes."""
    raw_ids = arguments.get("entry_ids")
    if not isinstance(raw_ids, list) or not raw_ids:
        raise ToolError("'entry_ids' must be a non-empty list of note ids")
    ids = [i for i in raw_ids if isinstance(i, int) and not isinstance(i, bool)]
    known = {e.id for e in state.memory}
    unknown = [i for i in raw_ids if i not in known or i not in ids]
    if unknown:
        raise ToolError(f"no active notes with ids {unknown}; active ids are {sorted(known)}")
    return list(dict.fromkeys(ids))


async def _memory_archive(state: ConversationState, arguments: JsonObject) -> str:
    ids = _note_ids(state, arguments)
    try:
        count = await state.storage.working_memory_store.archive(state.conversation_id, ids)
    except StoreError as exc:
        raise ToolError(f"could not archive notes: {exc}") from exc
    gone = set(ids)
    state.memory[:] = [e for e in state.memory if e.id not in gone]
    return f"Archived {count} note{'s' if count != 1 else ''}."


async def _memory_compact(state: ConversationState, arguments: JsonObject) -> str:
    ids = _note_ids(state, arguments)
    summary = _text(arguments, "summary")
    try:
        entry = await state.storage.working_memory_store.compact(
            state.conversation_id, ids, summary
        )
    except ValueError as exc:  # past ContentLimits.max_note
        raise ToolError(f"{str(exc).replace('the note', 'the summary', 1)}; shorten it") from exc
    except StoreError as exc:
        raise ToolError(f"could not compact notes: {exc}") from exc
    state.memory[:] = [e for e in state.memory if e.id not in set(ids)] + [entry]
    return f"Compacted {len(ids)} notes into [{entry.id}]."


def _skill_name(arguments: JsonObject) -> str:
    """The ``name`` argument: printable, so that it cannot name another owner's
    skill (an owner's scope ends in U+001F, ``_scope``)."""
    name = _text(arguments, "name")
    if not name.isprintable():
        raise ToolError(
            f"a skill name must be printable characters, not only spaces, got {name[:40]!r}"
        )
    return name


async def _skill_save(state: ConversationState, arguments: JsonObject) -> str:
    name = _skill_name(arguments)
    skill = Skill(
        state.skill_scope + name, _text(arguments, "description"), _text(arguments, "body")
    )
    try:
        await state.storage.skill_store.upsert(skill)
    except ValueError as exc:  # past ContentLimits, or a name that is not printable
        raise ToolError(str(exc)) from exc
    return f"Skill '{name}' saved."


_NAMES_SHOWN = 50


async def _skill_load(state: ConversationState, arguments: JsonObject) -> str:
    name = _skill_name(arguments)
    store = state.storage.skill_store
    skill = await store.get(state.skill_scope + name)
    if skill is None:
        names = [
            n
            for scope, n in map(split_scope, [s.name for s in await store.catalog()])
            if scope == state.skill_scope
        ]
        shown = ", ".join(names[:_NAMES_SHOWN]) or "(none)"
        if len(names) > _NAMES_SHOWN:
            shown += f", and {len(names) - _NAMES_SHOWN} more"
        raise ToolError(f"no skill named '{name}'; saved skills: {shown}")
    return skill.body


async def _skill_remove(state: ConversationState, arguments: JsonObject) -> str:
    name = _skill_name(arguments)
    if not await state.storage.skill_store.remove(state.skill_scope + name):
        raise ToolError(f"no skill named '{name}'")
    return f"Skill '{name}' removed."


def _string(description: str) -> JsonObject:
    return {"type": "string", "description": description}


def _schema(properties: JsonObject, required: list[str]) -> JsonObject:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


MEMORY_TOOLS: tuple[ConversationTool, ...] = (
    ConversationTool(
        "memory_add",
        "Add a short note to this conversation's working memory.",
        _schema({"text": _string("The note.")}, ["text"]),
        run=_memory_add,
    ),
    ConversationTool(
        "memory_compact",
        "Replace several working-memory notes by one summary note.",
        _schema(
            {
                "entry_ids": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "description": "Ids of the notes to replace, as shown in brackets.",
                },
                "summary": _string("The note that replaces them."),
            },
            ["entry_ids", "summary"],
        ),
        run=_memory_compact,
    ),
    ConversationTool(
        "memory_archive",
        "Archive working-memory notes that are no longer needed (they leave the"
        " prompt; the store keeps them).",
        _schema(
            {
                "entry_ids": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "description": "Ids of the notes to archive, as shown in brackets.",
                },
            },
            ["entry_ids"],
        ),
        run=_memory_archive,
    ),
)

SKILL_TOOLS: tuple[ConversationTool, ...] = (
    ConversationTool(
        "skill_save",
        "Save (or replace) a named skill: a reusable procedure for later conversations.",
        _schema(
            {
                "name": _string("Short unique name."),
                "description": _string("One line: when to use it."),
                "body": _string("The procedure itself."),
            },
            ["name", "description", "body"],
        ),
        run=_skill_save,
    ),
    ConversationTool(
        "skill_load",
        "Load a saved skill's full text by name.",
        _schema({"name": _string("The skill's name.")}, ["name"]),
        run=_skill_load,
    ),
    ConversationTool(
        "skill_remove",
        "Delete a saved skill by name.",
        _schema({"name": _string("The skill's name.")}, ["name"]),
        run=_skill_remove,
    ),
)

BUILTIN_TOOLS: tuple[ConversationTool, ...] = MEMORY_TOOLS + SKILL_TOOLS

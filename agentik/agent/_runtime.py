"""What every conversation of one agent shares: settings, tools, caches, stats.

Conversation state (history, activation, notes) never lives here: it belongs
to the conversation's own task. What lives here is read-mostly and the same
for everyone: the model, the core tools, the toolset sources and their index,
and caches of the skills catalog and recent reflections (kept correct by
invalidating them on every write made through the agent's storage).
"""

from __future__ import annotations

import builtins
import collections
import logging
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Generic, Protocol, TypeAlias, TypeVar, runtime_checkable

import attrs
import trio

from agentik._errors import TurnError
from agentik._memory import MemoryEntry, Reflection, Skill, SkillSummary
from agentik._messages import Message, ToolCall
from agentik._scope import split_scope
from agentik.agent._child_calls import ChildCalls
from agentik.agent._content import Descriptions, ImageDescriber
from agentik.agent._context import ContextPolicy, estimate_tokens, message_tokens
from agentik.agent._failures import component_error
from agentik.agent._limits import ContentLimits, PromptBudgets
from agentik.agent._prompt import (
    BasePrompt,
    ReflectionsSection,
    SkillsCatalog,
    SystemPromptContributor,
    ToolsetSection,
    WorkingMemorySection,
)
from agentik.agent._stats import AgentStats
from agentik.models import ChatModel
from agentik.storage import (
    FullMessageStore,
    FullWorkingMemoryStore,
    Pending,
    ReflectionStore,
    SkillStore,
    Storage,
    StorageBundle,
    full_storage,
)
from agentik.toolsets import NamedTool, ToolCosts, ToolsetContribution, ToolsetIndex

if TYPE_CHECKING:
    from agentik.agent._spans import Tracing

T = TypeVar("T")

log = logging.getLogger("agentik.agent")


@runtime_checkable
class ToolsetSource(Protocol):
    """A toolset whose tools may change while the agent runs (an MCP server).
    The agent reads ``contribution`` before every model request."""

    @property
    def contribution(self) -> ToolsetContribution: ...


def _contribution(source: ToolsetContribution | ToolsetSource) -> ToolsetContribution:
    """What ``source`` contributes now. A source that raises, or gives something
    else than a contribution, fails the turn that asked (``TurnError``)."""
    if isinstance(source, ToolsetContribution):
        return source
    what = f"toolset source {type(source).__name__}"
    try:
        contribution = source.contribution
    except Exception as exc:
        raise component_error(what, exc) from exc
    if not isinstance(contribution, ToolsetContribution):
        raise TurnError(
            f"{what} gave {type(contribution).__name__}, expected ToolsetContribution",
            code="internal_error",
        )
    return contribution


_FAILURES_KEPT = 10_000
_PURE_CONTRIBUTORS = frozenset(
    {BasePrompt, ToolsetSection, SkillsCatalog, WorkingMemorySection, ReflectionsSection}
)

ApprovalPolicy: TypeAlias = Callable[[str, ToolCall], bool]
"""``(conversation_id, call) -> True`` when a person must approve the call."""


@attrs.frozen
class AgentSettings:
    """The knobs of ``open_chat_agent``; see its docstring."""

    max_tool_rounds: int = 25
    max_parallel_tools: int = 8
    """Calls of one model answer that run at once, at most."""
    tool_timeout: float = 60.0
    activation_timeout: float = 600.0
    idle_timeout: float = 60.0
    turn_queue_size: int = 2
    max_queued_turns: int = 8
    max_conversations: int = 100_000
    max_tool_output: int = 64 * 1024
    reflection: bool = False
    recent_reflections: int = 5
    approval_timeout: float | None = None
    resume_interrupted: bool = True
    context: ContextPolicy | None = None
    """What of a conversation each request carries; None: all of it."""
    content_limits: ContentLimits = ContentLimits()
    """Sizes of skills and notes, and their share of a system prompt."""
    output_retries: int = 2
    """A typed turn's invalid answers sent back to the model before it fails."""
    describe_image: ImageDescriber | None = None
    """Maps an image to text for a model that takes no images."""
    descriptions: Descriptions | None = None
    """Set when the model takes no images and ``describe_image`` is given:
    requests then carry each image's description instead (``_content``)."""


@attrs.define
class _Cached(Generic[T]):
    """One cached read shared by every conversation, loaded once even when a
    thousand first turns ask at the same moment (single flight)."""

    value: T | None = None
    generation: int = 0
    """Bumped by every write, so a read that raced a write is not kept."""
    loading: trio.Event | None = None

    def invalidate(self) -> None:
        self.value = None
        self.generation += 1

    async def get(self, load: Callable[[], Awaitable[T]]) -> T:
        while True:
            if self.value is not None:
                return self.value
            if self.loading is not None:
                await self.loading.wait()
                continue
            generation = self.generation
            done = self.loading = trio.Event()
            try:
                value = await load()
            finally:
                self.loading = None
                done.set()
            if generation == self.generation:
                self.value = value
                return value


SkillCatalogs: TypeAlias = dict[str, list[SkillSummary]]
"""The skills catalog by owner scope (``_scope``), names without the scope."""

_NO_SKILLS: list[SkillSummary] = []
"""The catalog of a scope with no skills: one object, never changed (the
prompt cache compares catalogs by identity first)."""


def catalogs_by_scope(catalog: list[SkillSummary]) -> SkillCatalogs:
    """Split the store's catalog (sorted by stored name) by owner scope; each
    scope's stays sorted by name."""
    out: SkillCatalogs = {}
    for summary in catalog:
        scope, name = split_scope(summary.name)
        out.setdefault(scope, []).append(
            summary if not scope else SkillSummary(name, summary.description)
        )
    return out


@attrs.define
class _CatalogCache:
    skills: _Cached[SkillCatalogs] = attrs.Factory(_Cached)
    reflections: _Cached[list[Reflection]] = attrs.Factory(_Cached)


@attrs.frozen
class _CachingSkillStore:
    """Delegates to the real store; refuses a skill past the size limits; a
    write drops the cached catalog."""

    inner: SkillStore
    cache: _CatalogCache
    limits: ContentLimits

    async def catalog(self) -> list[SkillSummary]:
        return await self.inner.catalog()

    async def upsert(self, skill: Skill) -> Skill:
        self.limits.check_skill(skill)  # nothing stored past a limit
        try:
            return await self.inner.upsert(skill)
        finally:
            self.cache.skills.invalidate()

    async def remove(self, name: str) -> bool:
        try:
            return await self.inner.remove(name)
        finally:
            self.cache.skills.invalidate()

    async def exists(self, name: str) -> bool:
        return await self.inner.exists(name)

    async def all(self) -> list[Skill]:
        return await self.inner.all()

    async def get(self, name: str) -> Skill | None:
        return await self.inner.get(name)


@attrs.frozen
class _CheckedMemoryStore:
    """Delegates to the real store; refuses a note past the size limit."""

    inner: FullWorkingMemoryStore
    limits: ContentLimits

    async def append(self, conversation_id: str, text: str) -> MemoryEntry:
        self.limits.check_note(text)
        return await self.inner.append(conversation_id, text)

    async def list(self, conversation_id: str) -> list[MemoryEntry]:
        return await self.inner.list(conversation_id)

    async def compact(
        self, conversation_id: str, entry_ids: Sequence[int], summary: str
    ) -> MemoryEntry:
        self.limits.check_note(summary)
        return await self.inner.compact(conversation_id, entry_ids, summary)

    async def archive(self, conversation_id: str, entry_ids: Sequence[int]) -> int:
        return await self.inner.archive(conversation_id, entry_ids)

    async def list_archived(
        self, conversation_id: str, *, after_id: int = 0, limit: int = 100
    ) -> builtins.list[MemoryEntry]:
        return await self.inner.list_archived(conversation_id, after_id=after_id, limit=limit)


@attrs.frozen
class _CachingReflectionStore:
    """Delegates to the real store; a write drops the cached recent list."""

    inner: ReflectionStore
    cache: _CatalogCache

    async def insert(self, conversation_id: str, text: str) -> Reflection:
        try:
            return await self.inner.insert(conversation_id, text)
        finally:
            self.cache.reflections.invalidate()

    async def list_recent(self, limit: int) -> list[Reflection]:
        return await self.inner.list_recent(limit)

    async def count(self) -> int:
        return await self.inner.count()

    async def list_for_conversation(self, conversation_id: str) -> list[Reflection]:
        return await self.inner.list_for_conversation(conversation_id)

    async def delete_older_than(self, cutoff: datetime) -> int:
        try:
            return await self.inner.delete_older_than(cutoff)
        finally:
            self.cache.reflections.invalidate()


@attrs.define
class AgentRuntime:
    """Shared, read-mostly state of one agent."""

    model: ChatModel
    storage: Storage
    """The caller's bundle as a ``Storage`` (``full_storage``: a seed-only one
    with its degraded stand-ins), with the skill and reflection stores wrapped
    so writes made through it keep the prompt caches correct, and the skill
    and note stores so that none past ``ContentLimits`` is stored."""
    core_tools: Mapping[str, NamedTool]
    offered_core: tuple[NamedTool, ...]
    """Core tools as offered to the model, in order."""
    contributors: Sequence[SystemPromptContributor]
    settings: AgentSettings
    stats: AgentStats
    _sources: tuple[ToolsetContribution | ToolsetSource, ...]
    _cache: _CatalogCache
    _contributions: tuple[ToolsetContribution, ...] = ()
    _index: ToolsetIndex = attrs.field(factory=lambda: ToolsetIndex(()))
    _dynamic: bool = False
    approval_policy: ApprovalPolicy | None = None
    """Decides per call whether a person must approve it (beyond the tools
    and toolsets that always require it)."""
    pure_prompt: bool = False
    """Every prompt contributor is one of agentik's own, which read nothing but
    their context: a system message may be reused while its inputs stay."""
    approvals_possible: bool = False
    """Some call may need approval: a policy, or a tool or toolset requiring it.
    False spares every turn the per-call look-up."""
    submit_nowait: Callable[[str, Message], Pending[Message] | None] | None = None
    """The message store's ``submit_nowait``: a turn records through it
    without a schedule point per message (``build`` sets it)."""
    loader: FullMessageStore | None = None
    """The message store, which loads a conversation in one read (``build``
    sets it)."""
    failures: collections.OrderedDict[tuple[str, int], str] = attrs.field(
        factory=collections.OrderedDict
    )
    """(conversation id, user message seq) -> code of recent failed turns."""
    doubtful: collections.OrderedDict[str, dict[int, str]] = attrs.field(
        factory=collections.OrderedDict
    )
    """conversation id -> {user message seq: code}: as ``failures``, for failed
    turns whose user message may not be stored (its commit in doubt, or in
    flight): a failure once that seq is read back as a user message
    (``settle_doubts``), forgotten if it is not. By conversation, so a load
    settles its own in one look-up."""
    token_costs: weakref.WeakKeyDictionary[Message, int] = attrs.field(
        factory=weakref.WeakKeyDictionary
    )
    """Costs a custom ``count_tokens`` gave, while their messages live."""
    tracing: Tracing | None = None
    """The agent's spans; None when it does not trace (``_tracing``)."""
    budgets: PromptBudgets = attrs.field(factory=lambda: PromptBudgets.of(ContentLimits(), None))
    tool_costs: ToolCosts = attrs.field(factory=ToolCosts)
    """Tokens of each tool's schema under the context policy's counter,
    counted once per tool (``build`` sets it)."""
    """Tokens the skills, notes and reflections may take in a system message,
    and a tool result in a request (``build`` sets them from the settings)."""
    children: ChildCalls = attrs.field(factory=ChildCalls)
    """The agent-tool calls its conversations run (``_child_calls``)."""

    @classmethod
    def build(
        cls,
        *,
        model: ChatModel,
        storage: StorageBundle,
        core_tools: Mapping[str, NamedTool],
        offered_core: tuple[NamedTool, ...],
        sources: Sequence[ToolsetContribution | ToolsetSource],
        contributors: Sequence[SystemPromptContributor],
        settings: AgentSettings,
        approval_policy: ApprovalPolicy | None = None,
        tracing: Tracing | None = None,
    ) -> AgentRuntime:
        cache = _CatalogCache()
        limits = settings.content_limits
        full = full_storage(storage)  # where a bundle enters the agent: once
        wrapped = attrs.evolve(
            full,
            working_memory_store=_CheckedMemoryStore(full.working_memory_store, limits),
            reflection_store=_CachingReflectionStore(full.reflection_store, cache),
            skill_store=_CachingSkillStore(full.skill_store, cache, limits),
        )
        runtime = cls(
            model=model,
            storage=wrapped,
            core_tools=core_tools,
            offered_core=offered_core,
            contributors=tuple(contributors),
            settings=settings,
            stats=AgentStats(),
            sources=tuple(sources),
            cache=cache,
            dynamic=any(not isinstance(s, ToolsetContribution) for s in sources),
            approval_policy=approval_policy,
            tracing=tracing,
            budgets=PromptBudgets.of(
                limits, None if settings.context is None else settings.context.max_tokens
            ),
            tool_costs=ToolCosts(
                estimate_tokens if settings.context is None else settings.context.count_tokens
            ),
        )
        runtime.pure_prompt = all(type(c) in _PURE_CONTRIBUTORS for c in contributors)
        runtime.submit_nowait = full.message_store.submit_nowait
        runtime.loader = full.message_store
        runtime._refresh(force=True)
        return runtime

    def token_cost(self, message: Message, policy: ContextPolicy) -> int:
        """What ``message`` costs in a request. The default estimate is cheap and
        computed each time; a custom counter (a real tokenizer) is asked once
        per message value."""
        count = policy.count_tokens
        if count is estimate_tokens:
            return message_tokens(message, count)
        cached = self.token_costs.get(message)
        if cached is None:
            cached = self.token_costs[message] = message_tokens(message, count)
        return cached

    def remember_failure(
        self, conversation_id: str, seq: int, code: str, *, in_doubt: bool = False
    ) -> None:
        """A turn failed: kept in memory too, in case its record cannot be
        written (the storage failing, the cleanup cut short), so a reload in
        this process does not take it for interrupted and resume it.
        ``in_doubt``: its user message may not be stored (``doubtful``)."""
        if in_doubt:
            doubtful = self.doubtful
            doubtful.setdefault(conversation_id, {})[seq] = code
            doubtful.move_to_end(conversation_id)
            while len(doubtful) > _FAILURES_KEPT:
                doubtful.popitem(last=False)
            return
        failures = self.failures
        failures[(conversation_id, seq)] = code
        failures.move_to_end((conversation_id, seq))
        while len(failures) > _FAILURES_KEPT:
            failures.popitem(last=False)

    def settle_doubts(self, conversation_id: str, holds: Callable[[int], bool]) -> None:
        """The conversation was just read from the store: each failure kept in
        doubt for it becomes a failure if ``holds`` its seq (a user message
        there: the turn's, committed after all), else is forgotten (lost: the
        next turn takes the seq, and a failure kept under it would end it)."""
        for seq, code in self.doubtful.pop(conversation_id, {}).items():
            if holds(seq):
                self.remember_failure(conversation_id, seq, code)

    def failed(self, conversation_id: str, seq: int) -> bool:
        """Whether the turn whose user message is stored at ``seq`` failed in
        this process (a doubt about a stored message is settled: it failed)."""
        return (conversation_id, seq) in self.failures or seq in self.doubtful.get(
            conversation_id, {}
        )

    def forget_conversation(self, conversation_id: str) -> None:
        """The conversation was deleted: its failed turns are no longer
        remembered (a new turn at the same seq is another turn), and the cached
        recent reflections, which may hold its own, are read again."""
        for key in [key for key in self.failures if key[0] == conversation_id]:
            del self.failures[key]
        self.doubtful.pop(conversation_id, None)
        self._cache.reflections.invalidate()

    def toolsets(self) -> tuple[tuple[ToolsetContribution, ...], ToolsetIndex]:
        """The current contributions and their index (rebuilt only on change)."""
        if self._dynamic:
            self._refresh(force=False)
        return self._contributions, self._index

    @property
    def tools_budget(self) -> int | None:
        """Tokens the active toolsets' schemas may take; None without a context policy."""
        context = self.settings.context
        return None if context is None else context.tools_budget_tokens

    def _refresh(self, *, force: bool) -> None:
        current = tuple(map(_contribution, self._sources))
        if force or any(a is not b for a, b in zip(current, self._contributions, strict=True)):
            self._contributions = current
            self._index = ToolsetIndex(current, self.tool_costs)
            self.approvals_possible = (
                self.approval_policy is not None
                or any(t.requires_approval for t in self.core_tools.values())
                or any(c.requires_approval for c in current)
                or any(t.requires_approval for c in current for t in c.tools)
            )

    def cached_prompt_reads(self, scope: str) -> tuple[list[SkillSummary], list[Reflection]] | None:
        """The skills catalog of owner ``scope`` and recent reflections when both
        are cached (the usual case, every model call): no coroutine, no
        checkpoint. None when either must be read (``skills()``, ``reflections()``)."""
        catalogs = self._cache.skills.value
        if catalogs is None:
            return None
        skills = catalogs.get(scope, _NO_SKILLS)
        if self.settings.recent_reflections <= 0:
            return skills, []
        reflections = self._cache.reflections.value
        return None if reflections is None else (skills, reflections)

    async def warm(self) -> None:
        """Read the skills catalog and recent reflections now, as the agent
        opens, so that first turns find them cached: otherwise every first
        turn of a burst waits on the one read (single flight) and is woken
        after it, twice. A failed read is left for the first turn to retry."""
        try:
            await self.skills("")
            await self.reflections()
        except Exception as exc:  # the first model call reads again
            log.warning("could not read the skills catalog or reflections at start: %s", exc)

    async def skills(self, scope: str) -> list[SkillSummary]:
        """The skills catalog of owner ``scope`` (``_scope``; names without it),
        read once for every owner and cached until a write."""

        async def load() -> SkillCatalogs:
            return catalogs_by_scope(await self.storage.skill_store.catalog())

        catalogs = await self._cache.skills.get(load)
        return catalogs.get(scope, _NO_SKILLS)

    async def reflections(self) -> list[Reflection]:
        """Recent reflections, read once and cached until a write."""
        limit = self.settings.recent_reflections
        if limit <= 0:
            return []

        async def load() -> list[Reflection]:
            return await self.storage.reflection_store.list_recent(limit)

        return await self._cache.reflections.get(load)

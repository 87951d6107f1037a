"""Skills, notes and reflections take a bounded share of every system prompt
(issue: hardening, item 5).

Whatever is stored (any number of skills and notes of any size, written
through the agent within its limits or straight into the storage past them,
by this owner or by others), every request a turn makes fits the context
window and the turn finishes: each section keeps what fits its budget and
says how many rows it left out, and another owner's skills never appear.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agentik import (
    ContextPolicy,
    MemoryEntry,
    Message,
    ModelRequest,
    ModelResponse,
    Reflection,
    Role,
    Skill,
    SkillSummary,
    TurnError,
    in_memory_storage,
    open_chat_agent,
    tool,
)
from agentik.agent import (
    ContentLimits,
    PromptContext,
    ReflectionsSection,
    SkillsCatalog,
    TurnFailed,
    WorkingMemorySection,
)
from agentik.agent._context import cut_to_tokens, estimate_tokens, message_tokens
from agentik.agent._prompt import fit_rows
from agentik.models import ScriptedModel
from agentik.storage import SkillStore, WorkingMemoryStore
from tests.agent.helpers import assert_valid_history, call, stored


def words(text: str) -> int:
    """A counter that is not the estimate: one token per word, two per line."""
    return len(text.split()) + 2 * text.count("\n")


counters = st.sampled_from([estimate_tokens, words, len])


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.text(min_size=1, max_size=60) | st.text(min_size=200), max_size=30),
    budget=st.integers(0, 400),
    count=counters,
    newest_last=st.booleans(),
)
def test_a_section_never_passes_its_budget(
    rows: list[str], budget: int, count: Callable[[str], int], newest_last: bool
) -> None:
    """The section is the whole when it fits; otherwise some rows in their own
    order and the line naming the others, within the budget; None only when
    not even that line fits. A row too large to fit hides no other: with the
    estimate (additive), every row left out would not have fitted."""
    head = "## Head\n"
    left: list[list[int]] = []

    def left_out(dropped: Sequence[int]) -> str:
        left.append(list(dropped))
        return f"(left out: {list(dropped)!r})"

    text = fit_rows(head, rows, budget, count, left_out, newest_last=newest_last)
    whole = head + "\n".join(rows)
    if count(whole) <= budget:
        assert text == whole
        return
    if text is None:
        event("nothing fits")
        assert count(head + left_out([])) > budget or rows
        return
    assert count(text) <= budget
    dropped = left[-1]
    kept = [i for i in range(len(rows)) if i not in dropped]
    shown = [rows[i] for i in kept]
    line = f"(left out: {dropped!r})"
    assert text == head + "\n".join([line, *shown] if newest_last else [*shown, line])
    assert dropped, "something was left out"
    if count is estimate_tokens:
        # Greedy in preference order: a dropped row did not fit what was left.
        used = (
            count(head)
            + count(left_out(range(len(rows))))
            + 1
            + sum(count(rows[i]) + 1 for i in kept)
        )
        assert all(used + count(rows[i]) + 1 > budget for i in dropped)
    event(f"kept {'none' if not kept else 'some'}")


def test_the_sections_say_what_they_left_out() -> None:
    """The wording of each cut section, and the newest notes kept."""
    notes = [MemoryEntry(i, "c", ("n" * 600 if i % 2 else "short"), NOW) for i in range(1, 30)]
    context = PromptContext(
        conversation_id="c",
        contributions=(),
        active_toolsets=frozenset(),
        skills=[SkillSummary(f"s{i:02}", "d" * 300) for i in range(40)],
        memory=notes,
        reflections=[
            Reflection(i, "c", f"lesson {i}" if i < 3 else "lesson " * 100, NOW) for i in range(9)
        ],
        skills_budget=500,
        memory_budget=300,
        reflections_budget=200,
    )
    skills = SkillsCatalog().render(context)
    assert skills is not None and estimate_tokens(skills) <= 500
    rows = skills.split("\n")[3:]
    assert [r.split(" ")[0] for r in rows[:-1]] == ["s00", "s01", "s02", "s03"]
    assert rows[-1] == "… and 36 more skills not listed (skill_load loads any by name)"
    memory = WorkingMemorySection().render(context)
    assert memory is not None and estimate_tokens(memory) <= 300
    rows = memory.split("\n")[3:]
    assert rows[0] == (
        "(23 notes not shown: [1], [2], [3], [4], [5], [6], [7], [8], [9], [10], …;"
        " memory_compact or memory_archive them to make room)"
    )
    # The newest first, each that still fits: the long [29], then the short ones.
    assert [r.split(" ")[0] for r in rows[1:]] == ["[20]", "[22]", "[24]", "[26]", "[28]", "[29]"]
    lessons = ReflectionsSection().render(context)
    assert lessons is not None and estimate_tokens(lessons) <= 200
    assert lessons.split("\n")[1:] == [
        "- lesson 0",
        "- lesson 1",
        "- lesson 2",
        "(6 lessons not shown)",
    ]


T = TypeVar("T")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def sized(element: st.SearchStrategy[T], most: int) -> st.SearchStrategy[list[T]]:
    """Lists of any length up to ``most``, long ones as likely as short ones."""
    return st.integers(0, most).flatmap(lambda n: st.lists(element, min_size=n, max_size=n))


BASE = "You are a careful assistant."


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    max_tokens=st.sampled_from([600, 2_000, 8_000, 32_000]) | st.integers(600, 40_000),
    own=sized(
        st.tuples(
            st.sampled_from([20, 500, 3_000]) | st.integers(1, 3_000),
            st.sampled_from([0, 32_000, 100_000]) | st.integers(0, 5_000),
        ),
        40,
    ),
    others=st.lists(st.sampled_from([1, 900_000]) | st.integers(1, 900_000), max_size=3),
    notes=sized(st.sampled_from([10, 500, 4_000, 20_000]) | st.integers(1, 20_000), 30),
    through_agent=st.booleans(),
    tokens=st.sampled_from([estimate_tokens, words]),
)
async def test_every_request_fits_whatever_is_stored(
    max_tokens: int,
    own: list[tuple[int, int]],
    others: list[int],
    notes: list[int],
    through_agent: bool,
    tokens: Callable[[str], int],
) -> None:
    """Random skills (this owner's, and huge ones of other owners and of the
    default owner) and notes, stored straight into the storage (no limit) or
    through the agent (cut to its limits): the turn, which adds a note and
    loads a skill, finishes, and every request it makes fits the window."""
    policy = ContextPolicy(max_tokens=max_tokens, count_tokens=tokens)
    storage = in_memory_storage()
    limits = ContentLimits()
    owner = "alice\x1f"
    conversation = owner + "c"

    def fit(n: int, limit: int) -> int:
        return min(n, limit) if through_agent else n

    sizes: list[int] = []
    seen: list[str] = []

    def respond(request: ModelRequest) -> ModelResponse:
        cost = sum(message_tokens(m, tokens) for m in request.messages)
        sizes.append(cost)
        system = request.messages[0].content
        seen.append(system)
        turn = request.messages[
            max(i for i, m in enumerate(request.messages) if m.role is Role.USER) :
        ]
        if len(turn) == 1:
            return call("memory_add", {"text": "a fresh note"}, id="n")
        if len(turn) == 3:
            return call("skill_load", {"name": "s0"}, id="l")
        return ModelResponse(text="done")

    async def write(skills: SkillStore, memory: WorkingMemoryStore) -> None:
        for i, (description, body) in enumerate(own):
            await skills.upsert(
                Skill(
                    f"{owner}s{i}",
                    "d" * fit(description, limits.max_skill_description),
                    "b" * fit(body, limits.max_skill_body),
                )
            )
        for size in notes:
            await memory.append(conversation, "n" * fit(size, limits.max_note))

    # Written behind the agent's back before it opens (it reads them then), or
    # through it (which checks them).
    for i, description in enumerate(others):
        stranger = "bob\x1f" if i % 2 else ""
        await storage.skill_store.upsert(Skill(f"{stranger}x{i}", "SECRET" * description, "b"))
    if not through_agent:
        await write(storage.skill_store, storage.working_memory_store)
    async with open_chat_agent(
        model=ScriptedModel(respond),
        storage=storage,
        system_prompt=BASE,
        context=policy,
        content_limits=limits,
    ) as agent:
        if through_agent:
            await write(agent.storage.skill_store, agent.storage.working_memory_store)
        result = await agent.send(conversation, "hello")
        assert result.status == "finished", result
        assert result.text == "done"
    assert sizes and max(sizes) <= max_tokens, (sizes, max_tokens)
    assert all("SECRET" not in system for system in seen)
    event(f"skills cut: {any('more skill' in s for s in seen)}")
    event(f"notes cut: {any(' not shown: [' in s for s in seen)}")
    assert_valid_history(await stored(storage, conversation))


async def test_the_reported_case_a_huge_skill_leaves_the_turn_alone() -> None:
    """The testers' case, stored behind the agent's back (an old database): a
    900 KB skill description of the same owner, context_tokens 32000. It is
    left out of the catalog (its row alone passes the budget), which says so,
    and the turn finishes."""
    storage = in_memory_storage()
    await storage.skill_store.upsert(Skill("huge", "x" * 900_000, "body"))
    await storage.skill_store.upsert(Skill("small", "a small one", "body"))
    systems: list[Message] = []

    def respond(request: ModelRequest) -> ModelResponse:
        systems.append(request.messages[0])
        return ModelResponse(text="fine")

    async with open_chat_agent(
        model=ScriptedModel(respond),
        storage=storage,
        context=ContextPolicy(max_tokens=32_000),
    ) as agent:
        result = await agent.send("c", "hello")
    assert result.text == "fine"
    [system] = systems
    assert "x" * 100 not in system.content
    assert system.content.endswith(
        '## Skills\nLoad one with skill_load({"name": X}) before following it.\n\n'
        "small — a small one\n"
        "… and 1 more skill not listed (skill_load loads any by name)"
    )


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=3_000), budget=st.integers(20, 800), count=counters)
def test_a_tool_result_is_cut_to_its_share(
    text: str, budget: int, count: Callable[[str], int]
) -> None:
    """The whole text when it fits; otherwise its longest prefix that fits with
    the line saying how much was cut."""
    cut = cut_to_tokens(text, budget, count)
    if count(text) <= budget:
        assert cut == text
        return
    kept, _, line = cut.rpartition("\n… [output truncated: ")
    assert text.startswith(kept)
    assert line == f"{len(text) - len(kept)} more characters]"
    if kept:
        assert count(cut) <= budget


async def test_a_loaded_skill_takes_at_most_a_quarter_of_the_window() -> None:
    """A skill body (here stored past the body limit, behind the agent's back)
    comes back cut to a quarter of the window, and the turn finishes."""
    storage = in_memory_storage()
    await storage.skill_store.upsert(Skill("long", "a long one", "step " * 20_000))
    seen: list[int] = []

    def respond(request: ModelRequest) -> ModelResponse:
        seen.append(sum(message_tokens(m, estimate_tokens) for m in request.messages))
        if request.messages[-1].role is Role.USER:
            return call("skill_load", {"name": "long"})
        return ModelResponse(text="read")

    async with open_chat_agent(
        model=ScriptedModel(respond), storage=storage, context=ContextPolicy(max_tokens=4_000)
    ) as agent:
        result = await agent.send("c", "load it")
    assert result.text == "read"
    loaded = result.messages[2].content
    assert estimate_tokens(loaded) <= 1_000
    assert loaded.endswith("more characters]")
    assert max(seen) <= 4_000


async def test_a_message_the_window_cannot_carry_is_refused_before_it_is_stored() -> None:
    """``context_exhausted`` before anything is stored, by ``send`` and
    ``stream`` alike; a turn waiting for approval is not superseded by it, and
    the conversation goes on as if it had not been sent."""

    @tool(requires_approval=True)
    async def wire(amount: int) -> str:
        """Wire."""
        return "sent"

    def respond(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].content == "pay":
            return call("wire", {"amount": 5})
        return ModelResponse(text="ok")

    storage = in_memory_storage()
    async with open_chat_agent(
        model=ScriptedModel(respond),
        storage=storage,
        tools=[wire],
        context=ContextPolicy(max_tokens=1_000),
    ) as agent:
        paused = await agent.send("c", "pay")
        before = await stored(storage, "c")
        with pytest.raises(TurnError, match=r"^the message needs \d+ tokens of context") as info:
            await agent.send("c", "x" * 3_000)
        assert info.value.code == "context_exhausted"
        async with agent.stream("c", "y" * 3_000) as events:
            seen = [e async for e in events]
        assert isinstance(seen[-1], TurnFailed) and seen[-1].code == "context_exhausted"
        assert await stored(storage, "c") == before
        assert await agent.pending_approvals("c") == paused.approvals
        done = await agent.decide("c", "c1", approve=True)
        assert done.text == "ok"

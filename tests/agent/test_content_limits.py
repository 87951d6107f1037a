"""Sizes of skills and notes are bounded at every write (issue: hardening, item 5).

A 900 KB skill description went into every system prompt and exhausted every
conversation's context. ``ContentLimits`` bounds a skill's name, description
and body and a note's text; every write the agent makes or lets through
refuses what is past a limit, and stores nothing:

- the Python API (``ChatAgent.storage``): ``TooLargeError`` (a ``ValueError``);
- the model's built-in tools: an error result the model can act on;
- the HTTP routes: 413 (tests/server/test_content_limits.py).

Skills belong to an owner (``agentik._scope``): a conversation of ``alice``
U+001F … saves, lists and loads ``alice``'s skills only.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import (
    MemoryEntry,
    ModelRequest,
    ModelResponse,
    Role,
    Skill,
    SkillSummary,
    in_memory_storage,
    open_chat_agent,
)
from agentik.agent import ContentLimits, TooLargeError
from agentik.models import ScriptedModel
from tests.agent.helpers import by_turn, call, stored
from tests.reliability.helpers import BACKENDS, Backend

SMALL = ContentLimits(max_skill_name=8, max_skill_description=20, max_skill_body=50, max_note=30)


def echo() -> ScriptedModel:
    return ScriptedModel(lambda request: ModelResponse(text="ok"))


class TestContentLimits:
    def test_defaults_are_documented_values(self) -> None:
        limits = ContentLimits()
        assert (
            limits.max_skill_name,
            limits.max_skill_description,
            limits.max_skill_body,
            limits.max_note,
        ) == (64, 500, 32_000, 4_000)
        assert (
            limits.skills_prompt_tokens,
            limits.notes_prompt_tokens,
            limits.reflections_prompt_tokens,
        ) == (2_000, 4_000, 1_000)

    @pytest.mark.parametrize("value", [0, -1, 1.5, True, "10"])
    def test_each_limit_is_a_positive_integer(self, value: object) -> None:
        with pytest.raises(ValueError, match=r"^max_note must be a positive integer, got "):
            ContentLimits(max_note=value)  # type: ignore[arg-type]

    async def test_open_chat_agent_checks_its_type(self) -> None:
        with pytest.raises(TypeError, match=r"^content_limits must be a ContentLimits or None"):
            async with open_chat_agent(
                model=echo(),
                storage=in_memory_storage(),
                content_limits={"max_note": 5},  # type: ignore[arg-type]
            ):
                pass


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_python_api_refuses_and_stores_nothing(backend: str, tmp_path: Path) -> None:
    store = Backend(backend, tmp_path / "db")
    async with (
        store.open() as storage,
        open_chat_agent(model=echo(), storage=storage, content_limits=SMALL) as agent,
    ):
        skills = agent.storage.skill_store
        await skills.upsert(Skill("tea", "when tea", "Boil water."))
        for bad, message in [
            (
                Skill("tea", "x" * 21, "Boil."),
                r"^skill 'tea': the description has 21 characters; at most 20 are allowed"
                r" \(max_skill_description\)$",
            ),
            (
                Skill("tea", "d", "b" * 51),
                r"^skill 'tea': the body has 51 characters; at most 50 are allowed"
                r" \(max_skill_body\)$",
            ),
            (
                Skill("ninechars", "d", "b"),
                r"^the skill name has 9 characters; at most 8 are allowed \(max_skill_name\)$",
            ),
            (
                Skill("alice\x1fninechars", "d", "b"),
                r"^the skill name has 9 characters; at most 8 are allowed",
            ),
        ]:
            with pytest.raises(TooLargeError, match=message):
                await skills.upsert(bad)
        for name in ["", "   ", "a\nb", "x\x00"]:
            with pytest.raises(ValueError, match=r"^a skill name must be printable characters"):
                await skills.upsert(Skill(name, "d", "b"))
        assert await skills.catalog() == [SkillSummary("tea", "when tea")]
        assert (await skills.get("tea")) is not None
        notes = agent.storage.working_memory_store
        first = await notes.append("c", "short")
        with pytest.raises(
            TooLargeError,
            match=r"^the note has 31 characters; at most 30 are allowed \(max_note\)$",
        ):
            await notes.append("c", "n" * 31)
        with pytest.raises(TooLargeError, match=r"^the note has 31 characters"):
            await notes.compact("c", [first.id], "n" * 31)
        assert [n.text for n in await notes.list("c")] == ["short"]


async def test_the_models_tools_get_an_error_and_nothing_is_stored() -> None:
    script = by_turn(
        {
            "save": [
                call("skill_save", {"name": "tea", "description": "d" * 21, "body": "b"}),
                "ok",
            ],
            "name": [call("skill_save", {"name": "a\tb", "description": "d", "body": "b"}), "ok"],
            "note": [call("memory_add", {"text": "n" * 31}, id="n1"), "ok"],
            "ok note": [call("memory_add", {"text": "fine"}, id="n2"), "ok"],
            "compact": [call("memory_compact", {"entry_ids": [1], "summary": "s" * 31}), "ok"],
        }
    )
    storage = in_memory_storage()
    async with open_chat_agent(
        model=ScriptedModel(script), storage=storage, content_limits=SMALL
    ) as agent:
        results = {}
        for text in ("save", "name", "note", "ok note", "compact"):
            results[text] = (await agent.send("c", text)).messages[2].content
    assert results == {
        "save": "error: skill 'tea': the description has 21 characters; at most 20 are"
        " allowed (max_skill_description)",
        "name": "error: a skill name must be printable characters, not only spaces, got 'a\\tb'",
        "note": "error: the note has 31 characters; at most 30 are allowed (max_note); shorten it",
        "ok note": "Noted as [1].",
        "compact": "error: the summary has 31 characters; at most 30 are allowed (max_note);"
        " shorten it",
    }
    assert await storage.skill_store.catalog() == []
    assert [n.text for n in await storage.working_memory_store.list("c")] == ["fine"]


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(1, 40),
    sizes=st.lists(st.tuples(st.integers(1, 60), st.integers(1, 60)), min_size=1, max_size=6),
)
async def test_a_write_is_stored_exactly_when_it_is_within_its_limit(
    limit: int, sizes: list[tuple[int, int]]
) -> None:
    """For random limits and sizes, through the Python API and the model's
    tools alike: within the limit it is stored, past it it is refused and the
    store is as before."""
    limits = ContentLimits(max_skill_description=limit, max_note=limit)
    storage = in_memory_storage()

    def respond(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if last.role is Role.USER:  # the size of the note to add
            return call("memory_add", {"text": "m" * int(last.content)})
        return ModelResponse(text="ok")

    async with open_chat_agent(
        model=ScriptedModel(respond), storage=storage, content_limits=limits
    ) as agent:
        expected_skills: dict[str, int] = {}
        expected_notes: list[int] = []
        for i, (description, note) in enumerate(sizes):
            skill = Skill(f"s{i}", "d" * description, "body")
            size = len(skill.description)
            if size <= limit:
                await agent.storage.skill_store.upsert(skill)
                expected_skills[skill.name] = size
            else:
                with pytest.raises(TooLargeError):
                    await agent.storage.skill_store.upsert(skill)
            result = await agent.send("c", str(note))
            if note <= limit:
                expected_notes.append(note)
            else:
                assert result.messages[2].content.startswith("error: the note has")
        catalog = await storage.skill_store.catalog()
        assert {s.name: len(s.description) for s in catalog} == expected_skills
        notes: list[MemoryEntry] = await storage.working_memory_store.list("c")
        assert [len(n.text) for n in notes] == expected_notes
        assert len(await stored(storage, "c")) == 4 * len(sizes)


async def test_skills_are_the_conversation_owners() -> None:
    """A conversation ``alice`` U+001F … saves into alice's scope; one of bob's
    neither lists nor loads it; one without an owner has the default scope."""
    script = by_turn(
        {
            "save": [
                call("skill_save", {"name": "plan", "description": "the plan", "body": "B"}),
                "ok",
            ],
            "load": [call("skill_load", {"name": "plan"}), "ok"],
            "remove": [call("skill_remove", {"name": "plan"}), "ok"],
            "steal": [call("skill_load", {"name": "alice\x1fplan"}), "ok"],
            "plant": [
                call("skill_save", {"name": "alice\x1fplan", "description": "d", "body": "B"}),
                "ok",
            ],
            "wipe": [call("skill_remove", {"name": "alice\x1fplan"}), "ok"],
        }
    )
    prompts: list[str] = []

    def respond(request: ModelRequest) -> ModelResponse:
        prompts.append(request.messages[0].content)
        return script(request)

    storage = in_memory_storage()
    async with open_chat_agent(model=ScriptedModel(respond), storage=storage) as agent:
        await agent.send("alice\x1fc", "save")
        assert await storage.skill_store.catalog() == [SkillSummary("alice\x1fplan", "the plan")]
        prompts.clear()
        assert (await agent.send("alice\x1fd", "load")).messages[2].content == "B"
        assert "plan — the plan" in prompts[0]
        prompts.clear()
        for conversation in ("bob\x1fc", "c"):
            loaded = await agent.send(conversation, "load")
            assert loaded.messages[2].content == (
                "error: no skill named 'plan'; saved skills: (none)"
            )
            removed = await agent.send(conversation, "remove")
            assert removed.messages[2].content == "error: no skill named 'plan'"
        assert all("the plan" not in p for p in prompts)
        # No name reaches into another owner's scope: U+001F is not printable.
        for text in ("steal", "plant", "wipe"):
            answer = (await agent.send("c", text)).messages[2].content
            assert answer == (
                "error: a skill name must be printable characters, not only spaces,"
                " got 'alice\\x1fplan'"
            )
        assert [s.name for s in await storage.skill_store.catalog()] == ["alice\x1fplan"]
        assert (await agent.send("alice\x1fc", "remove")).messages[2].content == (
            "Skill 'plan' removed."
        )
    assert await storage.skill_store.catalog() == []

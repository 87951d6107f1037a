"""The core memory tools (working memory, skills), reflections, and the repair
of a history that a crash left with unanswered tool calls."""

from __future__ import annotations

import pytest

from agentik import Message, ModelRequest, ModelResponse, Role, Skill, ToolCall
from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import in_memory_storage
from tests.agent.helpers import assert_valid_history, by_turn, call, stored


def _system(request: ModelRequest) -> str:
    return request.messages[0].content


async def test_working_memory_notes_appear_in_the_prompt_and_compact() -> None:
    """memory_add stores a note shown in later prompts; memory_compact replaces
    notes by a summary atomically."""
    requests: list[ModelRequest] = []
    script = by_turn(
        {
            "note": [
                call("memory_add", {"text": "user likes tea"}, id="a"),
                call("memory_add", {"text": "user is in Oslo"}, id="b"),
                "noted",
            ],
            "compact": [
                call("memory_compact", {"entry_ids": [1, 2], "summary": "tea, Oslo"}),
                "ok",
            ],
            "bad": [call("memory_compact", {"entry_ids": [99], "summary": "x"}), "ok"],
        }
    )

    def respond(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return script(request)

    storage = in_memory_storage()
    async with open_chat_agent(model=ScriptedModel(respond), storage=storage) as agent:
        await agent.send("c", "note")
        assert "[1] user likes tea" in _system(requests[-1])
        assert "[2] user is in Oslo" in _system(requests[-1])
        result = await agent.send("c", "compact")
        assert result.messages[2].content == "Compacted 2 notes into [3]."
        assert "[3] tea, Oslo" in _system(requests[-1])
        assert "user likes tea" not in _system(requests[-1])
        bad = await agent.send("c", "bad")
        assert bad.messages[2].content.startswith("error: no active notes with ids [99]")
    notes = await storage.working_memory_store.list("c")
    assert [n.text for n in notes] == ["tea, Oslo"]
    assert await storage.working_memory_store.list("other") == []


async def test_archived_notes_leave_the_prompt_and_stay_in_the_store() -> None:
    """memory_archive takes notes out of the prompt (and the active list); the
    store keeps them archived. Unknown ids are an error the model sees, and
    archive nothing."""
    requests: list[ModelRequest] = []
    script = by_turn(
        {
            "note": [
                call("memory_add", {"text": "draft plan"}, id="a"),
                call("memory_add", {"text": "final plan"}, id="b"),
                "noted",
            ],
            "archive": [call("memory_archive", {"entry_ids": [1, 1]}), "done"],
            "bad": [call("memory_archive", {"entry_ids": [2, 7]}), "ok"],
        }
    )

    def respond(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return script(request)

    storage = in_memory_storage()
    async with open_chat_agent(model=ScriptedModel(respond), storage=storage) as agent:
        await agent.send("c", "note")
        result = await agent.send("c", "archive")
        assert result.messages[2].content == "Archived 1 note."
        assert "draft plan" not in _system(requests[-1])
        assert "[2] final plan" in _system(requests[-1])
        bad = await agent.send("c", "bad")
        assert bad.messages[2].content.startswith("error: no active notes with ids [7]")
    notes = await storage.working_memory_store.list("c")
    assert [n.text for n in notes] == ["final plan"]


async def test_skills_catalog_in_prompt_body_on_demand() -> None:
    """skill_save puts name+description in every prompt; skill_load returns the
    body; skill_remove drops it; an unknown skill is an error listing the names."""
    requests: list[ModelRequest] = []
    script = by_turn(
        {
            "save": [
                call("skill_save", {"name": "brew", "description": "Make tea", "body": "boil"}),
                "saved",
            ],
            "load": [call("skill_load", {"name": "brew"}), "loaded"],
            "missing": [call("skill_load", {"name": "nope"}), "ok"],
            "remove": [call("skill_remove", {"name": "brew"}), "removed"],
            "after": ["ok"],
        }
    )

    def respond(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return script(request)

    storage = in_memory_storage()
    async with open_chat_agent(model=ScriptedModel(respond), storage=storage) as agent:
        await agent.send("c", "save")
        load = await agent.send("other-conversation", "load")
        assert "brew — Make tea" in _system(requests[-1])
        assert "boil" not in _system(requests[-1])
        assert load.messages[2].content == "boil"
        missing = await agent.send("c", "missing")
        assert missing.messages[2].content == "error: no skill named 'nope'; saved skills: brew"
        await agent.send("c", "remove")
        await agent.send("c", "after")
        assert "## Skills" not in _system(requests[-1])
    assert await storage.skill_store.all() == []


async def test_skill_written_through_agent_storage_shows_in_next_prompt() -> None:
    """Writes through agent.storage (as the HTTP API does) refresh the cached catalog."""
    requests: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return ModelResponse(text="ok")

    async with open_chat_agent(model=ScriptedModel(respond), storage=in_memory_storage()) as agent:
        await agent.send("c", "one")
        await agent.storage.skill_store.upsert(Skill("plan", "Plan a trip", "steps"))
        await agent.send("c", "two")
    assert "## Skills" not in _system(requests[0])
    assert "plan — Plan a trip" in _system(requests[1])


async def test_reflection_after_turn_is_stored_and_shown() -> None:
    """With reflection on, a lesson is stored after each finished turn and
    appears in later prompts (also of other conversations)."""
    requests: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        if request.messages[-1].content.startswith("What is the one lesson"):
            return ModelResponse(text="Be brief.")
        return ModelResponse(text="answer")

    storage = in_memory_storage()
    async with open_chat_agent(
        model=ScriptedModel(respond), storage=storage, reflection=True
    ) as agent:
        await agent.send("c", "one")
        await agent.send("d", "two")
    reflections = await storage.reflection_store.list_for_conversation("c")
    assert [r.text for r in reflections] == ["Be brief."]
    assert "- Be brief." in _system(requests[2])
    # The reflection exchange is not part of the conversation's history.
    assert [m.content for m in await stored(storage, "c")] == ["one", "answer"]


async def test_reflection_is_off_by_default() -> None:
    storage = in_memory_storage()
    async with open_chat_agent(
        model=ScriptedModel(lambda r: ModelResponse(text="a")), storage=storage
    ) as agent:
        await agent.send("c", "one")
    assert await storage.reflection_store.count() == 0


@pytest.mark.parametrize("resume", [True, False])
async def test_open_tool_calls_left_by_a_crash_are_answered_on_load(resume: bool) -> None:
    """A history ending in an assistant tool call without result (the process
    died mid-tool) is repaired when the conversation loads: valid for the
    model. Resumed (the default), the interrupted turn then gets its answer
    before the new message; with ``resume_interrupted=False`` it does not."""
    storage = in_memory_storage()
    store = storage.message_store
    await store.append("c", Message(Role.USER, "go"))
    await store.append(
        "c",
        Message(Role.ASSISTANT, "", (ToolCall("x1", "slow", "{}"), ToolCall("x2", "slow", "{}"))),
    )
    await store.append("c", Message(Role.TOOL, "done", tool_call_id="x1"))
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse(text="ok")

    async with open_chat_agent(
        model=ScriptedModel(respond), storage=storage, resume_interrupted=resume
    ) as agent:
        await agent.send("c", "next")
    history = await stored(storage, "c")
    assert_valid_history(history)
    assert history[3].tool_call_id == "x2"
    assert history[3].content == "interrupted: the process stopped before this call finished"
    if resume:
        assert [m.content for m in history[4:]] == ["ok", "next", "ok"]
        assert seen[0].messages[-1].tool_call_id == "x2"
        assert seen[1].messages[-1].content == "next"
    else:
        assert [m.content for m in history[4:]] == ["next", "ok"]
        assert len(seen) == 1


async def test_catalog_is_read_once_for_many_first_turns() -> None:
    """A thousand conversations starting at once share one catalog read and one
    reflections read (single flight), and a write makes the next turn re-read."""
    import attrs
    import trio

    from agentik import StorageBundle

    base = in_memory_storage()
    reads = {"catalog": 0, "recent": 0}

    class CountingSkills:
        def __getattr__(self, name: str) -> object:
            return getattr(base.skill_store, name)

        async def catalog(self) -> list[object]:
            reads["catalog"] += 1
            await trio.lowlevel.checkpoint()  # let the other first turns pile up
            return await base.skill_store.catalog()  # type: ignore[return-value]

    class CountingReflections:
        def __getattr__(self, name: str) -> object:
            return getattr(base.reflection_store, name)

        async def list_recent(self, limit: int) -> list[object]:
            reads["recent"] += 1
            await trio.lowlevel.checkpoint()
            return await base.reflection_store.list_recent(limit)  # type: ignore[return-value]

    storage = attrs.evolve(
        base, skill_store=CountingSkills(), reflection_store=CountingReflections()
    )
    assert isinstance(storage, StorageBundle)
    async with open_chat_agent(
        model=ScriptedModel(lambda r: ModelResponse(text="ok")), storage=storage
    ) as agent:
        assert reads == {"catalog": 1, "recent": 1}  # read as the agent opened
        async with trio.open_nursery() as nursery:
            for i in range(1000):
                nursery.start_soon(agent.send, f"c{i}", "hi")
        assert reads == {"catalog": 1, "recent": 1}
        await agent.storage.skill_store.upsert(Skill("s", "d", "b"))
        async with trio.open_nursery() as nursery:  # a burst after the write: one read
            for i in range(1000):
                nursery.start_soon(agent.send, f"c{i}", "again")
        assert reads == {"catalog": 2, "recent": 1}


async def test_a_catalog_that_fails_at_start_is_read_by_the_first_turn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The read as the agent opens is an optimisation: when it fails the agent
    still opens (with a warning), and the first turn reads again."""
    import attrs

    from agentik import StorageBundle

    base = in_memory_storage()
    failures = [RuntimeError("the disk is asleep")]

    class FailingOnce:
        def __getattr__(self, name: str) -> object:
            return getattr(base.skill_store, name)

        async def catalog(self) -> list[object]:
            if failures:
                raise failures.pop()
            return await base.skill_store.catalog()  # type: ignore[return-value]

    await base.skill_store.upsert(Skill("greet", "how to greet", "say hello"))
    storage = attrs.evolve(base, skill_store=FailingOnce())
    assert isinstance(storage, StorageBundle)
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse(text="ok")

    async with open_chat_agent(model=ScriptedModel(respond), storage=storage) as agent:
        assert "the disk is asleep" in caplog.text
        await agent.send("c", "hi")
    assert "greet" in seen[0].messages[0].content

"""The working memory, reflection and skill parts of the store contract."""

from __future__ import annotations

from datetime import datetime, timedelta

from agentik._errors import StoreError
from agentik._memory import Skill, SkillSummary
from agentik.storage import Storage
from agentik.testing._cases import MEGABYTE, UNICODE, Case, is_utc, raises

# --- working memory -------------------------------------------------------------


async def _memory_append_and_list(bundle: Storage) -> None:
    store = bundle.working_memory_store
    assert await store.list("c") == []
    first = await store.append("c", "one")
    other = await store.append("d", "elsewhere")
    second = await store.append("c", UNICODE)
    assert first.conversation_id == "c"
    assert first.text == "one"
    assert is_utc(first.created_at)
    assert len({first.id, other.id, second.id}) == 3, "entry ids repeat across conversations"
    assert await store.list("c") == [first, second], "list is not the active entries, oldest first"
    assert await store.list("d") == [other]


async def _memory_archive(bundle: Storage) -> None:
    store = bundle.working_memory_store
    a, b, c = [await store.append("c", t) for t in "abc"]
    theirs = await store.append("d", "theirs")
    assert await store.archive("c", [a.id, c.id, theirs.id, 10_000]) == 2
    assert await store.list("c") == [b], "archived entries are still listed"
    assert await store.list("d") == [theirs], "another conversation's entry was archived"
    assert await store.archive("c", [a.id]) == 0, "an archived entry was archived twice"
    assert await store.archive("c", []) == 0


async def _memory_compact(bundle: Storage) -> None:
    store = bundle.working_memory_store
    a, b, c = [await store.append("c", t) for t in "abc"]
    summary = await store.compact("c", [a.id, b.id], "a and b")
    assert summary.text == "a and b"
    assert summary.conversation_id == "c"
    assert summary.id not in (a.id, b.id, c.id)
    assert await store.list("c") == [c, summary], "compact did not archive or add the summary"


async def _memory_compact_refuses_foreign_ids(bundle: Storage) -> None:
    store = bundle.working_memory_store
    a, b = [await store.append("c", t) for t in "ab"]
    theirs = await store.append("d", "theirs")
    await store.archive("c", [b.id])
    for bad in ([a.id, theirs.id], [a.id, b.id], [a.id, 10_000]):
        with raises(StoreError, f"compact of {bad}"):
            await store.compact("c", bad, "summary")
    assert await store.list("c") == [a], "a refused compact changed conversation c"
    assert await store.list("d") == [theirs], "a refused compact changed conversation d"


async def _memory_archived_listed(bundle: Storage) -> None:
    store = bundle.working_memory_store
    assert await store.list_archived("c") == []
    a, b, c, d = [await store.append("c", t) for t in ("a", UNICODE, "c", "d")]
    theirs = await store.append("other", "theirs")
    await store.archive("c", [a.id, c.id])
    await store.archive("other", [theirs.id])
    summary = await store.compact("c", [b.id], "b, compacted")
    assert await store.list_archived("c") == [a, b, c], "archived notes, oldest first"
    assert await store.list("c") == [d, summary], "listing archived notes changed the active ones"
    assert await store.list_archived("c", limit=2) == [a, b]
    assert await store.list_archived("c", after_id=b.id) == [c], "after_id pages by id"
    assert await store.list_archived("c", after_id=c.id) == []
    assert await store.list_archived("other") == [theirs]
    assert await store.list_archived("nobody") == []


WORKING_MEMORY_CASES: tuple[Case, ...] = (
    _memory_append_and_list,
    _memory_archive,
    _memory_compact,
    _memory_compact_refuses_foreign_ids,
)
FULL_WORKING_MEMORY_CASES: tuple[Case, ...] = (_memory_archived_listed,)


# --- reflections ----------------------------------------------------------------


async def _reflections_insert_and_list(bundle: Storage) -> None:
    store = bundle.reflection_store
    assert await store.count() == 0
    assert await store.list_recent(5) == []
    made = [await store.insert("c" if i % 2 else "d", f"lesson {i}") for i in range(6)]
    assert all(is_utc(r.created_at) for r in made)
    assert len({r.id for r in made}) == 6
    assert await store.count() == 6
    assert await store.list_recent(4) == made[::-1][:4], "list_recent is not newest first"
    assert await store.list_recent(100) == made[::-1]
    assert await store.list_recent(0) == []
    assert await store.list_for_conversation("c") == made[1::2], "not oldest first"
    assert await store.list_for_conversation("nobody") == []
    with raises(ValueError, "list_recent(-1)"):
        await store.list_recent(-1)


async def _reflections_delete_older_than(bundle: Storage) -> None:
    store = bundle.reflection_store
    made = [await store.insert("c", UNICODE + str(i)) for i in range(5)]
    cutoff = made[2].created_at
    older = [r for r in made if r.created_at < cutoff]
    assert await store.delete_older_than(cutoff) == len(older), "cutoff is not strict"
    kept = [r for r in made if r not in older]
    assert await store.list_for_conversation("c") == kept
    assert await store.delete_older_than(cutoff) == 0
    assert await store.delete_older_than(made[-1].created_at + timedelta(microseconds=1)) == len(
        kept
    )
    assert await store.count() == 0
    with raises(ValueError, "a naive cutoff"):
        await store.delete_older_than(datetime(2030, 1, 1))
    later = await store.insert("c", "after")
    assert later.id > made[-1].id, "a reflection id was reused after deletion"


REFLECTION_CASES: tuple[Case, ...] = (
    _reflections_insert_and_list,
    _reflections_delete_older_than,
)


# --- skills ---------------------------------------------------------------------


async def _skills_empty(bundle: Storage) -> None:
    store = bundle.skill_store
    assert await store.catalog() == []
    assert await store.all() == []
    assert await store.get("x") is None
    assert not await store.exists("x")
    assert not await store.remove("x")


async def _skills_upsert_and_read(bundle: Storage) -> None:
    store = bundle.skill_store
    stored = {}
    for name in ("zeta", "alpha", "mid", UNICODE):
        skill = await store.upsert(Skill(name=name, description=f"about {name}", body=f"do {name}"))
        assert is_utc(skill.updated_at), f"updated_at {skill.updated_at!r} is not aware UTC"
        stored[name] = skill
    ordered = sorted(stored)
    assert await store.all() == [stored[n] for n in ordered], "all() is not sorted by name"
    assert await store.catalog() == [
        SkillSummary(name=n, description=f"about {n}") for n in ordered
    ]
    assert await store.get("mid") == stored["mid"]
    assert await store.exists(UNICODE)


async def _skills_upsert_replaces(bundle: Storage) -> None:
    store = bundle.skill_store
    old = await store.upsert(Skill(name="s", description="old", body="old body"))
    new = await store.upsert(Skill(name="s", description="new", body=MEGABYTE))
    assert old.updated_at is not None
    assert new.updated_at is not None
    assert new.updated_at >= old.updated_at
    assert await store.catalog() == [SkillSummary(name="s", description="new")]
    assert await store.get("s") == new, "upsert did not replace the skill"


async def _skills_remove(bundle: Storage) -> None:
    store = bundle.skill_store
    await store.upsert(Skill(name="a", description="", body=""))
    await store.upsert(Skill(name="b", description="", body=""))
    assert await store.remove("a")
    assert not await store.remove("a"), "removing twice reported success"
    assert not await store.exists("a")
    assert await store.get("a") is None
    assert [s.name for s in await store.all()] == ["b"]


SKILL_CASES: tuple[Case, ...] = (
    _skills_empty,
    _skills_upsert_and_read,
    _skills_upsert_replaces,
    _skills_remove,
)

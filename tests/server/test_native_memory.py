"""The working-memory archive and the summary over the native API (issue 16),
over real HTTP on 127.0.0.1 with a real SQLite file.

Notes and summaries follow one lifecycle: a note the client archives leaves
the model's prompt at once (also in a live conversation) and stays stored; a
summary is readable as the model wrote it. Both are the caller's own: another
owner's conversation or note answers exactly as one that does not exist.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import cast

import httpx2
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import MessageStore, Role, ScriptedModel, StorageBundle, WorkingMemoryStore
from agentik.models import demo_responder
from agentik.server import ServerConfig, serve_agentik
from agentik.server.http._errors import HttpError
from agentik.server.native._wire import parse_archive
from agentik.storage import in_memory_storage
from tests.security.conftest import LEGACY, OWNER_CLIENTS, TOKENS, Server, start

NOTE = 'call memory_add {{"text": "{}"}}'


@pytest.fixture
async def served(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Server]:
    """Owners alice and bob, and a small context budget so summaries happen."""
    async with start(
        nursery,
        tmp_path / "memory.db",
        clients=OWNER_CLIENTS,
        auth_token=LEGACY,
        context_tokens=400,
    ) as server:
        yield server


async def add_notes(client: httpx2.AsyncClient, cid: str, *texts: str) -> list[int]:
    """Notes added by the model (the demo model calls ``memory_add``); their ids."""
    for text in texts:
        response = await client.post(
            f"/agentik/conversations/{cid}/turns", json={"text": NOTE.format(text)}
        )
        assert response.status_code == 200, response.text
    memory = (await client.get(f"/agentik/conversations/{cid}/memory")).json()
    return [entry["id"] for entry in memory["entries"]]


def last_system_prompt(server: Server) -> str:
    turns = [r for r in server.model.requests if r.purpose == "turn"]
    system = turns[-1].messages[0]
    assert system.role is Role.SYSTEM
    return system.content


class TestArchive:
    async def test_archived_notes_leave_the_prompt_of_a_live_conversation(
        self, served: Server
    ) -> None:
        """The conversation is live (its notes cached) when the client archives:
        the next turn's prompt no longer shows the note; the other stays."""
        async with served.client(TOKENS["alice"]) as alice:
            tea, walks = await add_notes(alice, "c", "likes tea", "walks daily")
            await alice.post("/agentik/conversations/c/turns", json={"text": "hello"})
            assert "likes tea" in last_system_prompt(served)
            response = await alice.post(
                "/agentik/conversations/c/memory/archive", json={"entry_ids": [tea]}
            )
            assert response.status_code == 200, response.text
            assert response.json() == {"conversation_id": "c", "archived": 1}
            memory = (await alice.get("/agentik/conversations/c/memory")).json()
            assert [e["id"] for e in memory["entries"]] == [walks]
            assert memory["entries"][0]["conversation_id"] == "c"
            await alice.post("/agentik/conversations/c/turns", json={"text": "again"})
            prompt = last_system_prompt(served)
            assert "likes tea" not in prompt
            assert "walks daily" in prompt

    async def test_unknown_or_archived_ids_archive_nothing(self, served: Server) -> None:
        async with served.client(TOKENS["alice"]) as alice:
            [tea] = await add_notes(alice, "c", "likes tea")
            for ids in ([tea, tea + 1000], [tea + 1000]):
                response = await alice.post(
                    "/agentik/conversations/c/memory/archive", json={"entry_ids": ids}
                )
                assert response.status_code == 404
                assert response.json()["error"] == {
                    "code": "not_found",
                    "message": f"no active notes with ids [{tea + 1000}] in conversation 'c'",
                }
            memory = (await alice.get("/agentik/conversations/c/memory")).json()
            assert [e["id"] for e in memory["entries"]] == [tea], "a refusal archived a note"
            ok = await alice.post(
                "/agentik/conversations/c/memory/archive", json={"entry_ids": [tea, tea]}
            )
            assert ok.json()["archived"] == 1
            again = await alice.post(
                "/agentik/conversations/c/memory/archive", json={"entry_ids": [tea]}
            )
            assert again.status_code == 404, "an archived note is not active"

    async def test_another_owners_notes_are_not_found(self, served: Server) -> None:
        """Bob can neither reach alice's conversation nor archive her note from
        his own conversation of the same id; her note stays in her prompt."""
        async with served.client(TOKENS["alice"]) as alice, served.client(TOKENS["bob"]) as bob:
            [tea] = await add_notes(alice, "shared", "likes tea")
            body = {"entry_ids": [tea]}
            missing = await bob.post("/agentik/conversations/shared/memory/archive", json=body)
            assert missing.status_code == 404
            assert missing.json()["error"]["message"] == "conversation 'shared' not found"
            await bob.post("/agentik/conversations/shared/turns", json={"text": "hi"})
            theirs = await bob.post("/agentik/conversations/shared/memory/archive", json=body)
            assert theirs.status_code == 404
            assert "alice" not in theirs.text
            memory = (await alice.get("/agentik/conversations/shared/memory")).json()
            assert [e["id"] for e in memory["entries"]] == [tea]
            await alice.post("/agentik/conversations/shared/turns", json={"text": "hello"})
            assert "likes tea" in last_system_prompt(served)


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 2**64)
    | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_ODD_IDS: list[object] = [0, -1, True, False, 1.0, "1", None, 2**63, [1], {"id": 1}]


@st.composite
def bodies(draw: st.DrawFn) -> object:
    """Mostly near-valid archive bodies (good ids, wrong types, out of range,
    extra fields, empty or long lists), sometimes any JSON at all."""
    if draw(st.integers(0, 4)) == 0:
        return draw(_JSON)
    good = st.integers(1, 2**63 - 1)
    ids = draw(st.lists(good | st.sampled_from(_ODD_IDS), max_size=5))
    if draw(st.integers(0, 9)) == 0:
        ids = ids + [1] * draw(st.integers(995, 1005))
    body: dict[str, object] = {"entry_ids": ids}
    if draw(st.integers(0, 3)) == 0:
        body[draw(st.sampled_from(["extra", "entry_id", "text"]))] = 1
    return body


def well_formed(body: object) -> bool:
    """What the route accepts (then 200 or 404 by the notes): an object with
    only ``entry_ids``, 1..1000 positive integers that SQLite holds."""
    if not isinstance(body, dict) or set(body) != {"entry_ids"}:
        return False
    ids = body["entry_ids"]
    if not isinstance(ids, list) or not 1 <= len(ids) <= 1000:
        return False
    return all(type(i) is int and 0 < i < 2**63 for i in ids)


class TestBadInput:
    @settings(max_examples=300, deadline=None)
    @given(body=bodies())
    def test_a_body_is_parsed_only_when_well_formed(self, body: object) -> None:
        """Accepted exactly when well formed (ids kept in order, once each);
        otherwise a 422 naming the field, before any store is touched."""
        if not well_formed(body):
            with pytest.raises(HttpError) as info:
                parse_archive(body)  # type: ignore[arg-type]
            assert (info.value.status, info.value.code) == (422, "invalid_field")
            return
        parsed = parse_archive(body)  # type: ignore[arg-type]
        assert isinstance(body, dict)
        assert parsed.entry_ids == tuple(dict.fromkeys(body["entry_ids"]))

    async def test_refused_bodies_change_nothing(self, served: Server) -> None:
        """One of each kind of refusal over HTTP; the notes stay as they were."""
        async with served.client(TOKENS["alice"]) as alice:
            one, two = await add_notes(alice, "c", "one", "two")
            path = "/agentik/conversations/c/memory/archive"
            refused: list[tuple[object, int]] = [
                ([one], 422),
                ({}, 422),
                ({"entry_ids": []}, 422),
                ({"entry_ids": [one], "text": "x"}, 422),
                ({"entry_ids": one}, 422),
                ({"entry_ids": [one, True]}, 422),
                ({"entry_ids": [one, 1.0]}, 422),
                ({"entry_ids": [one, "2"]}, 422),
                ({"entry_ids": [one, -two]}, 422),
                ({"entry_ids": [one, 2**63]}, 422),
                ({"entry_ids": [one, two + 10_000]}, 404),
            ]
            for body, status in refused:
                response = await alice.post(path, content=json.dumps(body))
                assert response.status_code == status, (body, response.text)
            memory = (await alice.get("/agentik/conversations/c/memory")).json()
            assert [e["id"] for e in memory["entries"]] == [one, two]

    async def test_not_json_and_oversized(self, served: Server) -> None:
        async with served.client(TOKENS["alice"]) as alice:
            await add_notes(alice, "c", "likes tea")
            path = "/agentik/conversations/c/memory/archive"
            assert (await alice.post(path, content=b"{nope")).status_code == 400
            many = {"entry_ids": list(range(1, 1002))}
            response = await alice.post(path, json=many)
            assert response.status_code == 422
            assert response.json()["error"]["message"] == (
                "field 'entry_ids' must hold 1..1000 note ids, got 1001"
            )


class TestSummary:
    async def test_summary_appears_once_the_history_outgrows_the_budget(
        self, served: Server
    ) -> None:
        async with served.client(TOKENS["alice"]) as alice:
            await alice.post("/agentik/conversations/long/turns", json={"text": "first"})
            first = (await alice.get("/agentik/conversations/long/summary")).json()
            assert first == {"conversation_id": "long", "summary": None}
            for i in range(12):
                text = f"question {i} " * 10
                response = await alice.post(
                    "/agentik/conversations/long/turns", json={"text": text}
                )
                assert response.status_code == 200, response.text
            body = (await alice.get("/agentik/conversations/long/summary")).json()
            summary = body["summary"]
            assert summary is not None, "no summary after 12 turns over a 400-token budget"
            assert set(summary) == {"through_seq", "text", "created_at"}
            assert summary["text"].strip()
            assert summary["through_seq"] >= 2
            requests = [r for r in served.model.requests if r.purpose == "summary"]
            echoes = [f"You said: {r.messages[-1].content}" for r in requests]
            # The demo model echoes its request: longer than half the budget, so cut.
            text = summary["text"]
            kept = text.removesuffix(" … [cut]")
            assert text in echoes or (kept != text and any(e.startswith(kept) for e in echoes))
            # History stays whole: compaction never deletes.
            messages = await alice.get(
                "/agentik/conversations/long/messages", params={"limit": 1000}
            )
            assert len(messages.json()["messages"]) == 26

    async def test_summary_is_the_owners_own(self, served: Server) -> None:
        async with served.client(TOKENS["alice"]) as alice, served.client(TOKENS["bob"]) as bob:
            for i in range(12):
                await alice.post("/agentik/conversations/s/turns", json={"text": f"q {i} " * 10})
            assert (await alice.get("/agentik/conversations/s/summary")).json()["summary"]
            response = await bob.get("/agentik/conversations/s/summary")
            assert response.status_code == 404
            assert response.json()["error"]["message"] == "conversation 's' not found"
            await bob.post("/agentik/conversations/s/turns", json={"text": "hi"})
            mine = (await bob.get("/agentik/conversations/s/summary")).json()
            assert mine == {"conversation_id": "s", "summary": None}
        async with served.client(LEGACY) as legacy:
            assert (await legacy.get("/agentik/conversations/s/summary")).status_code == 404


class TestArchivedNotes:
    async def test_archived_notes_are_listed_however_they_were_archived(
        self, served: Server
    ) -> None:
        """By a client, by the model's ``memory_archive``: either way the note
        leaves ``/memory`` and appears in ``/memory/archived``, oldest first,
        with its text as written."""
        async with served.client(TOKENS["alice"]) as alice:
            tea, walks, cats = await add_notes(alice, "c", "likes tea", "walks daily", "has cats")
            empty = (await alice.get("/agentik/conversations/c/memory/archived")).json()
            assert empty == {"conversation_id": "c", "entries": [], "next_after_id": None}
            await alice.post("/agentik/conversations/c/memory/archive", json={"entry_ids": [cats]})
            by_model = f'call memory_archive {{"entry_ids": [{tea}]}}'
            response = await alice.post("/agentik/conversations/c/turns", json={"text": by_model})
            assert response.status_code == 200, response.text
            body = (await alice.get("/agentik/conversations/c/memory/archived")).json()
            assert [(e["id"], e["text"]) for e in body["entries"]] == [
                (tea, "likes tea"),
                (cats, "has cats"),
            ]
            assert {e["conversation_id"] for e in body["entries"]} == {"c"}
            memory = (await alice.get("/agentik/conversations/c/memory")).json()
            assert [e["id"] for e in memory["entries"]] == [walks]

    async def test_pages_by_id(self, served: Server) -> None:
        async with served.client(TOKENS["alice"]) as alice:
            ids = await add_notes(alice, "c", "a", "b", "c", "d", "e")
            await alice.post("/agentik/conversations/c/memory/archive", json={"entry_ids": ids})
            seen: list[int] = []
            after = 0
            while True:
                page = (
                    await alice.get(
                        "/agentik/conversations/c/memory/archived",
                        params={"after_id": after, "limit": 2},
                    )
                ).json()
                seen += [e["id"] for e in page["entries"]]
                if page["next_after_id"] is None:
                    break
                after = page["next_after_id"]
            assert seen == ids

    async def test_another_owners_archive_is_not_found(self, served: Server) -> None:
        async with served.client(TOKENS["alice"]) as alice, served.client(TOKENS["bob"]) as bob:
            [tea] = await add_notes(alice, "shared", "likes tea")
            await alice.post(
                "/agentik/conversations/shared/memory/archive", json={"entry_ids": [tea]}
            )
            missing = await bob.get("/agentik/conversations/shared/memory/archived")
            assert missing.status_code == 404
            await bob.post("/agentik/conversations/shared/turns", json={"text": "hi"})
            mine = (await bob.get("/agentik/conversations/shared/memory/archived")).json()
            assert mine["entries"] == []

    async def test_bad_paging_is_refused(self, served: Server) -> None:
        async with served.client(TOKENS["alice"]) as alice:
            await add_notes(alice, "c", "likes tea")
            for params in ({"limit": "0"}, {"limit": "١"}, {"after_id": "-1"}, {"after_id": "x"}):
                response = await alice.get(
                    "/agentik/conversations/c/memory/archived", params=params
                )
                assert response.status_code == 422, (params, response.text)
            unknown = await alice.get("/agentik/conversations/nobody/memory/archived")
            assert unknown.status_code == 404


class TestSummaryChain:
    async def test_every_summary_is_listed_oldest_first(self, served: Server) -> None:
        """Compaction chains summaries; all of them stay readable, each covering
        more than the one before, the last one the latest (``/summary``)."""
        served.model.short_summaries = True
        async with served.client(TOKENS["alice"]) as alice:
            for i in range(30):
                response = await alice.post(
                    "/agentik/conversations/long/turns", json={"text": f"question {i} " * 10}
                )
                assert response.status_code == 200, response.text
            # A summary runs after a turn's answer is delivered: read the chain
            # between two reads of the latest that agree, so none landed between.
            summary_path = "/agentik/conversations/long/summary"
            for _ in range(100):
                latest = (await alice.get(summary_path)).json()["summary"]
                body = (await alice.get("/agentik/conversations/long/summaries")).json()
                if (await alice.get(summary_path)).json()["summary"] == latest:
                    break
            chain = body["summaries"]
            assert len(chain) >= 2, "30 turns over a 400-token budget chain no summaries"
            seqs = [s["through_seq"] for s in chain]
            assert seqs == sorted(set(seqs)), "summaries are not oldest first, each further"
            assert chain[-1] == latest
            written = [i + 1 for i, r in enumerate(served.model.requests) if r.purpose == "summary"]
            listed = [s["text"] for s in chain]
            # The model may have answered one more whose write is under way.
            assert listed == [f"summary number {i}" for i in written][: len(listed)], (
                "the listed summaries are not the summaries the model wrote, in order"
            )
            assert len(written) - len(listed) <= 1
            after = seqs[0]
            rest = await alice.get(
                "/agentik/conversations/long/summaries", params={"after_seq": after, "limit": 1}
            )
            page = rest.json()
            assert page["summaries"] == chain[1:2]
            assert page["next_after_seq"] == seqs[1]

    async def test_another_owners_summaries_are_not_found(self, served: Server) -> None:
        async with served.client(TOKENS["alice"]) as alice, served.client(TOKENS["bob"]) as bob:
            for i in range(12):
                await alice.post("/agentik/conversations/s/turns", json={"text": f"q {i} " * 10})
            assert (await alice.get("/agentik/conversations/s/summaries")).json()["summaries"]
            assert (await bob.get("/agentik/conversations/s/summaries")).status_code == 404
            await bob.post("/agentik/conversations/s/turns", json={"text": "hi"})
            mine = (await bob.get("/agentik/conversations/s/summaries")).json()
            assert mine == {"conversation_id": "s", "summaries": [], "next_after_seq": None}


class _Without:
    """A store that hides some of its methods: a backend without the optional readers."""

    def __init__(self, inner: object, *hidden: str) -> None:
        self._inner = inner
        self._hidden = hidden

    def __getattr__(self, name: str) -> object:
        if name in self._hidden:
            raise AttributeError(name)
        return getattr(self._inner, name)


async def test_a_backend_without_the_readers_answers_501(nursery: trio.Nursery) -> None:
    inner = in_memory_storage()
    storage = StorageBundle(
        message_store=cast(MessageStore, _Without(inner.message_store, "list_summaries")),
        working_memory_store=cast(
            WorkingMemoryStore, _Without(inner.working_memory_store, "list_archived")
        ),
        reflection_store=inner.reflection_store,
        skill_store=inner.skill_store,
    )
    stop = trio.Event()
    url = await nursery.start(
        partial(
            serve_agentik,
            ServerConfig(port=0),
            storage=storage,
            model=ScriptedModel(demo_responder),
            shutdown_trigger=stop.wait,
        )
    )
    try:
        async with httpx2.AsyncClient(base_url=url) as client:
            await client.post("/agentik/conversations/c/turns", json={"text": "hi"})
            for path, what in (("summaries", "summaries"), ("memory/archived", "archived notes")):
                response = await client.get(f"/agentik/conversations/c/{path}")
                assert response.status_code == 501, response.text
                assert response.json()["error"] == {
                    "code": "not_implemented",
                    "message": f"this storage backend does not list {what}",
                }
            assert (await client.get("/agentik/conversations/c/summary")).status_code == 200
    finally:
        stop.set()

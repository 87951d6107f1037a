"""A conversation's usage, deletion and export over HTTP are owner-scoped:
the owner gets them, another owner gets exactly what an unknown id gets and
changes nothing. Real HTTP to a server on 127.0.0.1 with a real SQLite file."""

from __future__ import annotations

import httpx2
import trio

from tests.security.conftest import LEGACY, TOKENS, Server

ALICE, BOB = TOKENS["alice"], TOKENS["bob"]


async def _turn(client: httpx2.AsyncClient, conversation: str, text: str) -> None:
    reply = await client.post(f"/agentik/conversations/{conversation}/turns", json={"text": text})
    assert reply.status_code == 200, reply.text


async def test_usage_is_the_owners_token_totals(owners: Server) -> None:
    """GET …/usage sums the conversation's stored usage; to another owner the
    conversation is missing (404, the same body as a never-used id)."""
    async with owners.client(ALICE) as alice, owners.client(BOB) as bob:
        await _turn(alice, "u", "hello there")
        await _turn(alice, "u", "and again")
        mine = await alice.get("/agentik/conversations/u/usage")
        theirs = await bob.get("/agentik/conversations/u/usage")
        nobody = await bob.get("/agentik/conversations/never/usage")
    stats = await owners.storage.message_store.token_stats("alice\x1fu")
    assert stats.total_tokens > 0
    assert mine.status_code == 200
    assert mine.json() == {
        "conversation_id": "u",
        "input_tokens": stats.prompt_tokens,
        "output_tokens": stats.completion_tokens,
        "total_tokens": stats.total_tokens,
        "messages_with_usage": stats.messages,
    }
    assert theirs.status_code == nobody.status_code == 404
    assert theirs.text.replace("'u'", "'never'") == nobody.text


async def test_delete_is_the_owners_alone(owners: Server) -> None:
    """DELETE …/{id}: another owner gets 404 (as for a never-used id) and the
    conversation stays; the owner gets 204, then 404 for it and its messages."""
    async with owners.client(ALICE) as alice, owners.client(BOB) as bob:
        await _turn(alice, "d", "keep this")
        await _turn(bob, "d", "bob's own")
        theirs = await bob.delete("/agentik/conversations/never")
        assert theirs.status_code == 404
        # bob deleting "d" deletes his own "d", never alice's
        assert (await bob.delete("/agentik/conversations/d")).status_code == 204
        assert (await bob.delete("/agentik/conversations/d")).status_code == 404
        assert (await alice.get("/agentik/conversations/d/messages")).status_code == 200
        mine = await alice.delete("/agentik/conversations/d")
        assert mine.status_code == 204 and mine.content == b""
        assert (await alice.get("/agentik/conversations/d/messages")).status_code == 404
        assert (await alice.delete("/agentik/conversations/d")).status_code == 404
    assert await owners.storage.message_store.list_conversations() == []


async def test_export_is_the_owners_and_names_the_clients_id(owners: Server) -> None:
    """GET …/export streams the archive (JSON Lines) under the id the client
    knows, never the owner-scoped one; another owner gets 404."""
    from agentik.storage._jsonl import read_archive

    async with owners.client(ALICE) as alice, owners.client(BOB) as bob:
        await _turn(alice, "e", 'call memory_add {"text": "alice likes tea"}')
        await _turn(alice, "e", "and more")
        reply = await alice.get("/agentik/conversations/e/export")
        theirs = await bob.get("/agentik/conversations/e/export")
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("application/jsonl")
    assert "\x1f" not in reply.text and "alice\x1f" not in reply.text
    archive = read_archive(reply.text.splitlines())
    assert (archive.conversation_id, archive.owner) == ("e", "alice")
    records = archive.records
    stored = [r async for r in owners.storage.message_store.export_conversation("alice\x1fe")]
    assert len(records) == len(stored)
    assert [type(r) for r in records] == [type(r) for r in stored]
    assert theirs.status_code == 404


async def test_an_export_imported_with_the_cli_is_the_owners_again(owners: Server) -> None:
    """Alice's export carries her as its owner: imported with ``agentik
    import``, she reads the conversation as before, and neither the default
    owner nor Bob sees it (on main it landed in the default owner's ids)."""
    from agentik.cli import main

    async with owners.client(ALICE) as alice, owners.client(LEGACY) as legacy:
        await _turn(alice, "mine", "remember this")
        before = (await alice.get("/agentik/conversations/mine/messages")).json()
        archive = (await alice.get("/agentik/conversations/mine/export")).text
        assert (await alice.delete("/agentik/conversations/mine")).status_code == 204
        path = owners.database.with_name("mine.jsonl")
        path.write_text(archive, encoding="utf-8")
        # This embedded server holds no lock on its file (the test passed it
        # the storage); `agentik serve` does, and the import would be refused.
        code = await trio.to_thread.run_sync(
            main, ["import", str(path), "-d", str(owners.database)]
        )
        assert code == 0
        after = await alice.get("/agentik/conversations/mine/messages")
        theirs = await legacy.get("/agentik/conversations/mine/messages")
    assert after.status_code == 200 and after.json() == before
    assert theirs.status_code == 404
    assert await owners.storage.message_store.list_conversations() == ["alice\x1fmine"]

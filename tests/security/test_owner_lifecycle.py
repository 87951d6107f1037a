"""A conversation's usage, deletion and export over HTTP are owner-scoped:
the owner gets them, another owner gets exactly what an unknown id gets and
changes nothing. Real HTTP to a server on 127.0.0.1 with a real SQLite file."""

from __future__ import annotations

import httpx

from tests.security.conftest import TOKENS, Server

ALICE, BOB = TOKENS["alice"], TOKENS["bob"]


async def _turn(client: httpx.AsyncClient, conversation: str, text: str) -> None:
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

"""``POST /agentik/conversations/{id}/cancel`` over real HTTP: the running turn
and the queued ones, counted; owner-scoped (another owner's cancel cancels
nothing and answers as for an unknown conversation)."""

from __future__ import annotations

import httpx2
import trio

from agentik.agent._turn_events import STOPPED
from tests.security.conftest import LEGACY, TOKENS, Server

ALICE, BOB = TOKENS["alice"], TOKENS["bob"]
SHARED = "/agentik/conversations/shared"


async def wait_for_call(client: httpx2.AsyncClient, name: str) -> None:
    """Poll the stored history until the model's call of ``name`` is recorded."""
    with trio.fail_after(20):
        while True:
            reply = await client.get(f"{SHARED}/messages")
            if reply.status_code == 200:
                calls = [c["name"] for m in reply.json()["messages"] for c in m["tool_calls"]]
                if name in calls:
                    return
            await trio.sleep(0.02)


async def test_cancel_stops_the_running_and_queued_turns_of_the_caller_only(
    owners: Server,
) -> None:
    answers: list[httpx2.Response] = []
    async with owners.client(ALICE) as alice, owners.client(BOB) as bob:
        async with owners.client(LEGACY) as legacy:
            enabled = await alice.post(
                f"{SHARED}/turns", json={"text": 'call enable_toolset {"name": "clock"}'}
            )
            assert enabled.status_code == 200
            assert (await alice.post(f"{SHARED}/cancel")).json() == {
                "conversation_id": "shared",
                "cancelled": 0,
            }

            async def post(text: str) -> None:
                answers.append(await alice.post(f"{SHARED}/turns", json={"text": text}))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(post, "call clock_wait")
                await wait_for_call(alice, "clock_wait")
                nursery.start_soon(post, "call clock_now")
                await trio.sleep(0.3)  # it reaches the conversation's queue
                for other in (bob, legacy):
                    refused = await other.post(f"{SHARED}/cancel")
                    unknown = await other.post("/agentik/conversations/nowhere/cancel")
                    assert refused.status_code == unknown.status_code == 404
                    assert refused.json()["error"]["code"] == "not_found"
                    assert refused.text.replace("shared", "nowhere") == unknown.text
                cancelled = await alice.post(f"{SHARED}/cancel")
                assert cancelled.status_code == 200
                assert cancelled.json() == {"conversation_id": "shared", "cancelled": 2}
            assert [a.status_code for a in answers] == [409, 409]
            assert {a.json()["error"]["code"] for a in answers} == {"cancelled"}
            messages = (await alice.get(f"{SHARED}/messages")).json()["messages"]
            texts = [m["content"] for m in messages]
            assert "call clock_now" not in texts, "the queued turn never ran"
            assert texts[-3:] == ["call clock_wait", "", STOPPED]
            again = await alice.post(f"{SHARED}/turns", json={"text": "hello"})
            assert again.status_code == 200

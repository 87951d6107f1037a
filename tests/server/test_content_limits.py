"""One owner cannot break another's turns through skills or notes, and a context
overflow is never a 5xx (issue: hardening, item 5), over real HTTP.

- ``PUT /agentik/skills/{name}`` past ``[limits] max_skill_*`` is 413
  (``too_large``) and stores nothing; a name that is not printable is 422.
- Skills are per owner; each prompt takes a bounded share of the window.
  The testers' case (bob's 900 KB skill description, ``context_tokens =
  32000``) leaves alice's turns alone, and bob's own.
- A user message the window cannot carry is refused before it is stored:
  ``413 context_exhausted`` (native JSON), the same code in the native SSE
  ``error`` event and AG-UI's ``RUN_ERROR``, and an A2A task that failed with
  the reason.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from agentik.server import Limits
from tests.security.conftest import LEGACY, OWNER_CLIENTS, TOKENS, Server, start
from tests.server.agui_rules import check_events, parse_sse

ALICE, BOB = TOKENS["alice"], TOKENS["bob"]
SSE = {"Accept": "text/event-stream"}
WINDOW = 2_000
"""``[model] context_tokens`` of the overflow tests: about 6,000 bytes of text."""
TOO_LONG = "word " * 3_000


@pytest.fixture
async def owners(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Server]:
    """alice, bob and the default owner, on a 32,000-token window (the testers')."""
    async with start(
        nursery,
        tmp_path / "agentik.db",
        clients=OWNER_CLIENTS,
        auth_token=LEGACY,
        context_tokens=32_000,
    ) as server:
        yield server


async def turn(client: httpx2.AsyncClient, conversation: str, text: str) -> httpx2.Response:
    return await client.post(f"/agentik/conversations/{conversation}/turns", json={"text": text})


class TestSkillWrites:
    async def test_a_skill_past_a_limit_is_413_and_stores_nothing(self, owners: Server) -> None:
        async with owners.client(BOB) as bob:
            huge = await bob.put(
                "/agentik/skills/greet", json={"description": "x" * 900_000, "body": "hi"}
            )
            assert huge.status_code == 413, huge.text
            assert huge.json()["error"] == {
                "code": "too_large",
                "message": "skill 'greet': the description has 900000 characters; at most 500"
                " are allowed (max_skill_description)",
            }
            body = await bob.put(
                "/agentik/skills/greet", json={"description": "d", "body": "b" * 32_001}
            )
            assert (body.status_code, body.json()["error"]["code"]) == (413, "too_large")
            name = await bob.put(
                f"/agentik/skills/{'n' * 65}", json={"description": "d", "body": "b"}
            )
            assert name.status_code == 413
            assert "the skill name has 65 characters; at most 64" in name.text
            assert (await bob.get("/agentik/skills/greet")).status_code == 404
            assert (await bob.get("/agentik/skills")).json() == {"skills": []}
            ok = await bob.put(
                "/agentik/skills/greet", json={"description": "x" * 500, "body": "b" * 32_000}
            )
            assert ok.status_code == 200, ok.text
        assert [s.name for s in await owners.storage.skill_store.catalog()] == ["bob\x1fgreet"]

    async def test_the_limits_come_from_the_settings(
        self, nursery: trio.Nursery, tmp_path: Path
    ) -> None:
        async with (
            start(
                nursery,
                tmp_path / "agentik.db",
                limits=Limits(max_skill_description=10, max_note=5),
            ) as server,
            server.client(None) as client,
        ):
            put = await client.put(
                "/agentik/skills/greet", json={"description": "x" * 11, "body": "b"}
            )
            assert put.status_code == 413
            assert "at most 10 are allowed (max_skill_description)" in put.text
            said = await turn(client, "c", 'call memory_add {"text": "too long"}')
            tool = [m for m in said.json()["messages"] if m["role"] == "tool"]
            assert tool[0]["content"] == (
                "error: the note has 8 characters; at most 5 are allowed (max_note); shorten it"
            )


async def test_one_owners_skills_never_break_anothers_turns(owners: Server) -> None:
    """The testers' case: bob tries a 900 KB description (413), then saves the
    most he may, over HTTP and through his model; alice's turns and bob's own
    still succeed, and no prompt of alice's carries bob's text."""
    async with owners.client(ALICE) as alice, owners.client(BOB) as bob:
        assert (await turn(alice, "c", "hello")).status_code == 200
        huge = await bob.put(
            "/agentik/skills/big", json={"description": "B" * 900_000, "body": "b"}
        )
        assert huge.status_code == 413
        for i in range(60):
            put = await bob.put(
                f"/agentik/skills/s{i:02}",
                json={"description": "BOB" + "b" * 497, "body": "b" * 32_000},
            )
            assert put.status_code == 200
        saved = await turn(
            bob,
            "c",
            "call skill_save "
            + json.dumps({"name": "via-model", "description": "B" * 600, "body": "b"}),
        )
        assert saved.status_code == 200
        assert "at most 500 are allowed" in json.dumps(saved.json())
        owners.model.requests.clear()
        for who, client in (("alice", alice), ("bob", bob)):
            answered = await turn(client, "c", f"hello from {who}")
            assert answered.status_code == 200, answered.text
            assert answered.json()["text"] == f"You said: hello from {who}"
        alice_prompt, bob_prompt = (r.messages[0].content for r in owners.model.requests)
        assert "BOB" not in alice_prompt
        assert "more skills not listed" in bob_prompt
        assert len(bob_prompt) < 3 * 32_000 * 0.1 + 2_000


class TestContextOverflow:
    """A message larger than the window: a 4xx with a clear code everywhere,
    and nothing stored."""

    @pytest.fixture
    async def small(self, nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Server]:
        async with start(nursery, tmp_path / "agentik.db", context_tokens=WINDOW) as server:
            yield server

    async def nothing_stored(self, server: Server, conversation: str) -> None:
        assert await server.storage.message_store.list_conversations() == [], conversation

    async def test_native_json_is_413(self, small: Server) -> None:
        async with small.client(None) as client:
            response = await turn(client, "c", TOO_LONG)
            assert response.status_code == 413, response.text
            error = response.json()["error"]
            assert error["code"] == "context_exhausted"
            assert error["message"].startswith("the message needs ")
            assert error["message"].endswith(
                f"and the window is {WINDOW} (context max_tokens); send a shorter one"
            )
            await self.nothing_stored(small, "c")
            assert (await turn(client, "c", "short")).status_code == 200

    async def test_native_sse_ends_with_the_code(self, small: Server) -> None:
        async with small.client(None) as client:
            response = await client.post(
                "/agentik/conversations/c/turns", json={"text": TOO_LONG}, headers=SSE
            )
        events = parse_sse(response.text)
        assert events[-1]["type"] == "turn_failed"
        assert events[-1]["code"] == "context_exhausted"
        await self.nothing_stored(small, "c")

    async def test_agui_run_error_has_the_code(self, small: Server) -> None:
        body: dict[str, Any] = {
            "threadId": "t",
            "runId": "r1",
            "protocolVersion": "1.0",
            "state": {},
            "messages": [{"id": "u1", "role": "user", "content": TOO_LONG}],
            "tools": [],
            "context": [],
            "forwardedProps": {},
        }
        async with small.client(None) as client:
            response = await client.post("/agui", json=body, headers=SSE)
        assert response.status_code == 200
        events = check_events(parse_sse(response.text))
        assert events[-1].type.value == "RUN_ERROR"
        assert events[-1].code == "context_exhausted"
        await self.nothing_stored(small, "t")

    async def test_a2a_task_fails_with_the_reason(self, small: Server) -> None:
        params = {
            "message": {
                "messageId": "m1",
                "contextId": "ctx",
                "role": "ROLE_USER",
                "parts": [{"text": TOO_LONG}],
            }
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
        async with small.client(None) as client:
            response = await client.post("/a2a", json=body, headers={"A2A-Version": "1.0"})
        assert response.status_code == 200
        task = response.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_FAILED"
        reason = " ".join(p.get("text", "") for p in task["status"]["message"]["parts"])
        assert "the message needs " in reason
        assert f"the window is {WINDOW}" in reason
        await self.nothing_stored(small, "ctx")

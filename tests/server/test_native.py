"""The native API under /agentik, over real HTTP."""

from __future__ import annotations

import json

from tests.server.agui_rules import parse_sse
from tests.server.conftest import Running

ENABLE = 'call enable_toolset {"name": "clock"}'


class TestTurns:
    async def test_json_turn(self, server: Running) -> None:
        """A turn answers with its TurnResult: text, messages (user first, stored), usage."""
        response = await server.client.post(
            "/agentik/conversations/c1/turns", json={"text": "hello"}
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["text"] == "You said: hello"
        assert [m["role"] for m in body["messages"]] == ["user", "assistant"]
        assert [m["seq"] for m in body["messages"]] == [1, 2]
        assert body["usage"]["prompt_tokens"] > 0

    async def test_idempotent_retry(self, server: Running) -> None:
        """The same idempotency key returns the first result and adds nothing."""
        turn = {"text": "once", "idempotency_key": "k1"}
        first = await server.client.post("/agentik/conversations/c2/turns", json=turn)
        again = await server.client.post("/agentik/conversations/c2/turns", json=turn)
        assert first.json() == again.json()
        history = await server.client.get("/agentik/conversations/c2/messages")
        assert len(history.json()["messages"]) == 2

    async def test_sse_turn_with_tool(self, server: Running) -> None:
        """With Accept: text/event-stream the turn's events stream, ending in turn_finished."""
        response = await server.client.post(
            "/agentik/conversations/c3/turns",
            json={"text": ENABLE},
            headers={"Accept": "text/event-stream"},
        )
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = parse_sse(response.text)
        kinds = [e["type"] for e in events]
        assert kinds[-1] == "turn_finished"
        assert "tool_call_started" in kinds
        finished = next(e for e in events if e["type"] == "tool_call_finished")
        assert finished["content"] == "Toolset 'clock' activated."
        assert events[-1]["active_toolsets"] == ["clock"]
        assert "event: turn_finished\n" in response.text


class TestInspection:
    async def test_conversations_messages_memory_toolsets(self, server: Running) -> None:
        for cid in ("a", "b", "c"):
            await server.client.post(f"/agentik/conversations/{cid}/turns", json={"text": "hi"})
        await server.client.post("/agentik/conversations/a/turns", json={"text": ENABLE})
        page = (await server.client.get("/agentik/conversations", params={"limit": 2})).json()
        assert page == {"conversations": ["a", "b"], "next_after": "b"}
        rest = await server.client.get("/agentik/conversations", params={"after": "b"})
        assert rest.json()["conversations"] == ["c"]
        messages = await server.client.get(
            "/agentik/conversations/a/messages", params={"after_seq": 2, "limit": 2}
        )
        body = messages.json()
        assert [m["seq"] for m in body["messages"]] == [3, 4]
        assert body["next_after_seq"] == 4
        assert body["messages"][1]["tool_calls"][0]["name"] == "enable_toolset"
        memory = await server.client.get("/agentik/conversations/a/memory")
        assert memory.json() == {"conversation_id": "a", "entries": []}
        toolsets = (await server.client.get("/agentik/conversations/a/toolsets")).json()
        [clock] = toolsets["toolsets"]
        assert clock["name"] == "clock"
        assert clock["active"] is True
        assert clock["expires_in"] > 0
        other = (await server.client.get("/agentik/conversations/b/toolsets")).json()
        assert other["toolsets"][0]["active"] is False

    async def test_unknown_conversation(self, server: Running) -> None:
        for path in ("messages", "memory", "toolsets"):
            response = await server.client.get(f"/agentik/conversations/nope/{path}")
            assert response.status_code == 404
            assert response.json()["error"]["message"] == "conversation 'nope' not found"

    async def test_reflections(self, server: Running) -> None:
        response = await server.client.get("/agentik/reflections")
        assert response.json() == {"reflections": [], "total": 0}


class TestSkills:
    async def test_put_get_delete(self, server: Running) -> None:
        skill = {"description": "how to greet", "body": "Say hello."}
        put = await server.client.put("/agentik/skills/greet", json=skill)
        assert put.status_code == 200
        got = (await server.client.get("/agentik/skills/greet")).json()
        assert (got["name"], got["description"], got["body"]) == (
            "greet",
            "how to greet",
            "Say hello.",
        )
        assert got["updated_at"]
        catalog = (await server.client.get("/agentik/skills")).json()
        assert catalog == {"skills": [{"name": "greet", "description": "how to greet"}]}
        assert (await server.client.delete("/agentik/skills/greet")).status_code == 204
        assert (await server.client.get("/agentik/skills/greet")).status_code == 404
        assert (await server.client.delete("/agentik/skills/greet")).status_code == 404

    async def test_put_missing_field(self, server: Running) -> None:
        response = await server.client.put("/agentik/skills/x", content=json.dumps({"body": "b"}))
        assert response.status_code == 422
        assert response.json()["error"]["message"] == "field 'description' is required"

"""Bad input of every kind gets a clear 4xx (or a JSON-RPC error), never a 500,
and changes nothing: issue 14, item 4, one test per defect.

Each request here was answered 500 (or worse) before the fix; the comment on
each case says how. ``test_fuzz_http`` generalises these to every route.
"""

from __future__ import annotations

import json

import pytest
import trio

from tests.server.conftest import Running

TURN = "/agentik/conversations/c/turns"
A2A = {"A2A-Version": "1.0"}
DEEP = b"[" * 5000 + b"]" * 5000


def samples(text: str) -> dict[str, str]:
    return dict(
        line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")
    )


async def nothing_happened(server: Running) -> None:
    """No conversation was created, no turn ran or failed, no 5xx was counted."""
    listed = (await server.client.get("/agentik/conversations")).json()
    assert listed["conversations"] == []
    counted = samples((await server.client.get("/metrics")).text)
    assert counted['agentik_turns_total{outcome="started"}'] == "0"
    assert counted['agentik_errors_total{kind="turn"}'] == "0"
    assert counted['agentik_errors_total{kind="http_5xx"}'] == "0"


def a2a_send(text: str = "hi", **envelope: object) -> dict[str, object]:
    message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": text}], "contextId": "x"}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}} | (
        envelope
    )


class TestQueryNumbers:
    @pytest.mark.parametrize(
        ("path", "query", "message"),
        [
            # "²".isdigit() is true and int("²") raises: 500 before.
            ("/agentik/conversations", "limit=²", "query parameter 'limit' must be"),
            ("/agentik/conversations/c/messages", "after_seq=¹", "query parameter 'after_seq'"),
            ("/agentik/reflections", "limit=²", "query parameter 'limit' must be"),
            # 5,000 ASCII digits pass isdigit() but int() refuses them: 500 before.
            ("/agentik/conversations", "limit=" + "9" * 5000, "query parameter 'limit'"),
            # Arabic-Indic three: int() took it as 3 (200 before); only ASCII digits count.
            ("/agentik/conversations", "limit=\u0663", "query parameter 'limit' must be"),
        ],
    )
    async def test_refused_with_422(
        self, server: Running, path: str, query: str, message: str
    ) -> None:
        response = await server.client.get(f"{path}?{query}")
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == "invalid_field"
        assert response.json()["error"]["message"].startswith(message)


class TestA2APageToken:
    @pytest.mark.parametrize("token", ["²", "9" * 5000, "-1", "not a token", "0"])
    async def test_bad_token_is_invalid_params(self, server: Running, token: str) -> None:
        """'²' and 5,000 digits were a bare HTTP 500 before."""
        body = {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "ListTasks",
            "params": {"contextId": "c", "pageToken": token},
        }
        response = await server.client.post("/a2a", json=body, headers=A2A)
        assert response.status_code == 200
        reply = response.json()
        assert reply["id"] == 4
        assert reply["error"]["code"] == -32602
        assert "pageToken" in reply["error"]["message"]


class TestJsonBodies:
    @pytest.mark.parametrize(
        ("method", "path"),
        [("POST", TURN), ("PUT", "/agentik/skills/s"), ("POST", "/agui")],
    )
    async def test_deep_nesting_is_400(self, server: Running, method: str, path: str) -> None:
        """5,000 nested arrays raised RecursionError in the decoder: 500 before."""
        response = await server.client.request(method, path, content=DEEP)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_json"
        assert "nested deeper than 100" in error["message"]
        await nothing_happened(server)

    async def test_deep_nesting_in_a2a_is_a_parse_error(self, server: Running) -> None:
        response = await server.client.post("/a2a", content=DEEP, headers=A2A)
        assert response.status_code == 200
        assert response.json()["error"]["code"] == -32700
        assert response.json()["id"] is None

    @pytest.mark.parametrize(
        "body",
        [
            # Stored, then the store refused the text: 500 store_error, a turn failure.
            b'{"text": "hi \\ud800"}',
            b'{"text": "lone low \\udc00 surrogate"}',
            # The refusal named the field, and encoding that message failed: 500.
            b'{"text": "hi", "\\ud800": 1}',
            b'{"text": "hi", "idempotency_key": "k\\udfff"}',
        ],
    )
    async def test_lone_surrogates_in_a_turn(self, server: Running, body: bytes) -> None:
        response = await server.client.post(TURN, content=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_json"
        assert "lone surrogate" in error["message"]
        await nothing_happened(server)

    async def test_a_surrogate_pair_is_one_character(self, server: Running) -> None:
        """An escaped pair is a valid character (U+1F99C), not a lone surrogate."""
        response = await server.client.post(TURN, content=b'{"text": "parrot \\ud83e\\udd9c"}')
        assert response.status_code == 200, response.text
        stored = (await server.client.get("/agentik/conversations/c/messages")).json()
        assert stored["messages"][0]["content"] == "parrot \U0001f99c"

    async def test_lone_surrogate_in_a_skill(self, server: Running) -> None:
        """The skill store refused the description: 500 before."""
        body = b'{"description": "d \\ud800", "body": "b"}'
        response = await server.client.put("/agentik/skills/s", content=body)
        assert response.status_code == 400, response.text
        assert (await server.client.get("/agentik/skills")).json()["skills"] == []

    async def test_lone_surrogate_run_id_in_agui(self, server: Running) -> None:
        """The turn was stored, then encoding RUN_STARTED failed mid-stream."""
        body = {
            "threadId": "t",
            "runId": "r\ud800",
            "messages": [{"id": "u1", "role": "user", "content": "hi"}],
        }
        raw = json.dumps(body).encode()  # ensure_ascii: the surrogate travels as \\ud800
        response = await server.client.post("/agui", content=raw)
        assert response.status_code == 400, response.text
        await nothing_happened(server)

    @pytest.mark.parametrize(
        "body",
        [
            a2a_send("hi \ud800"),
            a2a_send(id="\udc00"),  # the reply echoed the id, and encoding it failed
        ],
    )
    async def test_lone_surrogates_in_a2a(self, server: Running, body: dict[str, object]) -> None:
        response = await server.client.post("/a2a", content=json.dumps(body).encode(), headers=A2A)
        assert response.status_code == 200, response.text
        assert response.json() == {"jsonrpc": "2.0", "id": None, "error": response.json()["error"]}
        assert response.json()["error"]["code"] == -32700
        await nothing_happened(server)

    @pytest.mark.parametrize(
        ("number", "named"),
        [(b"1e400", "out of range"), (b"-1e400", "out of range"), (b"9" * 5000, "5000 digits")],
    )
    async def test_odd_numbers(self, server: Running, number: bytes, named: str) -> None:
        """1e400 became inf; 5,000 digits got the decoder's advice to call
        sys.set_int_max_str_digits. Both are refused with a plain reason."""
        response = await server.client.post(TURN, content=b'{"text": "hi", "n": ' + number + b"}")
        assert response.status_code == 400, response.text
        assert named in response.json()["error"]["message"]
        assert "set_int_max_str_digits" not in response.json()["error"]["message"]


class TestPathIds:
    @pytest.mark.parametrize("raw", ["%FF", "%C3", "%ED%A0%80", "a%80b"])
    async def test_invalid_utf8_in_a_path_id_is_400(self, server: Running, raw: str) -> None:
        """Each was silently decoded to U+FFFD, so '%FF' and '%FE' named one conversation."""
        response = await server.client.post(
            f"/agentik/conversations/{raw}/turns", json={"text": "hi"}
        )
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_path"
        assert "UTF-8" in error["message"]
        await nothing_happened(server)

    async def test_a_real_replacement_character_is_an_id(self, server: Running) -> None:
        """U+FFFD sent as its UTF-8 bytes is a valid id like any other."""
        response = await server.client.post(
            "/agentik/conversations/%EF%BF%BD/turns", json={"text": "hi"}
        )
        assert response.status_code == 200
        listed = (await server.client.get("/agentik/conversations")).json()
        assert listed["conversations"] == ["\ufffd"]


class TestJsonRpcNotification:
    async def test_no_turn_and_no_reply(self, server: Running) -> None:
        """A request without ``id`` ran a turn and got a response before."""
        body = a2a_send()
        del body["id"]
        response = await server.client.post("/a2a", json=body, headers=A2A)
        assert response.status_code == 204
        assert response.content == b""
        await nothing_happened(server)

    async def test_a_null_id_is_a_request(self, server: Running) -> None:
        """``"id": null`` is a request (JSON-RPC 2.0 discourages, but allows it)."""
        response = await server.client.post("/a2a", json=a2a_send(id=None), headers=A2A)
        assert response.status_code == 200
        assert response.json()["id"] is None
        assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

    async def test_a_broken_envelope_without_id_is_still_answered(self, server: Running) -> None:
        """Not a valid request, so not a notification: -32600 with id null."""
        response = await server.client.post("/a2a", json={"jsonrpc": "2.0"}, headers=A2A)
        assert response.status_code == 200
        assert response.json()["error"]["code"] == -32600


class TestRefusedBeforeTheBody:
    @pytest.mark.parametrize(
        ("head", "status"),
        [
            (b"PUT /agentik/skills/%FF HTTP/1.1\r\nContent-Length: 10\r\n", b"400"),
            (b"POST /agentik/conversations/%20/turns HTTP/1.1\r\nContent-Length: 10\r\n", b"422"),
            (b"POST /a2a HTTP/1.1\r\nContent-Length: 99999999\r\n", b"413"),
            (b"POST /agui HTTP/1.1\r\nTransfer-Encoding: chunked\r\n", b"400"),
        ],
    )
    async def test_the_refusal_says_connection_close(
        self, server: Running, head: bytes, status: bytes
    ) -> None:
        """A refusal sent before the request body arrived ended the connection
        without saying so, and a client reusing it (the fuzz's httpx2) got
        'Server disconnected'. Now it says ``Connection: close``."""
        if b"chunked" in head:
            head = head.replace(b"/agui", b"/agui%FF")
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(head + b"Host: x\r\n\r\n")
            received = b""
            with trio.fail_after(10):
                while b"\r\n\r\n" not in received:
                    received += await stream.receive_some()
        assert received.startswith(b"HTTP/1.1 " + status), received
        assert b"\r\nconnection: close\r\n" in received.lower(), received

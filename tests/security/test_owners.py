"""Owner scoping: with tokens mapped to owners, no owner can read, list, write to
or learn of another owner's conversation through any endpoint; another owner's
conversation answers exactly as a missing one.

Owners here: ``alice`` and ``bob`` (``[[server.clients]]``) and the default
owner (the legacy ``auth_token``, ids stored as sent). Everything goes over
real HTTP to a server on 127.0.0.1 with a real SQLite file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from a2a.client import ClientConfig, create_client
from a2a.types import GetTaskRequest, ListTasksRequest
from a2a.utils.errors import TaskNotFoundError
from hypothesis import given
from hypothesis import strategies as st

from agentik import Role, in_memory_storage
from agentik._errors import OverloadedError
from agentik._messages import Message
from agentik.server import Client, ServerConfig
from agentik.server._owners import SEPARATOR, Authenticator, Caller, owned_conversations
from agentik.server._turns import to_http_error
from agentik.server.a2a._rpc import make_task_id
from tests.security.conftest import LEGACY, OWNER_CLIENTS, TOKENS, Server, start

ALICE, BOB = TOKENS["alice"], TOKENS["bob"]


async def turn(client: httpx2.AsyncClient, conversation: str, text: str, **extra: Any) -> Any:
    response = await client.post(
        f"/agentik/conversations/{conversation}/turns", json={"text": text, **extra}
    )
    assert response.status_code == 200, response.text
    return response.json()


def swapped(response: httpx2.Response, old: str, new: str) -> tuple[int, str]:
    """Status and body with one id replaced by another, to compare two refusals."""
    return response.status_code, response.text.replace(old, new)


class TestNative:
    async def test_listing_shows_only_the_callers_conversations(self, owners: Server) -> None:
        """Each owner lists its own ids, as it sent them; the default owner's are separate."""
        async with owners.client(ALICE) as alice, owners.client(BOB) as bob:
            async with owners.client(LEGACY) as legacy:
                await turn(alice, "shared", "from alice")
                await turn(alice, "alice-only", "from alice")
                await turn(bob, "shared", "from bob")
                await turn(legacy, "legacy-only", "from the default owner")
                listed = {
                    name: (await c.get("/agentik/conversations")).json()["conversations"]
                    for name, c in [("alice", alice), ("bob", bob), ("legacy", legacy)]
                }
        assert listed == {
            "alice": ["alice-only", "shared"],
            "bob": ["shared"],
            "legacy": ["legacy-only"],
        }
        stored = await owners.storage.message_store.list_conversations()
        assert stored == sorted(
            ["alice\x1falice-only", "alice\x1fshared", "bob\x1fshared", "legacy-only"]
        ), "named owners are namespaced; the default owner's ids are stored as sent"

    async def test_another_owners_conversation_answers_as_missing(self, owners: Server) -> None:
        """messages, memory and toolsets: bob asking for alice's id gets exactly what
        he gets for an id nobody ever used."""
        async with owners.client(ALICE) as alice, owners.client(BOB) as bob:
            await turn(alice, "private", "alice's secret plan")
            for endpoint in ("messages", "memory", "toolsets"):
                theirs = await bob.get(f"/agentik/conversations/private/{endpoint}")
                nobodys = await bob.get(f"/agentik/conversations/never-used/{endpoint}")
                assert theirs.status_code == 404
                assert swapped(theirs, "private", "never-used") == swapped(nobodys, "", "")
                assert (await alice.get(f"/agentik/conversations/private/{endpoint}")).is_success
            assert "private" not in (await bob.get("/agentik/conversations")).text

    async def test_same_id_is_two_conversations(self, owners: Server) -> None:
        """Both owners use "shared": each history starts at seq 1 and holds only its own
        messages, and the model never sees the other owner's text."""
        async with owners.client(ALICE) as alice, owners.client(BOB) as bob:
            await turn(alice, "shared", "alice's secret plan")
            owners.model.requests.clear()
            bob_turn = await turn(bob, "shared", "hello from bob")
            bob_history = (await bob.get("/agentik/conversations/shared/messages")).json()
            alice_history = (await alice.get("/agentik/conversations/shared/messages")).json()
        assert [m["seq"] for m in bob_turn["messages"]] == [1, 2]
        assert [m["content"] for m in bob_history["messages"]] == [
            "hello from bob",
            "You said: hello from bob",
        ]
        assert alice_history["messages"][0]["content"] == "alice's secret plan"
        assert len(alice_history["messages"]) == 2
        assert not any("alice" in content for _, content in owners.model.seen())

    async def test_idempotency_keys_are_per_owner(self, owners: Server) -> None:
        """Bob reusing alice's key in the same conversation id runs his own turn; he
        cannot replay (and so read) hers."""
        async with owners.client(ALICE) as alice, owners.client(BOB) as bob:
            first = await turn(alice, "shared", "alice's secret plan", idempotency_key="k1")
            bobs = await turn(bob, "shared", "bob's question", idempotency_key="k1")
            again = await turn(alice, "shared", "anything", idempotency_key="k1")
        assert bobs["text"] == "You said: bob's question"
        assert again == first

    async def test_memory_and_toolsets_are_per_owner(self, owners: Server) -> None:
        """Alice's notes and active toolsets are hers; responses name her id, not the
        stored one."""
        async with owners.client(ALICE) as alice, owners.client(BOB) as bob:
            await turn(alice, "shared", 'call memory_add {"text": "alice note"}')
            await turn(alice, "shared", 'call enable_toolset {"name": "clock"}')
            await turn(bob, "shared", "hello from bob")
            alice_memory = (await alice.get("/agentik/conversations/shared/memory")).json()
            bob_memory = (await bob.get("/agentik/conversations/shared/memory")).json()
            alice_sets = (await alice.get("/agentik/conversations/shared/toolsets")).json()
            bob_sets = (await bob.get("/agentik/conversations/shared/toolsets")).json()
        assert [(e["conversation_id"], e["text"]) for e in alice_memory["entries"]] == [
            ("shared", "alice note")
        ]
        assert bob_memory["entries"] == []
        assert [t["active"] for t in alice_sets["toolsets"]] == [True]
        assert [t["active"] for t in bob_sets["toolsets"]] == [False]
        assert SEPARATOR not in json.dumps([alice_memory, alice_sets])

    async def test_ids_with_the_separator_are_refused_alike(self, owners: Server) -> None:
        """The default owner cannot name a scoped id (U+001F): such ids are invalid,
        whether or not a conversation is stored under them."""
        async with owners.client(ALICE) as alice, owners.client(LEGACY) as legacy:
            await turn(alice, "shared", "alice's secret plan")
            existing = await legacy.get("/agentik/conversations/alice%1Fshared/messages")
            absent = await legacy.get("/agentik/conversations/carol%1Fshared/messages")
            posted = await legacy.post(
                "/agentik/conversations/alice%1Fshared/turns", json={"text": "hi"}
            )
        assert existing.status_code == absent.status_code == posted.status_code == 422
        assert swapped(existing, "alice", "carol") == swapped(absent, "", "")
        assert "secret plan" not in existing.text

    async def test_reflections_show_only_the_callers(self, owners: Server) -> None:
        """Reflections name a conversation: each owner sees only those of its own
        conversations, under the id it knows them by."""
        store = owners.storage.reflection_store
        await store.insert("alice\x1fshared", "alice lesson")
        await store.insert("bob\x1fshared", "bob lesson")
        await store.insert("shared", "default lesson")
        seen = {}
        for name, token in [("alice", ALICE), ("bob", BOB), ("legacy", LEGACY)]:
            async with owners.client(token) as client:
                body = (await client.get("/agentik/reflections")).json()
            seen[name] = ([(r["conversation_id"], r["text"]) for r in body["reflections"]], body)
        assert seen["alice"][0] == [("shared", "alice lesson")]
        assert seen["bob"][0] == [("shared", "bob lesson")]
        assert seen["legacy"][0] == [("shared", "default lesson")]
        assert [body["total"] for _, body in seen.values()] == [1, 1, 1]

    async def test_skills_are_per_owner(self, owners: Server) -> None:
        """Each owner's skills are its own: written over HTTP or by the model in
        one of its conversations, they are listed, loaded and shown in the
        prompt only for that owner; another owner's answers as missing."""
        async with owners.client(ALICE) as alice, owners.client(BOB) as bob:
            async with owners.client(LEGACY) as legacy:
                put = await alice.put(
                    "/agentik/skills/greet",
                    json={"description": "alice's greeting", "body": "Say hi, Alice."},
                )
                assert put.status_code == 200, put.text
                assert put.json()["name"] == "greet"
                missing = await bob.get("/agentik/skills/greet")
                nobody = await bob.get("/agentik/skills/never-saved")
                assert swapped(missing, "greet", "never-saved") == swapped(
                    nobody, "never-saved", "never-saved"
                )
                assert (await bob.delete("/agentik/skills/greet")).status_code == 404
                assert (await legacy.get("/agentik/skills")).json() == {"skills": []}
                await bob.put(
                    "/agentik/skills/greet", json={"description": "bob's", "body": "Say yo."}
                )
                # The model saves one in a conversation of alice's.
                await turn(
                    alice,
                    "c",
                    'call skill_save {"name": "plan", "description": "alice\'s plan",'
                    ' "body": "The secret plan."}',
                )
                lists = {
                    who: [s["name"] for s in (await c.get("/agentik/skills")).json()["skills"]]
                    for who, c in [("alice", alice), ("bob", bob), ("legacy", legacy)]
                }
                assert lists == {"alice": ["greet", "plan"], "bob": ["greet"], "legacy": []}
                assert (await bob.get("/agentik/skills/greet")).json()["body"] == "Say yo."
                owners.model.requests.clear()
                loaded = await turn(bob, "c", 'call skill_load {"name": "plan"}')
                assert "The secret plan." not in json.dumps(loaded)
                await turn(legacy, "c", "hello")
                prompts = [r.messages[0].content for r in owners.model.requests]
                assert prompts and all("alice's" not in p for p in prompts), prompts
                owners.model.requests.clear()
                await turn(alice, "c", "hello")
                assert "plan — alice's plan" in owners.model.requests[0].messages[0].content
        stored = [s.name for s in await owners.storage.skill_store.catalog()]
        assert stored == ["alice\x1fgreet", "alice\x1fplan", "bob\x1fgreet"]


class TestTokens:
    async def test_only_configured_tokens_get_in(self, owners: Server) -> None:
        """No token, a wrong one, or a near miss is 401 everywhere but /health."""
        near_misses = [
            {},
            {"Authorization": "Bearer nope"},
            {"Authorization": f"Bearer {ALICE}x"},
            {"Authorization": f"Bearer {ALICE[:-1]}"},
            {"Authorization": f"Bearer {ALICE.upper()}"},
            {"Authorization": f"Bearer\t{ALICE}"},
            {"Authorization": f"Bearer{ALICE}"},
            {"Authorization": f"Bearer {ALICE} x"},
            {"Authorization": f"Bearers {ALICE}"},
            {"Authorization": f"Basic {ALICE}"},
            {"Authorization": ALICE},
        ]
        for headers in near_misses:
            async with httpx2.AsyncClient(base_url=owners.url, headers=headers) as client:
                for path in ("/agentik/conversations", "/metrics"):
                    response = await client.get(path)
                    assert response.status_code == 401, (headers, path)
                    assert response.headers["www-authenticate"] == "Bearer"
                assert (await client.post("/agui", json={})).status_code == 401
                assert (await client.post("/a2a", json={})).status_code == 401
                assert (await client.get("/health")).status_code == 200
        for token in (ALICE, BOB, LEGACY):
            async with owners.client(token) as client:
                assert (await client.get("/agentik/conversations")).status_code == 200
        # RFC 9110 §11.1: the scheme is case-insensitive; 1*SP before the token.
        for value in (f"bearer {ALICE}", f"BEARER {ALICE}", f"bEaReR   {ALICE}"):
            headers = {"Authorization": value}
            async with httpx2.AsyncClient(base_url=owners.url, headers=headers) as client:
                assert (await client.get("/agentik/conversations")).status_code == 200, value

    def test_authenticator_maps_each_token_to_its_owner(self) -> None:
        """The header's token picks the owner; one owner may hold several tokens."""
        clients = (*OWNER_CLIENTS, Client(owner="alice", token="alice-second-token-xyz"))
        auth = Authenticator.from_config(ServerConfig(clients=clients, auth_token=LEGACY))
        assert auth.caller(f"Bearer {ALICE}".encode()) == Caller("alice")
        assert auth.caller(b"Bearer alice-second-token-xyz") == Caller("alice")
        assert auth.caller(f"Bearer {BOB}".encode()) == Caller("bob")
        assert auth.caller(f"Bearer {LEGACY}".encode()) == Caller(None)
        assert auth.caller(ALICE.encode()) is None
        assert auth.caller(None) is None
        assert ALICE not in repr(auth)
        open_auth = Authenticator.from_config(ServerConfig())
        assert open_auth.caller(None) == Caller(None)

    @given(
        scheme=st.tuples(*(st.sampled_from([c, c.upper()]) for c in "bearer")).map("".join),
        spaces=st.integers(1, 8),
        who=st.sampled_from([("alice", ALICE), ("bob", BOB), (None, LEGACY)]),
    )
    def test_the_scheme_is_read_in_any_case(
        self, scheme: str, spaces: int, who: tuple[str | None, str]
    ) -> None:
        """RFC 9110 §11.1: ``Bearer``, ``bearer``, ``BEARER``...; RFC 9110 §11.4:
        one or more spaces before the token (``1*SP``)."""
        owner, token = who
        auth = Authenticator.from_config(ServerConfig(clients=OWNER_CLIENTS, auth_token=LEGACY))
        assert auth.caller(f"{scheme}{' ' * spaces}{token}".encode()) == Caller(owner)

    @given(
        scheme=st.sampled_from(["Bearer", "bearer", "BEARER"]),
        token=st.sampled_from([ALICE, BOB, LEGACY]),
        change=st.sampled_from(["tab", "none", "trailing", "scheme", "case", "cut", "more"]),
    )
    def test_near_misses_are_refused(self, scheme: str, token: str, change: str) -> None:
        """Whatever the scheme's case, the token is compared exactly, and only
        spaces separate it from the scheme."""
        value = {
            "tab": f"{scheme}\t{token}",
            "none": f"{scheme}{token}",
            "trailing": f"{scheme} {token} extra",
            "scheme": f"{scheme}x {token}",
            "case": f"{scheme} {token.upper()}",
            "cut": f"{scheme} {token[:-1]}",
            "more": f"{scheme} {token}=",
        }[change]
        auth = Authenticator.from_config(ServerConfig(clients=OWNER_CLIENTS, auth_token=LEGACY))
        assert auth.caller(value.encode()) is None


class TestAgui:
    async def test_thread_ids_are_per_owner(self, owners: Server) -> None:
        """Bob running alice's threadId runs his own conversation; the model sees none
        of alice's messages, and her history is untouched."""
        async with owners.client(ALICE) as alice, owners.client(BOB) as bob:
            for client, text in [(alice, "alice's secret plan"), (bob, "hello from bob")]:
                owners.model.requests.clear()
                response = await client.post(
                    "/agui",
                    json={
                        "threadId": "thread-1",
                        "runId": "r1",
                        "messages": [{"id": "u1", "role": "user", "content": text}],
                    },
                )
                assert response.status_code == 200
                assert "RUN_FINISHED" in response.text
            bob_seen = owners.model.seen()
            alice_history = (await alice.get("/agentik/conversations/thread-1/messages")).json()
        assert not any("alice" in content for _, content in bob_seen)
        assert [m["content"] for m in alice_history["messages"]] == [
            "alice's secret plan",
            "You said: alice's secret plan",
        ]


def rpc(method: str, params: dict[str, Any], request_id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


async def call(client: httpx2.AsyncClient, method: str, params: dict[str, Any]) -> Any:
    response = await client.post("/a2a", json=rpc(method, params), headers={"A2A-Version": "1.0"})
    assert response.status_code == 200, response.text
    return response.json()


def send(text: str, message_id: str, context_id: str) -> dict[str, Any]:
    return {
        "message": {
            "messageId": message_id,
            "role": "ROLE_USER",
            "parts": [{"text": text}],
            "contextId": context_id,
        }
    }


class TestA2a:
    async def test_tasks_of_another_owner_are_not_found(self, owners: Server) -> None:
        """GetTask, CancelTask and ListTasks answer bob as if alice's task never existed."""
        async with owners.client(ALICE) as alice, owners.client(BOB) as bob:
            sent = await call(alice, "SendMessage", send("alice's secret plan", "m1", "ctx"))
            task_id = sent["result"]["task"]["id"]
            made_up = make_task_id("ctx", "never-sent")
            for method in ("GetTask", "CancelTask"):
                theirs = await call(bob, method, {"id": task_id})
                nobodys = await call(bob, method, {"id": made_up})
                assert theirs["error"]["code"] == -32001
                assert json.dumps(theirs).replace(task_id, made_up) == json.dumps(nobodys)
            for params in ({}, {"contextId": "ctx"}):
                listed = await call(bob, "ListTasks", params)
                assert listed["result"]["tasks"] == []
                assert listed["result"]["totalSize"] == 0
            mine = await call(alice, "ListTasks", {})
            assert [t["id"] for t in mine["result"]["tasks"]] == [task_id]

    async def test_same_context_and_message_ids_are_two_tasks(self, owners: Server) -> None:
        """Bob sending alice's contextId and messageId gets his own task; alice's keeps
        her answer."""
        async with owners.client(ALICE) as alice, owners.client(BOB) as bob:
            hers = await call(alice, "SendMessage", send("alice's secret plan", "m1", "ctx"))
            his = await call(bob, "SendMessage", send("bob's question", "m1", "ctx"))
            task_id = hers["result"]["task"]["id"]
            assert his["result"]["task"]["id"] == task_id  # ids are per owner
            answer = his["result"]["task"]["artifacts"][0]["parts"][0]["text"]
            assert answer == "You said: bob's question"
            again = await call(alice, "GetTask", {"id": task_id, "historyLength": 10})
        assert again["result"]["artifacts"][0]["parts"][0]["text"] == (
            "You said: alice's secret plan"
        )
        assert "bob" not in json.dumps(again)

    async def test_a_running_task_is_invisible_to_another_owner(self, owners: Server) -> None:
        """While alice's task runs, bob cannot see or cancel it; alice can."""
        async with owners.client(ALICE) as alice, owners.client(BOB) as bob:
            enable = send('call enable_toolset {"name": "clock"}', "m0", "c")
            await call(alice, "SendMessage", enable)
            task_id = make_task_id("c", "m1")
            wait = send("call clock_wait {}", "m1", "c")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, alice, "SendMessage", wait)
                with trio.fail_after(10):
                    while True:
                        seen = await call(alice, "GetTask", {"id": task_id})
                        if seen.get("result", {}).get("status", {}).get("state") == (
                            "TASK_STATE_WORKING"
                        ):
                            break
                        await trio.sleep(0.01)
                for method in ("GetTask", "CancelTask"):
                    assert (await call(bob, method, {"id": task_id}))["error"]["code"] == -32001
                listed = await call(bob, "ListTasks", {})
                assert listed["result"]["tasks"] == []
                cancelled = await call(alice, "CancelTask", {"id": task_id})
                assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED"

    async def test_default_owner_cannot_name_a_scoped_context(self, owners: Server) -> None:
        """A task id whose context part is alice's stored id is not found."""
        async with owners.client(ALICE) as alice, owners.client(LEGACY) as legacy:
            sent = await call(alice, "SendMessage", send("alice's secret plan", "m1", "ctx"))
            task_id = sent["result"]["task"]["id"]
            forged = task_id.replace(".ctx", ".alice\x1fctx")
            answer = await call(legacy, "GetTask", {"id": forged})
            sent_forged = await call(legacy, "SendMessage", send("hi", "m2", "alice\x1fctx"))
        assert answer["error"]["code"] == -32001
        assert sent_forged["error"]["code"] == -32602
        assert "secret plan" not in json.dumps([answer, sent_forged])

    async def test_with_the_sdk_client(self, owners: Server) -> None:
        """The official client, with bob's token, gets TaskNotFoundError for alice's task."""
        async with owners.client(ALICE) as alice:
            sent = await call(alice, "SendMessage", send("alice's secret plan", "m1", "ctx"))
        task_id = sent["result"]["task"]["id"]
        async with owners.client(BOB) as bob_http:
            client = await create_client(
                owners.url, client_config=ClientConfig(streaming=False, httpx_client=bob_http)
            )
            try:
                with pytest.raises(TaskNotFoundError):
                    await client.get_task(GetTaskRequest(id=task_id))
                listed = await client.list_tasks(ListTasksRequest())
                assert list(listed.tasks) == []
            finally:
                await client.close()


async def test_databases_from_before_owners_stay_the_default_owners(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """A database written without owners keeps working: after owners are configured,
    its conversations belong to the auth_token's (default) owner, and to no one else."""
    database = tmp_path / "old.db"
    async with start(nursery, database) as before, before.client(None) as anyone:
        await turn(anyone, "old-conversation", "written before owners")
    async with start(nursery, database, clients=OWNER_CLIENTS, auth_token=LEGACY) as after:
        async with after.client(LEGACY) as legacy, after.client(ALICE) as alice:
            listed = (await legacy.get("/agentik/conversations")).json()["conversations"]
            history = await legacy.get("/agentik/conversations/old-conversation/messages")
            hidden = await alice.get("/agentik/conversations/old-conversation/messages")
            assert listed == ["old-conversation"]
            assert history.json()["messages"][0]["content"] == "written before owners"
            assert hidden.status_code == 404
            assert (await alice.get("/agentik/conversations")).json()["conversations"] == []


STORED_IDS = [
    "a",
    "alice",
    "alice\x1fa",
    "alice\x1fz",
    "alice-2",
    "alice-2\x1fx",
    "b",
    "bob\x1fm",
    "bobby",
    "zed",
]


@pytest.mark.parametrize("limit", [1, 2, 3, 100])
@pytest.mark.parametrize(
    ("owner", "expected"),
    [
        (None, ["a", "alice", "alice-2", "b", "bobby", "zed"]),
        ("alice", ["a", "z"]),
        ("alice-2", ["x"]),
        ("bob", ["m"]),
        ("carol", []),
    ],
)
async def test_paging_through_an_owners_conversations(
    owner: str | None, expected: list[str], limit: int
) -> None:
    """Pages of any size, following ``after``, list exactly the owner's ids in order,
    however the owners' stored ids interleave."""
    storage = in_memory_storage()
    for stored in STORED_IDS:
        await storage.message_store.append(stored, Message(role=Role.USER, content="x"))
    caller, seen, after = Caller(owner), [], None
    while True:
        page = await owned_conversations(storage.message_store, caller, after, limit)
        seen += page
        if len(page) < limit:
            break
        after = page[-1]
    assert seen == expected


owner_names = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,47}\Z")
external_ids = st.text(st.characters(codec="utf-8"), min_size=1, max_size=30).filter(
    str.isprintable
)


@given(owner_names | st.none(), owner_names | st.none(), external_ids, external_ids)
def test_stored_ids_never_collide_across_owners(
    first: str | None, second: str | None, one: str, other: str
) -> None:
    """Two owners never share a stored id, each owner gets its ids back, and no
    owner recognises another's stored id as its own."""
    a, b = Caller(first), Caller(second)
    assert a.external(a.internal(one)) == one
    if first != second:
        assert a.internal(one) != b.internal(other)
        assert b.external(a.internal(one)) is None


def test_refusals_name_the_id_the_client_sent() -> None:
    """An agent error quoting the stored id is rewritten to the client's id, so a 429
    or 422 shows neither the separator nor the owner prefix."""
    caller = Caller("alice")
    stored = caller.internal("demo")
    for shown, expected in [(repr(stored), "'demo'"), (stored, "demo")]:
        exc = OverloadedError(f"conversation {shown} has 8 turns queued", retry_after=1.0)
        refusal = to_http_error(exc, caller, "demo")
        assert (refusal.status, refusal.message) == (
            429,
            f"conversation {expected} has 8 turns queued",
        )

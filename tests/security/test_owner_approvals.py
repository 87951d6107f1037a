"""Owner scoping of approvals on the native API: a call waiting in one owner's
conversation is invisible to every other owner, who cannot list it, decide it
or learn that it exists; responses name only the id the caller sent.

Owners as in ``test_owners``: ``alice`` and ``bob`` (``[[server.clients]]``)
and the default owner (the legacy ``auth_token``); a real server on
127.0.0.1, a real SQLite file, the ``bank`` toolset of
``tests.server.approval_tools``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import ToolCall
from agentik.agent import ApprovalRequest, TurnFinished, TurnResult
from agentik.server._owners import SEPARATOR, Caller
from agentik.server.native._wire import native_event, turn_result_json
from tests.reliability.helpers import Backend
from tests.security.conftest import LEGACY, OWNER_CLIENTS, TOKENS
from tests.server.approval_tools import RUNS, serve_bank

ALICE, BOB = TOKENS["alice"], TOKENS["bob"]
W1 = {"call_id": "w1", "name": "bank_wire", "arguments": '{"amount": 5}'}
Clients = Callable[[str], AbstractAsyncContextManager[httpx2.AsyncClient]]


@pytest.fixture(autouse=True)
def _clear_runs() -> None:
    RUNS.clear()


@pytest.fixture
async def clients(tmp_path: Path) -> AsyncIterator[Clients]:
    """A server with three owners; ``clients(token)`` opens a client sending it."""
    backend = Backend("sqlite", tmp_path / "owners.db")
    async with serve_bank(backend, clients=OWNER_CLIENTS, auth_token=LEGACY) as url:

        def client(token: str) -> AbstractAsyncContextManager[httpx2.AsyncClient]:
            headers = {"Authorization": f"Bearer {token}"}
            return httpx2.AsyncClient(base_url=url, headers=headers, timeout=30)

        yield client


async def pay(client: httpx2.AsyncClient, conversation: str) -> Any:
    response = await client.post(
        f"/agentik/conversations/{conversation}/turns", json={"text": "pay"}
    )
    assert response.status_code == 200, response.text
    return response.json()


def swapped(response: httpx2.Response, old: str, new: str) -> tuple[int, str]:
    return response.status_code, response.text.replace(old, new)


async def test_the_waiting_calls_name_the_callers_id(clients: Clients) -> None:
    """The turn's JSON, streamed or not, and the listing carry the call, never the
    stored (owner-prefixed) conversation id; decision errors name the caller's id."""
    async with clients(ALICE) as alice:
        paused = await pay(alice, "shared")
        streamed = await alice.post(
            "/agentik/conversations/streamed/turns",
            json={"text": "pay"},
            headers={"Accept": "text/event-stream"},
        )
        listed = await alice.get("/agentik/conversations/shared/approvals")
        missing = await alice.post(
            "/agentik/conversations/shared/approvals/nope", json={"approve": True}
        )
    assert paused["approvals"] == [W1]
    assert listed.json() == {"conversation_id": "shared", "approvals": [W1]}
    assert missing.json()["error"]["message"] == (
        "call 'nope' is not waiting for approval in conversation 'shared'"
    )
    for text in (str(paused), streamed.text, listed.text, missing.text):
        assert SEPARATOR not in text and "\\u001f" not in text and "alice" not in text


async def test_another_owners_approvals_answer_as_missing(clients: Clients) -> None:
    """Bob listing or deciding alice's waiting call gets exactly what he gets for
    a conversation nobody used; alice's call still waits and is hers to decide."""
    async with clients(ALICE) as alice, clients(BOB) as bob, clients(LEGACY) as legacy:
        await pay(alice, "private")
        for other in (bob, legacy):
            theirs = await other.get("/agentik/conversations/private/approvals")
            nobodys = await other.get("/agentik/conversations/never-used/approvals")
            assert theirs.status_code == 404
            assert swapped(theirs, "private", "never-used") == swapped(nobodys, "", "")
            decided = await other.post(
                "/agentik/conversations/private/approvals/w1", json={"approve": True}
            )
            nobody = await other.post(
                "/agentik/conversations/never-used/approvals/w1", json={"approve": True}
            )
            assert decided.status_code == 404
            assert swapped(decided, "private", "never-used") == swapped(nobody, "", "")
        assert RUNS == []
        still = await alice.get("/agentik/conversations/private/approvals")
        assert still.json()["approvals"] == [W1]
        done = await alice.post(
            "/agentik/conversations/private/approvals/w1", json={"approve": True}
        )
        assert done.json()["text"] == "sent 5"
    assert RUNS == ["wire 5"]


async def test_the_same_conversation_id_is_two_owners_calls(clients: Clients) -> None:
    """Both owners have call w1 waiting in "shared": each decides their own."""
    async with clients(ALICE) as alice, clients(BOB) as bob:
        await pay(alice, "shared")
        await pay(bob, "shared")
        denied = await bob.post(
            "/agentik/conversations/shared/approvals/w1", json={"approve": False}
        )
        assert denied.json()["text"] == "denied"
        listed = await alice.get("/agentik/conversations/shared/approvals")
        assert listed.json()["approvals"] == [W1], "bob's decision was about his own call"
        approved = await alice.post(
            "/agentik/conversations/shared/approvals/w1", json={"approve": True}
        )
        assert approved.json()["text"] == "sent 5"
    assert RUNS == ["wire 5"]


ids = st.text(st.characters(exclude_characters="\x1f", exclude_categories=("Cs",)), min_size=1)


@settings(max_examples=100, deadline=None)
@given(
    owner=ids,
    conversation=ids,
    calls=st.lists(st.builds(ToolCall, ids, st.sampled_from(["bank_wire", "x"]), ids), max_size=3),
)
def test_no_turn_json_names_the_stored_id(
    owner: str, conversation: str, calls: list[ToolCall]
) -> None:
    """Whatever the calls, the turn's JSON (plain, and the streamed frame)
    carries each waiting call and nothing of the stored, owner-scoped id."""
    stored = Caller(owner).internal(conversation)
    result = TurnResult(
        "",
        (),
        status="awaiting_approval",
        approvals=tuple(ApprovalRequest(stored, c) for c in calls),
    )
    plain, frame = turn_result_json(result), native_event(TurnFinished(result))[1]
    for text in (json.dumps(plain), json.dumps(frame)):
        assert SEPARATOR not in text and "\\u001f" not in text
    expected = [{"call_id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]
    assert plain["approvals"] == expected
    assert frame["result"] == plain

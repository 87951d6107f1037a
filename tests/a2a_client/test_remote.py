"""agentik calling agentik over A2A: ``remote_send`` against a second agentik
server on 127.0.0.1 (tests/a2a_client/support.py), streaming and not."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest
import trio

from agentik import A2AAgentConfig, in_memory_storage, open_a2a_toolsets, open_chat_agent
from agentik.a2a_client import A2AState
from agentik.a2a_client._calls import CallLedger
from agentik.a2a_client._wire import derived_id
from agentik.agent import ElicitationError
from agentik.server import ServerConfig, serve_agentik
from agentik.storage import open_sqlite_storage
from tests.a2a_client.support import caller_model, free_port, remote_agent
from tests.server.a2a_support import A2A_1, GUARD_SECONDS, PAID


@pytest.mark.parametrize("streaming", [True, False])
async def test_send_returns_the_remote_agents_final_text(tmp_path: Path, streaming: bool) -> None:
    """The tool's result is the remote agent's answer; the card's skills describe it."""
    async with remote_agent(tmp_path) as remote:
        config = A2AAgentConfig(name="remote", url=remote.url, streaming=streaming)
        async with open_a2a_toolsets([config]) as (source,):
            assert source.health.streaming is streaming
            assert source.health.state is A2AState.READY
            assert "vault: Pays money." in source.contribution.description
            async with open_chat_agent(
                model=caller_model(), storage=in_memory_storage(), toolsets=[source]
            ) as agent:
                result = await agent.send("c1", "hello there")
    assert result.text == "remote: You said: hello there"


async def remote_history(remote_url: str, conversation: str) -> list[str]:
    """The user messages the remote agent received in the context of ``conversation``
    (the parent's conversation, as the client derives its contextId)."""
    context = derived_id("agentik", "remote", conversation)
    async with httpx2.AsyncClient(base_url=remote_url, timeout=GUARD_SECONDS) as client:
        reply = await client.get(f"/agentik/conversations/{context}/messages")
    if reply.status_code == 404:
        return []
    return [m["content"] for m in reply.json()["messages"] if m["role"] == "user"]


async def test_an_unreachable_agent_is_an_error_result_and_unhealthy(tmp_path: Path) -> None:
    """No server at the URL: the toolset still opens, says why in its health, and
    a call's result is an error naming the agent."""
    config = A2AAgentConfig(name="remote", url=f"http://127.0.0.1:{free_port()}")
    async with open_a2a_toolsets([config]) as (source,):
        health = source.health
        assert health.state is A2AState.UNREACHABLE
        assert health.last_error is not None and "agent-card.json" in health.last_error
        async with open_chat_agent(
            model=caller_model(), storage=in_memory_storage(), toolsets=[source]
        ) as agent:
            result = await agent.send("c1", "hello")
    assert result.text.startswith("remote: error: a2a agent 'remote' is unreachable")


async def test_a_refused_message_is_an_error_result(tmp_path: Path) -> None:
    """The remote agent refuses a data part on a new message (-32005): the tool's
    result is an error that quotes the agent's reason."""
    async with remote_agent(tmp_path) as remote:
        config = A2AAgentConfig(name="remote", url=remote.url)
        async with (
            open_a2a_toolsets([config]) as toolsets,
            open_chat_agent(
                model=caller_model(), storage=in_memory_storage(), toolsets=toolsets
            ) as agent,
        ):
            result = await agent.send("c1", 'data:{"x": 1}')
    assert result.text.startswith("remote: error: a2a agent 'remote' refused the message:")
    assert "-32005" in result.text


async def test_a_wrong_token_is_an_error_result(tmp_path: Path) -> None:
    """A remote that requires a token: without the right one the call is refused
    (HTTP 401) and the result says so, without the token; with it, it works."""
    token = "remote-token-5e9d2c7a1b3f"
    async with remote_agent(tmp_path, auth_token=token) as remote:
        wrong = A2AAgentConfig(name="remote", url=remote.url, token="wrong-token-000000000000")
        right = A2AAgentConfig(name="remote", url=remote.url, token=token)
        for config, expected in ((wrong, "HTTP 401"), (right, "You said: hi")):
            async with (
                open_a2a_toolsets([config]) as toolsets,
                open_chat_agent(
                    model=caller_model(), storage=in_memory_storage(), toolsets=toolsets
                ) as agent,
            ):
                result = await agent.send("c1", "hi")
            assert expected in result.text
            assert "wrong-token" not in result.text


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_cancelled_remote_task_is_an_error_result(tmp_path: Path, streaming: bool) -> None:
    """The remote task is cancelled while the call waits: the result says so."""
    async with remote_agent(tmp_path) as remote:
        config = A2AAgentConfig(name="remote", url=remote.url, streaming=streaming)
        async with (
            open_a2a_toolsets([config]) as toolsets,
            open_chat_agent(
                model=caller_model(), storage=in_memory_storage(), toolsets=toolsets
            ) as agent,
            trio.open_nursery() as nursery,
        ):
            results: list[str] = []

            async def send() -> None:
                results.append((await agent.send("c1", "slow")).text)

            nursery.start_soon(send)
            with trio.fail_after(GUARD_SECONDS):
                await remote.script.asked.wait()
            context = derived_id("agentik", "remote", "c1")
            async with httpx2.AsyncClient(base_url=remote.url, timeout=GUARD_SECONDS) as raw:
                body = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "ListTasks",
                    "params": {"contextId": context},
                }
                listed = (await raw.post("/a2a", json=body, headers=A2A_1)).json()
                # one task (ListTasks may list a task that is just being stored twice)
                (task_id,) = {t["id"] for t in listed["result"]["tasks"]}
                body = {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "CancelTask",
                    "params": {"id": task_id},
                }
                cancelled = (await raw.post("/a2a", json=body, headers=A2A_1)).json()
                assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        (text,) = results
    assert text.startswith("remote: error: a2a agent 'remote' cancelled the task")


@pytest.mark.parametrize("streaming", [True, False])
async def test_input_required_asks_the_person_and_goes_on(tmp_path: Path, streaming: bool) -> None:
    """The remote task waits for an approval (INPUT_REQUIRED): the parent's turn
    asks its person (an elicitation of source 'remote'); the answer goes back on
    the same remote task, which finishes, and the tool's result is its answer."""
    PAID.clear()
    async with remote_agent(tmp_path) as remote:
        config = A2AAgentConfig(name="remote", url=remote.url, streaming=streaming)
        async with (
            open_a2a_toolsets([config]) as toolsets,
            open_chat_agent(
                model=caller_model(), storage=in_memory_storage(), toolsets=toolsets
            ) as agent,
            trio.open_nursery() as nursery,
        ):
            results: list[str] = []

            async def send() -> None:
                results.append((await agent.send("c1", "pay 7")).text)

            nursery.start_soon(send)
            with trio.fail_after(GUARD_SECONDS):
                while not (asked := await agent.pending_elicitations("c1")):  # noqa: ASYNC110
                    await trio.sleep(0.01)
            (question,) = asked
            assert question.source == "remote"
            assert "vault_pay" in question.message
            assert question.schema["required"] == ["approve"]
            with pytest.raises(ElicitationError, match="approve"):
                await agent.answer_elicitation("c1", question.id, content={"reason": "x"})
            assert PAID == []
            await agent.answer_elicitation("c1", question.id, content={"approve": True})
        (text,) = results
        assert await remote_history(remote.url, "c1") == ["pay 7"]
    assert text == "remote: done: paid 7"
    assert PAID == [7]


async def test_declining_the_question_is_an_error_result(tmp_path: Path) -> None:
    """Declining the remote agent's approval denies it there: the remote turn goes on
    with the denial, and nothing is paid."""
    PAID.clear()
    async with remote_agent(tmp_path) as remote:
        config = A2AAgentConfig(name="remote", url=remote.url)
        async with (
            open_a2a_toolsets([config]) as toolsets,
            open_chat_agent(
                model=caller_model(), storage=in_memory_storage(), toolsets=toolsets
            ) as agent,
            trio.open_nursery() as nursery,
        ):
            results: list[str] = []

            async def send() -> None:
                results.append((await agent.send("c1", "pay 8")).text)

            nursery.start_soon(send)
            with trio.fail_after(GUARD_SECONDS):
                while not (asked := await agent.pending_elicitations("c1")):  # noqa: ASYNC110
                    await trio.sleep(0.01)
            await agent.answer_elicitation("c1", asked[0].id, action="decline")
        (text,) = results
    assert text.startswith("remote: done: denied")
    assert PAID == []


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_restarted_remote_is_followed_to_the_end(tmp_path: Path, streaming: bool) -> None:
    """The remote server stops mid-task (its turn interrupted) and serves again on
    the same database: the call keeps following the same task, which the remote
    resumes, and the message was sent once."""
    async with remote_agent(tmp_path) as remote:
        config = A2AAgentConfig(name="remote", url=remote.url, streaming=streaming)
        async with (
            open_a2a_toolsets([config]) as (source,),
            open_chat_agent(
                model=caller_model(), storage=in_memory_storage(), toolsets=[source]
            ) as agent,
            trio.open_nursery() as nursery,
        ):
            results: list[str] = []

            async def send() -> None:
                results.append((await agent.send("c1", "slow")).text)

            nursery.start_soon(send)
            with trio.fail_after(GUARD_SECONDS):
                await remote.script.asked.wait()
            remote.script.asked = trio.Event()
            await remote.restart()
            with trio.fail_after(GUARD_SECONDS):
                await remote.script.asked.wait()  # the remote resumed the turn
            remote.script.release.set()
        (text,) = results
        assert await remote_history(remote.url, "c1") == ["slow"]
    assert text == "remote: slow answer"


async def test_a_call_with_a_stored_task_follows_it_and_sends_nothing(tmp_path: Path) -> None:
    """A call run again (its turn resumed) whose remote task is stored in the bundle
    follows that task (GetTask/SubscribeToTask) and sends no message: here the
    stored task is an earlier one, so its answer, not the new text, comes back."""
    async with (
        remote_agent(tmp_path) as remote,
        open_sqlite_storage(tmp_path / "caller.db") as storage,
    ):
        config = A2AAgentConfig(name="remote", url=remote.url)
        async with (
            open_a2a_toolsets([config], storage=storage) as toolsets,
            open_chat_agent(model=caller_model(), storage=storage, toolsets=toolsets) as agent,
        ):
            assert (await agent.send("c1", "first")).text == "remote: You said: first"
            context = derived_id("agentik", "remote", "c1")
            async with httpx2.AsyncClient(base_url=remote.url, timeout=GUARD_SECONDS) as raw:
                body = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "ListTasks",
                    "params": {"contextId": context},
                }
                (task,) = (await raw.post("/a2a", json=body, headers=A2A_1)).json()["result"][
                    "tasks"
                ]
            # What the first run of c2's call would have kept (the caller's model
            # names its first call in a conversation "call-2"; its message is seq 2).
            await CallLedger(storage).keep(
                "remote", "c2", "2:call-2", message_id="m-first", task_id=task["id"]
            )
            result = await agent.send("c2", "second")
            assert await remote_history(remote.url, "c2") == []
        assert await CallLedger(storage).record_of("remote", "c2", "2:call-2") is None
    assert result.text == "remote: You said: first"


async def test_health_shows_an_unreachable_agent(tmp_path: Path) -> None:
    """``agentik serve`` with an ``[[a2a.agents]]`` entry nobody answers: it serves,
    and /health lists the agent as unreachable, with why, and says degraded."""
    dead = A2AAgentConfig(name="remote", url=f"http://127.0.0.1:{free_port()}", token="t0ken-x")
    config = ServerConfig(port=0, database=str(tmp_path / "s.db"), a2a_agents=(dead,))
    async with trio.open_nursery() as nursery:
        stop = trio.Event()
        url = await nursery.start(
            lambda task_status: serve_agentik(
                config, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        async with httpx2.AsyncClient(timeout=GUARD_SECONDS) as client:
            reply = await client.get(f"{url}/health")
        stop.set()
    assert reply.status_code == 200
    body = reply.json()
    assert body["status"] == "degraded"
    (agent,) = body["a2a"]
    assert agent["name"] == "remote"
    assert agent["state"] == "unreachable"
    assert agent["streaming"] is None
    assert "agent-card.json" in agent["last_error"]
    assert "t0ken-x" not in reply.text


async def test_a_call_that_crashed_before_its_task_was_named_sends_the_same_message(
    tmp_path: Path,
) -> None:
    """A record with a messageId and no task (a crash between sending and learning
    the task): the call sends that messageId again, which agentik takes as the
    same task; a call with no record sends a fresh one."""
    async with (
        remote_agent(tmp_path) as remote,
        open_sqlite_storage(tmp_path / "caller.db") as storage,
    ):
        config = A2AAgentConfig(name="remote", url=remote.url)
        ledger = CallLedger(storage)
        async with (
            open_a2a_toolsets([config], storage=storage) as toolsets,
            open_chat_agent(model=caller_model(), storage=storage, toolsets=toolsets) as agent,
        ):
            await ledger.keep("remote", "c2", "2:call-2", message_id="m-fixed")
            assert (await agent.send("c2", "second")).text == "remote: You said: second"
            # the next turn's call ("call-6", its message seq 6: the key "6:call-6") crashed
            # after sending the same message: it is the same task, not "third"
            await ledger.keep("remote", "c2", "6:call-6", message_id="m-fixed")
            assert (await agent.send("c2", "third")).text == "remote: You said: second"
            assert (await agent.send("c2", "fourth")).text == "remote: You said: fourth"
            assert await remote_history(remote.url, "c2") == ["second", "fourth"]

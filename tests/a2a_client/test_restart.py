"""The calling side restarts: a real ``agentik serve`` process, configured with
``[[a2a.agents]]``, is killed (SIGKILL) while its ``remote_send`` call waits
for the remote agent's task, and started again on the same SQLite file. The
resumed turn follows the same remote task (its id was stored with the call)
rather than sending the message again, and gets the task's answer.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import trio

from tests.a2a_client.support import remote_agent
from tests.a2a_client.test_remote import remote_history
from tests.asgi import answer_lifespan, read_body, serve_on_loopback
from tests.cluster import ROOT, Node, read_lines
from tests.models.chat_server import completion

GUARD_SECONDS = 30


async def caller_model(scope: Any, receive: Any, send: Any) -> None:
    """The caller's Chat Completions backend: a user message ``T`` calls
    ``remote_send {"text": T}``; a tool result ``R`` is answered ``remote: R``."""
    if scope["type"] == "lifespan":
        await answer_lifespan(receive, send)
        return
    messages = json.loads(await read_body(receive))["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        body = completion(f"remote: {last['content']}")
    else:
        arguments = json.dumps({"text": last["content"]})
        call = (f"call-{len(messages)}", "remote_send", arguments)
        body = completion(None, [call], finish_reason="tool_calls")
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


async def start_caller(nursery: trio.Nursery, folder: Path, model_url: str) -> Node:
    command = [
        sys.executable,
        "-m",
        "agentik.cli",
        "serve",
        "--config",
        str(folder / "agentik.toml"),
        "--bind",
        "127.0.0.1:0",
        "--database",
        str(folder / "caller.db"),
        "--model-base-url",
        model_url,
        "--model",
        "m",
    ]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(folder)}
    process = await trio.lowlevel.open_process(command, stderr=subprocess.PIPE, cwd=folder, env=env)
    lines: list[str] = []
    bound = trio.Event()
    assert process.stderr is not None
    nursery.start_soon(read_lines, process.stderr, lines, bound)
    with trio.fail_after(GUARD_SECONDS):
        await bound.wait()
    url = next(line for line in lines if "serving url=" in line).split("url=")[1].split()[0]
    return Node(process, url, lines)


async def test_a_killed_caller_follows_the_same_remote_task(tmp_path: Path) -> None:
    """SIGKILL mid-call, start again: the turn resumes, the call follows the stored
    task, the remote got the message once, and /health shows the agent."""
    async with remote_agent(tmp_path) as remote, trio.open_nursery() as nursery:
        model_url = await serve_on_loopback(nursery, caller_model) + "/v1"
        (tmp_path / "agentik.toml").write_text(
            f'[[a2a.agents]]\nname = "remote"\nurl = "{remote.url}"\n'
        )
        caller = await start_caller(nursery, tmp_path, model_url)
        async with httpx2.AsyncClient(timeout=GUARD_SECONDS) as client:
            health = (await client.get(f"{caller.url}/health")).json()
            (agent,) = health["a2a"]
            assert (agent["name"], agent["state"], agent["streaming"]) == ("remote", "ready", True)

            async def first_turn() -> None:
                with contextlib.suppress(httpx2.TransportError):  # killed under it
                    await client.post(
                        f"{caller.url}/agentik/conversations/c1/turns", json={"text": "slow"}
                    )

            nursery.start_soon(first_turn)
            with trio.fail_after(GUARD_SECONDS):
                await remote.script.asked.wait()
            caller.kill()
            await caller.process.wait()
            caller = await start_caller(nursery, tmp_path, model_url)
            remote.script.release.set()
            messages: list[dict[str, Any]] = []
            with trio.fail_after(GUARD_SECONDS):
                while not messages or messages[-1]["content"] != "remote: slow answer":
                    await trio.sleep(0.05)
                    reply = await client.get(f"{caller.url}/agentik/conversations/c1/messages")
                    messages = reply.json()["messages"]
            assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
            assert messages[2]["content"] == "slow answer"
            assert await remote_history(remote.url, "c1") == ["slow"]
            caller.terminate()
            await caller.process.wait()
        nursery.cancel_scope.cancel()  # the model server and the log readers

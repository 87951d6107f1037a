"""A real ``serve_agentik`` on 127.0.0.1 for clients that misbehave on purpose,
and what they need: requests as raw bytes (so a test can stop at any byte),
a model that holds a turn until the test lets it go, and the two measures of
what a connection leaves behind in the server, open file descriptors and
trio tasks.

The server runs in the test's own trio run (in-memory storage: no thread, so
trio's mock clock only jumps when the server is truly idle), which makes its
file descriptors this process's and its tasks part of the test's task tree.
"""

from __future__ import annotations

import collections
import json
import os
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import h11
import trio
import trio.testing

from agentik import Message, ModelRequest, ModelResponse, Role, ToolCall
from agentik.models import ScriptedModel
from agentik.server import Limits, ServerConfig, serve_agentik
from agentik.server.a2a._tasks import RUN_TASK_NAME
from agentik.storage import StorageBundle, in_memory_storage

TOOLSETS = ("tests.server.sample_toolsets:clock",)
ANSWER = "done"


@attrs.define
class HeldModel:
    """Calls a tool first (so a stream has frames out before it waits), then
    holds the turn at its second model call until ``release`` is set."""

    release: trio.Event = attrs.Factory(trio.Event)
    waiting: trio.Event = attrs.Factory(trio.Event)
    """Set once a turn is held at its second model call."""

    async def respond(self, request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role is Role.USER:
            call = ToolCall(id="call-1", name="clock_now", arguments="{}")
            return ModelResponse(tool_calls=(call,))
        self.waiting.set()
        await self.release.wait()
        return ModelResponse(text=ANSWER)


@attrs.frozen
class Server:
    port: int
    model: HeldModel
    storage: StorageBundle
    fds: int
    """Open file descriptors of the process once the server was up."""
    tasks: collections.Counter[str]
    """``server_tasks()`` once the server was up."""

    async def stored(self, conversation_id: str) -> list[Message]:
        source = self.storage.message_store.get_messages(conversation_id)
        return [message async for message in source]


@asynccontextmanager
async def running_server(limits: Limits | None = None) -> AsyncIterator[Server]:
    """``serve_agentik`` with a ``HeldModel`` and in-memory storage; stops on exit."""
    storage, model, stop = in_memory_storage(), HeldModel(), trio.Event()
    config = ServerConfig(port=0, toolsets=TOOLSETS, limits=limits or Limits())
    async with trio.open_nursery() as nursery:
        url = await nursery.start(
            lambda task_status: serve_agentik(
                config,
                storage=storage,
                model=ScriptedModel(model.respond),
                shutdown_trigger=stop.wait,
                task_status=task_status,
            )
        )
        await trio.testing.wait_all_tasks_blocked()
        port = int(url.rsplit(":", 1)[1])
        yield Server(port, model, storage, fd_count(), server_tasks())
        model.release.set()
        stop.set()


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


TURN_TASKS = ("agentik.agent.", RUN_TASK_NAME)
"""Tasks that belong to a turn, not to a connection: the agent's conversation
actors, and the run that follows an A2A task's turn (it ends with the turn:
``back_to_baseline`` after the turn's end checks that)."""


def server_tasks() -> collections.Counter[str]:
    """Names of every task in this trio run but the turns' (they rightly live on
    after their client left): what connections would leave behind."""
    found: collections.Counter[str] = collections.Counter()

    def walk(task: trio.lowlevel.Task) -> None:
        if task.name.startswith(TURN_TASKS):
            return
        found[task.name] += 1
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return found


async def back_to_baseline(server: Server, *, extra_fds: int = 0, within: float = 1.0) -> None:
    """Wait (``within`` virtual seconds, well under the keep-alive timeout) until
    the server has no more descriptors or tasks than when it started."""
    try:
        with trio.fail_after(within):
            while True:
                await trio.testing.wait_all_tasks_blocked()
                if fd_count() <= server.fds + extra_fds and server_tasks() == server.tasks:
                    return
                await trio.sleep(0.01)
    except trio.TooSlowError:
        now = server_tasks()
        raise AssertionError(
            f"after {within} s: {fd_count() - server.fds - extra_fds} descriptor(s)"
            f" and tasks {dict(now - server.tasks)} left over"
            f" (and {dict(server.tasks - now)} gone)"
        ) from None


def request_bytes(transport: str, conversation_id: str) -> tuple[bytes, bytes]:
    """The head and body of one turn request on ``transport``."""
    headers = {"Host": "test", "Content-Type": "application/json"}
    if transport == "native-json":
        target, body = f"/agentik/conversations/{conversation_id}/turns", {"text": "hi"}
    elif transport == "native-sse":
        target, body = f"/agentik/conversations/{conversation_id}/turns", {"text": "hi"}
        headers["Accept"] = "text/event-stream"
    elif transport == "agui":
        target = "/agui"
        body = {
            "threadId": conversation_id,
            "runId": "run-1",
            "messages": [{"id": "u1", "role": "user", "content": "hi"}],
        }
        headers["Accept"] = "text/event-stream"
    elif transport == "a2a":
        target = "/a2a"
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendStreamingMessage",
            "params": {
                "message": {
                    "messageId": "m1",
                    "role": "ROLE_USER",
                    "parts": [{"text": "hi"}],
                    "contextId": conversation_id,
                }
            },
        }
        headers.update({"Accept": "text/event-stream", "A2A-Version": "1.0"})
    else:
        raise ValueError(f"unknown transport {transport!r}")
    payload = json.dumps(body).encode()
    headers["Content-Length"] = str(len(payload))
    lines = [f"POST {target} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode(), payload


STREAMED = ("native-sse", "agui", "a2a")
TRANSPORTS = (*STREAMED, "native-json")


class RawClient:
    """One TCP connection that can stop, half-close or reset wherever a test
    says; it parses what it reads with h11 only to know where it is."""

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.sock = sock
        self.h11 = h11.Connection(h11.CLIENT)
        self.received = b""

    @classmethod
    async def connect(cls, port: int) -> RawClient:
        sock = trio.socket.socket()
        await sock.connect(("127.0.0.1", port))
        return cls(sock)

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[await self.sock.send(view) :]

    async def read_event(self) -> h11.Event:
        """The next response event; ``h11.ConnectionClosed`` at EOF."""
        while (event := self.h11.next_event()) is h11.NEED_DATA:
            data = await self.sock.recv(65536)
            self.received += data
            self.h11.receive_data(data)
        assert not isinstance(event, type), event
        return event

    def request_sent(self, head: bytes, body: bytes) -> None:
        """Tell the parser the request went out (it wrote no bytes itself)."""
        start, _, rest = head.decode().partition("\r\n")
        method, target, _ = start.split(" ")
        headers = [tuple(line.split(": ", 1)) for line in rest.strip().split("\r\n")]
        self.h11.send(h11.Request(method=method, target=target, headers=headers))
        self.h11.send(h11.Data(data=body))
        self.h11.send(h11.EndOfMessage())

    def leave(self, way: str) -> None:
        """Go away: ``close`` (FIN), ``reset`` (RST: SO_LINGER 0) or
        ``half-close`` (shutdown for writing; the socket stays open to read)."""
        if way == "half-close":
            self.sock.shutdown(socket.SHUT_WR)
            return
        if way == "reset":
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif way != "close":
            raise ValueError(f"unknown way to leave {way!r}")
        self.sock.close()

    async def closed_by_server(self) -> bool:
        """Read to EOF (what is left of a response may come first). A server
        closing with bytes of ours unread sends a reset instead: the same here."""
        try:
            while data := await self.sock.recv(65536):
                self.received += data
        except ConnectionResetError:
            pass
        return True


WAYS = ("close", "half-close", "reset")


async def health(port: int) -> int:
    """GET /health on a new connection, closed afterwards; the status."""
    client = await RawClient.connect(port)
    try:
        await client.send(b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n")
        client.h11.send(h11.Request(method="GET", target="/health", headers=[("Host", "test")]))
        client.h11.send(h11.EndOfMessage())
        response = await client.read_event()
        assert isinstance(response, h11.Response), response
        while not isinstance(await client.read_event(), h11.EndOfMessage):
            pass
        return response.status_code
    finally:
        client.sock.close()

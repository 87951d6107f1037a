"""A cluster of real ``agentik serve`` processes on one PostgreSQL database,
for the multi-node tests and benchmarks.

``Node`` runs one ``agentik serve`` subprocess on 127.0.0.1 (port 0, read
back from its log line), with a short lease; ``RecordingModel`` is a Chat
Completions server every node calls, which records when each model call for
each conversation began and ended (``time.monotonic``, one clock for every
process of the machine), so a test can prove that no two turns of one
conversation ever ran at once, wherever they ran. A turn's text is
``"<conversation> <n>"``, which is how the model knows the conversation.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import attrs
import httpx2
import trio

from tests.asgi import answer_lifespan, read_body, serve_on_loopback
from tests.models.chat_server import completion

ROOT = Path(__file__).resolve().parents[1]


@attrs.define
class RecordingModel:
    """Answers every call after ``delay`` seconds (a model's latency: the
    window in which an overlap would show), recording its interval."""

    delay: float = 0.02
    calls: dict[str, list[tuple[float, float]]] = attrs.Factory(lambda: defaultdict(list))
    url: str = ""
    slow_once: dict[str, float] = attrs.Factory(dict)
    """Texts whose first call takes this long instead of ``delay``."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        body = json.loads(await read_body(receive))
        began = time.monotonic()
        text = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        await trio.sleep(self.slow_once.pop(text, self.delay))
        self.calls[text.split(" ")[0]].append((began, time.monotonic()))
        answer = json.dumps(completion(f"answer to {text}")).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": answer})

    async def start(self, nursery: trio.Nursery) -> str:
        self.url = await serve_on_loopback(nursery, self) + "/v1"
        return self.url

    def overlaps(self) -> list[tuple[str, tuple[float, float], tuple[float, float]]]:
        """Pairs of model calls of one conversation whose intervals overlap."""
        found = []
        for conversation, calls in self.calls.items():
            ordered = sorted(calls)
            for first, second in itertools.pairwise(ordered):
                if second[0] < first[1]:
                    found.append((conversation, first, second))
        return found


@attrs.define
class Node:
    """One ``agentik serve`` process."""

    process: trio.Process
    url: str
    log: list[str]

    def kill(self) -> None:
        """SIGKILL: no drain, no clean leave; its lease must expire."""
        self.process.kill()

    def terminate(self) -> None:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)


async def read_lines(stream: trio.abc.ReceiveStream, lines: list[str], bound: trio.Event) -> None:
    """Collect a node's log lines; set ``bound`` once it says where it serves."""
    buffer = b""
    async for chunk in stream:
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for raw in complete:
            lines.append(raw.decode(errors="replace"))
            if "serving url=" in lines[-1]:
                bound.set()


async def start_node(
    nursery: trio.Nursery,
    database: str,
    model_url: str,
    *,
    lease: float = 2.0,
    cwd: Path,
    model: bool = True,
    settings: dict[str, str] | None = None,
) -> Node:
    """``agentik serve`` on ``database``, calling the model at ``model_url``
    (``model=False``: the scripted demo model, for benchmarks); ``settings``:
    more ``AGENTIK_*`` environment variables (``AGENTIK_FORWARD``, …)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")}
    env["PYTHONPATH"] = str(ROOT)
    env["AGENTIK_LEASE_SECONDS"] = str(lease)
    env["AGENTIK_MAX_QUEUED_TURNS"] = "64"
    # As deploy/compose.yaml runs them: idle connections outlive HAProxy's
    # (deploy/haproxy.cfg keeps connections to the nodes alive).
    env["AGENTIK_KEEPALIVE_TIMEOUT"] = "300"
    env.update(settings or {})
    command = [
        sys.executable,
        "-m",
        "agentik.cli",
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--database",
        database,
    ]
    if model:
        command += ["--model-base-url", model_url, "--model", "m"]
    process = await trio.lowlevel.open_process(command, stderr=subprocess.PIPE, cwd=cwd, env=env)
    lines: list[str] = []
    bound = trio.Event()
    assert process.stderr is not None
    nursery.start_soon(read_lines, process.stderr, lines, bound)
    nursery.start_soon(_reap, process)
    try:
        with trio.fail_after(60):
            await bound.wait()
    except trio.TooSlowError:
        process.kill()
        raise AssertionError("node did not start:\n" + "\n".join(lines)) from None
    url = next(line for line in lines if "serving url=" in line).split("url=")[1].split()[0]
    return Node(process, url, lines)


async def _reap(process: trio.Process) -> None:
    """Kill the node if the nursery that started it is cancelled first (a test
    or benchmark that failed): a node left behind holds its port and its
    database connections, and kept a benchmark's shell waiting on its pipe."""
    try:
        await process.wait()
    finally:
        if process.returncode is None:
            process.kill()


async def stop_nodes(nodes: list[Node]) -> None:
    for node in nodes:
        node.terminate()
    with trio.move_on_after(30):
        for node in nodes:
            await node.process.wait()
    for node in nodes:
        if node.process.returncode is None:
            node.process.kill()
            await node.process.wait()


@attrs.define
class Load:
    """Conversations each sending turn after turn to a random live node,
    retrying a turn (same idempotency key) on another node when its node
    does not answer, until ``stop``."""

    nodes: list[Node]
    client: httpx2.AsyncClient
    acked: dict[str, set[int]] = attrs.Factory(lambda: defaultdict(set))
    last_ack: dict[str, float] = attrs.Factory(dict)
    stop: bool = False

    async def run(self, conversation: str) -> None:
        turn = 0
        while not self.stop:
            turn += 1
            while True:
                node = random.choice(self.nodes)
                try:
                    response = await self.client.post(
                        f"{node.url}/agentik/conversations/{conversation}/turns",
                        json={
                            "text": f"{conversation} {turn}",
                            "idempotency_key": f"{conversation}-{turn}",
                        },
                    )
                except httpx2.TransportError:  # a dead node, or redirected to one
                    await trio.sleep(0.05)
                    continue
                if response.status_code == 200:
                    break
                assert response.status_code in (409, 503), response.text
                await trio.sleep(0.05)
            assert response.json()["text"] == f"answer to {conversation} {turn}"
            self.acked[conversation].add(turn)
            self.last_ack[conversation] = time.monotonic()


def hops(nodes: list[Node]) -> int:
    """Turn requests that reached a node which did not run them (forwarded or
    redirected to the owner): the turn requests every node logged, less the
    turns that finished (a forwarded turn logs a request on both nodes, a
    redirected one a 307 on the first)."""
    lines = [ln for n in nodes for ln in n.log]
    requests = sum("request method=POST path=/agentik/conversations/" in ln for ln in lines)
    return requests - sum("outcome=finished" in ln for ln in lines)


OWNER_WAIT = 30.0
"""Seconds ``owner_url`` waits for a live holder of a conversation's shard."""


async def owner_url(database: str, conversation: str) -> str:
    """The advertised URL of the node holding the conversation's shard."""
    import psycopg

    from agentik.storage import shard_of

    def query() -> str | None:
        with psycopg.connect(database) as connection:
            shards = connection.execute(
                "SELECT value::integer FROM agentik.agentik_setting WHERE name = 'shards'"
            ).fetchone()
            assert shards is not None
            row = connection.execute(
                "SELECT n.url FROM agentik.agentik_shard s JOIN agentik.agentik_node n"
                " USING (node_id) WHERE s.shard = %s AND n.expires_at > clock_timestamp()",
                (shard_of(conversation, shards[0]),),
            ).fetchone()
        return None if row is None else str(row[0])

    # Right after a node died its shards have no live holder until another
    # node takes them (within the lease): wait for one, bounded.
    with trio.fail_after(OWNER_WAIT):
        while (url := await trio.to_thread.run_sync(query)) is None:  # noqa: ASYNC110
            await trio.sleep(0.1)
    return url


async def shards_spread(database: str, count: int) -> None:
    """Until ``count`` live nodes hold every shard between them, each about
    its share, so requests no longer meet a shard being handed off."""
    import math

    import psycopg

    def spread() -> list[int]:
        with psycopg.connect(database) as connection:
            rows = connection.execute(
                "SELECT count(*) FROM agentik.agentik_shard s JOIN agentik.agentik_node n"
                " USING (node_id) WHERE n.expires_at > clock_timestamp() GROUP BY n.node_id"
            ).fetchall()
            total = connection.execute("SELECT count(*) FROM agentik.agentik_shard").fetchone()
        assert total is not None
        held = sorted(int(row[0]) for row in rows)
        share = math.ceil(int(total[0]) / count)
        return held if sum(held) == total[0] and all(h <= share for h in held) else []

    with trio.fail_after(30):
        while len(await trio.to_thread.run_sync(spread)) != count:  # noqa: ASYNC110 (the nodes')
            await trio.sleep(0.1)


CONFIG = ROOT / "deploy" / "haproxy.cfg"


def haproxy_config(port: int, node_urls: list[str], *, balance: str | None = None) -> str:
    """deploy/haproxy.cfg with its ``bind`` on ``port`` and one ``server``
    line and one ``use-server`` line per node, nothing else changed
    (``balance``: that algorithm instead of the hash, to route requests
    wrongly on purpose). It reads ``holders.map`` beside it (``write_holders``)."""
    lines = []
    for line in CONFIG.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("bind "):
            line = f"    bind 127.0.0.1:{port}"
        elif stripped.startswith("balance ") and balance is not None:
            line = f"    balance {balance}"
        elif stripped.startswith("server "):
            if stripped.startswith("server node1 "):
                lines += [
                    f"    server node{i} {url.removeprefix('http://')}"
                    for i, url in enumerate(node_urls, 1)
                ]
            continue
        elif stripped.startswith("use-server "):
            if stripped.startswith("use-server node1 "):
                lines += [
                    f"    use-server node{i} if {{ var(txn.holder) -m str {url} }}"
                    for i, url in enumerate(node_urls, 1)
                ]
            continue
        lines.append(line)
    return "\n".join(lines) + "\n"


def write_holders(folder: Path) -> None:
    """The empty shard map deploy/haproxy.cfg reads beside it (as shipped)."""
    (folder / "holders.map").write_bytes((CONFIG.parent / "holders.map").read_bytes())


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def start_haproxy(
    nursery: trio.Nursery, node_urls: list[str], folder: Path, *, balance: str | None = None
) -> tuple[trio.Process, str]:
    """HAProxy (Debian's package) in front of ``node_urls``; its URL, once it
    forwards to every node (each /health answered through it)."""
    import shutil

    import httpx2

    binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
    port = free_port()
    config = folder / "haproxy.cfg"
    config.write_text(haproxy_config(port, node_urls, balance=balance))
    write_holders(folder)
    log = (folder / "haproxy.log").open("wb")
    process = await trio.lowlevel.open_process(
        [binary, "-db", "-f", str(config)], stdout=log, stderr=log
    )
    log.close()
    url = f"http://127.0.0.1:{port}"
    with trio.fail_after(20):
        async with httpx2.AsyncClient(timeout=5) as client:
            while True:
                try:
                    if (await client.get(f"{url}/health")).status_code == 200:
                        break
                except httpx2.TransportError:
                    if process.returncode is not None:
                        raise AssertionError(
                            "haproxy exited: " + (folder / "haproxy.log").read_text()
                        ) from None
                await trio.sleep(0.05)
    return process, url

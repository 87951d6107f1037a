"""deploy/compose.yaml, run as plain processes: its three ``agentik serve``
nodes and its HAProxy, started with the commands, environment and HAProxy
configuration the compose file gives, on 127.0.0.1 and the tests' throwaway
PostgreSQL instead of containers (this machine has no container runtime).

What is moved, and only that: each node's ``--bind 0.0.0.0:8080`` to a free
port of 127.0.0.1, its advertised URL (its service name and port, where the other nodes
forward requests) to that address, the DSN (the compose file's ``postgres`` service) to a fresh
database, HAProxy's ``bind`` to a free port and its ``server`` lines (the
nodes by service name) to the nodes' addresses. ``${VAR:?…}`` is filled in
as ``docker compose`` would, from an environment the test gives.

Then turns go through HAProxy with the bearer token: every conversation
lands on its owner (no redirect), every history is whole and gapless, the
conversations spread over the nodes, and HAProxy keeps its connections to
the nodes alive (far fewer connections reach the nodes than requests).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs
import httpx2
import psycopg
import pytest
import trio
import yaml

from agentik import Role
from agentik.storage import open_postgres_storage
from tests.cluster import free_port, read_lines, shards_spread
from tests.kits import missing_kit
from tests.postgres import fresh_database

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "compose.yaml"
HAPROXY = shutil.which("haproxy") or (
    "/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None
)
CONVERSATIONS = 6
TURNS = 40


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}``."""

    def one(match: re.Match[str]) -> str:
        name, operator, rest = match.group(1), match.group(2), match.group(3)
        if env.get(name):
            return env[name]
        if operator == ":?":
            raise AssertionError(f"compose would refuse to start: {name}: {rest}")
        return rest if operator == ":-" else ""

    return re.sub(r"\$\{(\w+)(?:(:[-?])([^}]*))?\}", one, value)


def node_services(services: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in services.items() if s.get("command", [""])[0] == "agentik"}


@attrs.define
class Started:
    process: trio.Process
    url: str
    lines: list[str]


async def start_node(
    nursery: trio.Nursery, service: dict[str, Any], env: dict[str, str], cwd: Path, port: int
) -> Started:
    command = list(service["command"])
    bind = command.index("--bind") + 1
    assert command[bind] == "0.0.0.0:8080", "the node listens where HAProxy and the probes look"
    command[bind] = f"127.0.0.1:{port}"
    command[:1] = [sys.executable, "-m", "agentik.cli"]
    process = await trio.lowlevel.open_process(command, stderr=subprocess.PIPE, cwd=cwd, env=env)
    lines: list[str] = []
    ready = trio.Event()
    assert process.stderr is not None
    nursery.start_soon(read_lines, process.stderr, lines, ready)
    with trio.move_on_after(60):
        await ready.wait()
    if not ready.is_set():
        process.kill()
        raise AssertionError("node did not start:\n" + "\n".join(lines))
    return Started(process, f"http://127.0.0.1:{port}", lines)


def node_environment(
    name: str, service: dict[str, Any], compose_env: dict[str, str], database: str, url: str
) -> dict[str, str]:
    """The node's environment from the compose file, with the DSN and the
    advertised URL moved (each checked to name what compose would reach)."""
    given = {k: interpolate(str(v), compose_env) for k, v in service["environment"].items()}
    dsn = urlsplit(given["AGENTIK_DATABASE"])
    postgres = compose()["services"]["postgres"]["environment"]
    assert dsn.hostname == "postgres" and dsn.username == postgres["POSTGRES_USER"]
    assert dsn.path == "/" + postgres["POSTGRES_DB"]
    given["AGENTIK_DATABASE"] = database
    exposed = {p.split(":")[1] for p in service["ports"]}
    advertised = urlsplit(given["AGENTIK_ADVERTISE_URL"])
    assert advertised.hostname == name, "the other nodes reach it by its service name"
    assert str(advertised.port) in exposed, "the other nodes reach the port it listens on"
    given["AGENTIK_ADVERTISE_URL"] = url
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")}
    env["PYTHONPATH"] = str(ROOT)
    return env | given


def haproxy_config(
    service: dict[str, Any], node_urls: dict[str, str], port: int, folder: Path
) -> Path:
    """The configuration compose mounts into the HAProxy container, with its
    ``bind`` on ``port``, each ``server`` line's node at its address, and a
    stats socket in ``folder`` (the test reads HAProxy's connection counts)."""
    command = service["command"]
    mounted = command[command.index("-f") + 1]
    (volume,) = [v for v in service["volumes"] if v.split(":")[1] == mounted]
    source = COMPOSE.parent / volume.split(":")[0]
    published = [p.split(":")[1] for p in service["ports"]]
    lines = []
    for line in source.read_text().splitlines():
        words = line.split()
        if words[:1] == ["bind"]:
            assert words[1] == f":{published[0]}", "HAProxy listens on the port compose publishes"
            line = f"    bind 127.0.0.1:{port}"
        elif words[:1] == ["server"]:
            host, _, node_port = words[2].partition(":")
            assert node_port == "8080", line
            line = line.replace(words[2], node_urls[host].removeprefix("http://"))
        elif words[:1] == ["use-server"]:
            # The advertised URL of words[1]'s node (compose's AGENTIK_ADVERTISE_URL).
            assert words[-2] == f"http://{words[1]}:8080", line
            line = line.replace(words[-2], node_urls[words[1]])
        lines.append(line)
        if words[:1] == ["global"]:
            lines.append(f"    stats socket {folder / 'haproxy.sock'} mode 600")
    rendered = folder / "haproxy.cfg"
    rendered.write_text("\n".join(lines) + "\n")
    # The shard map, mounted beside the configuration, which reads it from there.
    (holders,) = [v for v in service["volumes"] if v.split(":")[1].endswith("/holders.map")]
    assert Path(holders.split(":")[1]).parent == Path(mounted).parent, holders
    (folder / "holders.map").write_bytes((COMPOSE.parent / holders.split(":")[0]).read_bytes())
    return rendered


def server_connections(socket_path: Path) -> dict[str, int]:
    """HAProxy's own count, summed over the nodes: connections it opened to
    them (``connect``) and requests it sent on one it already had (``reuse``)."""
    import socket

    with socket.socket(socket.AF_UNIX) as stats:
        stats.connect(str(socket_path))
        stats.sendall(b"show stat\n")
        data = b""
        while chunk := stats.recv(65536):
            data += chunk
    header, *rows = data.decode().splitlines()
    names = header.lstrip("# ").split(",")
    total = {"connect": 0, "reuse": 0}
    for row in rows:
        values = dict(zip(names, row.split(","), strict=False))
        if values.get("pxname") == "nodes" and values.get("svname", "").startswith("node"):
            for key in total:
                total[key] += int(values[key] or 0)
    return total


async def check_histories(database: str, sent: dict[str, set[int]]) -> None:
    """Every acknowledged turn once, in gapless seqs, each answered (by the
    demo model: the compose file configures none)."""
    async with open_postgres_storage(database) as storage:
        for conversation, turns in sent.items():
            history = [m async for m in storage.message_store.get_messages(conversation)]
            assert [m.seq for m in history] == list(range(1, len(history) + 1))
            users = [m.content for m in history if m.role is Role.USER]
            assert users == [f"{conversation} {turn}" for turn in sorted(turns)]
            for user, answer in zip(history[::2], history[1::2], strict=True):
                assert user.role is Role.USER and answer.role is Role.ASSISTANT
                assert answer.content


async def owners(database: str) -> set[str]:
    """The URLs of the live nodes holding shards."""

    def query() -> set[str]:
        with psycopg.connect(database) as connection:
            rows = connection.execute(
                "SELECT DISTINCT n.url FROM agentik.agentik_shard s"
                " JOIN agentik.agentik_node n USING (node_id)"
                " WHERE n.expires_at > clock_timestamp()"
            ).fetchall()
        return {str(url) for (url,) in rows}

    return await trio.to_thread.run_sync(query)


async def test_the_compose_services_serve_turns_through_haproxy(
    postgres_dsn: str, tmp_path: Path
) -> None:
    if HAPROXY is None:
        missing_kit("haproxy", "haproxy is not installed (apt-get install haproxy; .ci/run does)")
    services = compose()["services"]
    nodes = node_services(services)
    assert sorted(nodes) == ["node1", "node2", "node3"]
    token = secrets.token_hex(24)
    database = await trio.to_thread.run_sync(fresh_database, postgres_dsn)
    sent: dict[str, set[int]] = defaultdict(set)
    async with trio.open_nursery() as nursery:
        started: dict[str, Started] = {}
        for name, service in nodes.items():
            port = free_port()
            here = f"http://127.0.0.1:{port}"
            env = node_environment(name, service, {"AGENTIK_AUTH_TOKEN": token}, database, here)
            node = await start_node(nursery, service, env, tmp_path, port)
            started[name] = node
        balancer_port = free_port()
        config = haproxy_config(
            services["haproxy"], {n: s.url for n, s in started.items()}, balancer_port, tmp_path
        )
        log = (tmp_path / "haproxy.log").open("wb")
        balancer = await trio.lowlevel.open_process(
            [HAPROXY, "-db", "-f", str(config)], stdout=log, stderr=log
        )
        log.close()
        url = f"http://127.0.0.1:{balancer_port}"
        try:
            async with httpx2.AsyncClient(
                base_url=url,
                follow_redirects=True,
                timeout=30,
                headers={"authorization": f"Bearer {token}"},
            ) as client:
                with trio.fail_after(30):
                    while True:  # HAProxy up, each node checked and in
                        try:
                            if (await client.get("/health")).status_code == 200:
                                break
                        except httpx2.TransportError:
                            log_text = (tmp_path / "haproxy.log").read_text()
                            assert balancer.returncode is None, log_text
                        await trio.sleep(0.05)
                    await trio.sleep(2.5)  # rise 1, inter 1s: every node has passed a check
                health = (await client.get("/health")).json()
                assert health["lease"]["valid"], health  # a node of several, with its lease
                await shards_spread(database, len(started))  # no shard being handed off
                before = server_connections(tmp_path / "haproxy.sock")
                redirected = 0

                async def converse(conversation: str) -> None:
                    nonlocal redirected
                    for turn in range(TURNS):
                        target = f"/agentik/conversations/{conversation}/turns"
                        body = {"text": f"{conversation} {turn}"}
                        response = await client.post(target, json=body, follow_redirects=False)
                        if response.status_code == 307:
                            # The balancer's hash does not know the shard's holder. Followed
                            # by hand: httpx drops the token on a redirect to another origin.
                            redirected += 1
                            location = response.headers["location"]
                            response = await client.post(location, json=body)
                        assert response.status_code == 200, response.text
                        sent[conversation].add(turn)

                async with trio.open_nursery() as talkers:
                    for c in range(CONVERSATIONS):
                        talkers.start_soon(converse, f"compose-{c}")
                after = server_connections(tmp_path / "haproxy.sock")
                # Read while the nodes live: a clean stop frees their conversations.
                spread = await owners(database)
                unauthorized = await client.get(
                    "/agentik/conversations", headers={"authorization": "Bearer wrong-token-0000"}
                )
        finally:
            balancer.kill()
            await balancer.wait()
            for node in started.values():
                node.process.terminate()
            with trio.move_on_after(30):
                for node in started.values():
                    await node.process.wait()
            for node in started.values():
                if node.process.returncode is None:
                    node.process.kill()
        nursery.cancel_scope.cancel()
    requests = CONVERSATIONS * TURNS
    # The balancer's hash cannot know which node holds a conversation's
    # shard: a request it sends elsewhere is redirected (followed here).
    assert redirected < requests, "every request was redirected"
    assert unauthorized.status_code == 401, "the nodes require the compose file's token"
    # Keep-alive to the nodes: a few connections for all the requests, not
    # one per request (health checks are counted apart by HAProxy).
    opened = after["connect"] - before["connect"]
    reused = after["reuse"] - before["reuse"]
    assert opened <= 3 * CONVERSATIONS and reused >= requests - opened, (opened, reused)
    await check_histories(database, sent)
    assert len(spread) >= 2, spread
    assert spread <= {s.url for s in started.values()}


def test_compose_refuses_to_start_without_a_token() -> None:
    """As ``docker compose`` does: the token is required, never defaulted."""
    (service, *_) = node_services(compose()["services"]).values()
    with pytest.raises(AssertionError, match="AGENTIK_AUTH_TOKEN"):
        interpolate(service["environment"]["AGENTIK_AUTH_TOKEN"], {})

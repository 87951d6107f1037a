"""A planted API key and planted bearer tokens never appear in responses, logs,
metrics, error messages or the database, whatever the model backend does.

The key is read the way ``agentik serve`` reads it: ``agentik.toml`` names the
environment variable (``api_key_env``). The backend is a real HTTP server on
127.0.0.1 that quotes the request's headers back in error bodies, garbage
bodies, stream errors and even the model's answer; or nothing listens at all.
Each case drives every transport, then checks every byte it saw.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from agentik import ModelRequest, OpenAICompatibleModel, Role
from agentik._errors import ModelBackendError
from agentik._messages import Message
from agentik.models import RetryPolicy
from agentik.models._redact import Redactor
from agentik.server import Client, ConfigError, ServerConfig, load_config, serve_agentik
from tests.security.backend import EchoBackend

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-PLANTED-7c4e1f0a9b2d8e3f6a5c"
ALICE = "alice-PLANTED-token-3b9e1d7c"
LEGACY = "legacy-PLANTED-token-5f2a8c0e"
SECRETS = (KEY, ALICE, LEGACY)


def assert_clean(where: str, text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"a planted secret appears in {where}"


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections for the whole test: bound
    but not listening, so no other process (another test's server, under
    xdist) can take it meanwhile, as it could a port merely found free."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        yield port


def write_config(tmp_path: Path, base_url: str) -> Path:
    path = tmp_path / "agentik.toml"
    path.write_text(
        f"""
[server]
bind = "127.0.0.1:0"
auth_token = "{LEGACY}"

[[server.clients]]
owner = "alice"
token_env = "ALICE_TOKEN"

[storage]
database = "{tmp_path / "agentik.db"}"

[model]
base_url = "{base_url}"
model = "m"
api_key_env = "PLANTED_KEY"
""",
        encoding="utf-8",
    )
    return path


ENV = {"PLANTED_KEY": KEY, "ALICE_TOKEN": ALICE}


def shown(response: httpx2.Response) -> str:
    return f"{response.status_code} {dict(response.headers)} {response.text}"


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def a2a_send(text: str, message_id: str) -> dict[str, Any]:
    return {
        "message": {
            "messageId": message_id,
            "role": "ROLE_USER",
            "parts": [{"text": text}],
            "contextId": "ctx",
        }
    }


async def drive(url: str, *, turns: bool = True) -> list[str]:
    """Every kind of request, as alice and as strangers; all that came back."""
    seen: list[str] = []
    a2a = {"A2A-Version": "1.0"}
    sse = {"Accept": "text/event-stream"}
    async with httpx2.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {ALICE}"}, timeout=30
    ) as alice:
        turn = "/agentik/conversations/c1/turns"
        seen.append(shown(await alice.post(turn, json={"text": "hello"})))
        agui = {
            "threadId": "t1",
            "runId": "r1",
            "messages": [{"id": "u", "role": "user", "content": "hi"}],
        }
        seen.append(shown(await alice.post("/agui", json=agui, headers=sse)))
        if turns:
            seen.append(shown(await alice.post(turn, json={"text": "again"}, headers=sse)))
            sent = await alice.post(
                "/a2a", json=rpc("SendMessage", a2a_send("hi", "m1")), headers=a2a
            )
            seen.append(shown(sent))
            streamed = rpc("SendStreamingMessage", a2a_send("hi", "m2"))
            seen.append(shown(await alice.post("/a2a", json=streamed, headers={**a2a, **sse})))
            task_id = sent.json()["result"]["task"]["id"]
            got = rpc("GetTask", {"id": task_id, "historyLength": 10})
            seen.append(shown(await alice.post("/a2a", json=got, headers=a2a)))
        seen.append(shown(await alice.get("/agentik/conversations/c1/messages")))
        seen.append(shown(await alice.get("/health")))
        seen.append(shown(await alice.get("/metrics")))
        seen.append(shown(await alice.post(turn, content=b"{not json")))
        seen.append(shown(await alice.post(turn, json={"text": 5})))
    for token in (KEY, f"{ALICE}x", LEGACY[:-1]):
        async with httpx2.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {token}"}
        ) as stranger:
            refused = await stranger.get("/agentik/conversations")
            assert refused.status_code == 401
            seen.append(shown(refused))
    return seen


def database_bytes(tmp_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in tmp_path.glob("agentik.db*"))


@pytest.mark.parametrize("mode", ["401", "500", "garbage", "stream-error", "echo", "refused"])
async def test_the_key_never_leaves(
    mode: str,
    tmp_path: Path,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
    closed_port: int,
) -> None:
    """Whatever the backend answers, the key and tokens are in no response, log
    line, metric or stored byte; the backend's own words do come through, masked."""
    caplog.set_level(logging.DEBUG)
    backend = EchoBackend()
    await backend.start(nursery)
    base = f"http://127.0.0.1:{closed_port}/v1" if mode == "refused" else backend.url(mode)
    config = load_config(write_config(tmp_path, base), env=ENV)
    assert config.model is not None and config.model.api_key == KEY
    stop = trio.Event()
    done = trio.Event()

    async def run(task_status: trio.TaskStatus[str]) -> None:
        try:
            await serve_agentik(config, shutdown_trigger=stop.wait, task_status=task_status)
        finally:
            done.set()

    url = await nursery.start(run)
    seen = await drive(url, turns=mode != "refused")  # refused: each turn waits out retries
    stop.set()
    await done.wait()

    for i, text in enumerate(seen):
        assert_clean(f"response {i}", text)
    assert_clean("the logs", caplog.text)
    assert_clean("repr(config)", repr(config) + str(config))
    stored = database_bytes(tmp_path)
    for secret in SECRETS:
        assert secret.encode() not in stored, "a planted secret was stored"
    joined = "\n".join(seen)
    if mode == "refused":
        assert "could not reach" in joined
    else:
        assert backend.requests > 0
        assert "***" in joined, "the backend's quote of the key should show, masked"
    if mode == "echo":
        assert b"your headers:" in stored and b"Bearer ***" in stored
    assert "request method=POST path=/agentik/conversations/c1/turns" in caplog.text


async def test_the_subprocess_logs_no_secret(tmp_path: Path, nursery: trio.Nursery) -> None:
    """``agentik serve`` as a real process: its stderr, through a failing turn,
    refusals, /health and shutdown, never shows the key or a token."""
    backend = EchoBackend()
    await backend.start(nursery)
    path = write_config(tmp_path, backend.url("401"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")}
    env.update(ENV, PYTHONPATH=str(ROOT))
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "agentik.cli", "serve", "--config", str(path)],
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    assert process.stderr is not None
    output = b""
    with trio.fail_after(30):
        while b"serving url=" not in output:
            chunk = await process.stderr.receive_some()
            assert chunk, output.decode()
            output += chunk
    url = output.split(b"serving url=")[1].split()[0].decode()
    async with httpx2.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {ALICE}"}, timeout=30
    ) as alice:
        failed = await alice.post("/agentik/conversations/c/turns", json={"text": "hi"})
        assert failed.status_code == 502
        assert "Bearer ***" in failed.text
        assert_clean("the 502 answer", failed.text)
        assert (await alice.get("/health")).status_code == 200
    async with httpx2.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as c:
        assert (await c.get("/metrics")).status_code == 401
    process.send_signal(signal.SIGTERM)
    with trio.fail_after(30):
        async for chunk in process.stderr:
            output += chunk
        assert await process.wait() == 0
    text = output.decode()
    assert "status=502" in text and "status=401" in text
    assert_clean("agentik serve's stderr", text)


class TestConfigErrors:
    """Configuration errors name the setting and the entry, never the secret."""

    def test_a_mistyped_auth_token(self, tmp_path: Path) -> None:
        path = tmp_path / "agentik.toml"
        path.write_text("[server]\nauth_token = 738291045561\n", encoding="utf-8")
        with pytest.raises(ConfigError, match=r"\[server\] auth_token must be a string") as err:
            load_config(path, env={})
        assert "738291045561" not in str(err.value)

    @pytest.mark.parametrize(
        ("clients", "expected"),
        [
            (f"alice:{ALICE} trailing-words", "AGENTIK_CLIENTS entry 1 (owner 'alice'): token"),
            (f"alice:{ALICE},bob:{ALICE}", "client entries 1 and 2 have the same token"),
            (f"alice:{LEGACY}", "reuses [server] auth_token"),
            (f"bad owner:{ALICE}", "AGENTIK_CLIENTS entry 1: owner must be"),
            (ALICE, "AGENTIK_CLIENTS entry 1 must be 'owner:token'"),
        ],
    )
    def test_bad_client_entries(self, clients: str, expected: str) -> None:
        with pytest.raises(ConfigError) as err:
            load_config(None, env={"AGENTIK_CLIENTS": clients, "AGENTIK_AUTH_TOKEN": LEGACY})
        assert expected in str(err.value)
        assert_clean("the error", str(err.value))

    def test_a_config_built_in_code_is_checked_too(self) -> None:
        """Embedders building ``ServerConfig`` get the same check: one token, one owner."""
        twice = (Client(owner="alice", token=ALICE), Client(owner="bob", token=ALICE))
        with pytest.raises(ConfigError, match=r"^client entries 1 and 2 have the same token"):
            ServerConfig(clients=twice)
        with pytest.raises(ConfigError, match=r"reuses \[server\] auth_token"):
            ServerConfig(clients=twice[:1], auth_token=ALICE)

    def test_a_missing_token_variable(self, tmp_path: Path) -> None:
        path = tmp_path / "agentik.toml"
        path.write_text('[[server.clients]]\nowner = "a"\ntoken_env = "NOPE"\n', encoding="utf-8")
        with pytest.raises(ConfigError, match=r"token_env names 'NOPE', which is not set"):
            load_config(path, env=ENV)

    async def test_the_cli_reports_without_the_secret(self, tmp_path: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")}
        env.update(PYTHONPATH=str(ROOT), AGENTIK_CLIENTS=f"alice:{ALICE} oops")
        done = await trio.run_process(
            [sys.executable, "-m", "agentik.cli", "serve"],
            cwd=tmp_path,
            env=env,
            capture_stderr=True,
            check=False,
        )
        assert done.returncode == 2
        assert b"AGENTIK_CLIENTS entry 1 (owner 'alice')" in done.stderr
        assert_clean("the CLI's error", done.stderr.decode())

    def test_reprs(self) -> None:
        """Configuration values and the model show no secret in repr or str."""
        config = load_config(None, env={**ENV, "AGENTIK_CLIENTS": f"alice:{ALICE}"})
        model = OpenAICompatibleModel("http://127.0.0.1:1/v1", "m", api_key=KEY)
        for value in (config, *config.clients, model, Redactor.for_credentials(KEY, {}, "")):
            assert_clean("a repr", repr(value) + str(value))
        assert isinstance(config, ServerConfig)


NO_RETRY = RetryPolicy(max_retries=0)
REQUEST = ModelRequest(messages=(Message(role=Role.USER, content="hi"),), tools=())


class TestModelErrors:
    """The model's own errors, for credentials a server never sees but a user sets."""

    async def test_a_key_with_a_newline(self, nursery: trio.Nursery) -> None:
        """A key read with its trailing newline makes httpx2 refuse the header and quote
        it; the error still does not show the key."""
        backend = EchoBackend()
        await backend.start(nursery)
        async with OpenAICompatibleModel(
            backend.url("echo"), "m", api_key=KEY + "\n", retry=NO_RETRY
        ) as model:
            with pytest.raises(ModelBackendError) as err:
                await model.complete(REQUEST)
        assert "Illegal header value" in str(err.value)
        assert KEY not in str(err.value)

    async def test_a_password_in_the_url_and_secret_headers(self, closed_port: int) -> None:
        """A password in base_url and an ``api-key`` header are masked too."""
        port = closed_port
        model = OpenAICompatibleModel(
            f"http://user:PLANTED-password@127.0.0.1:{port}/v1",
            "m",
            headers={"api-key": KEY},
            retry=NO_RETRY,
        )
        async with model:
            with pytest.raises(ModelBackendError) as whole:
                await model.complete(REQUEST)
            with pytest.raises(ModelBackendError) as streamed:
                async for _ in model.stream(REQUEST):
                    pass
        for message in (str(whole.value), str(streamed.value)):
            assert "could not reach http://***@127.0.0.1" in message
            assert "PLANTED-password" not in message and KEY not in message

    async def test_an_echoed_key_is_masked_in_the_answer(self, nursery: trio.Nursery) -> None:
        """A backend that puts the key in the model's text: the text has it masked,
        both as one JSON answer and as a stream."""
        backend = EchoBackend()
        await backend.start(nursery)
        async with OpenAICompatibleModel(backend.url("echo"), "m", api_key=KEY) as model:
            whole = await model.complete(REQUEST)
            pieces = [e async for e in model.stream(REQUEST)]
        streamed = json.dumps([repr(p) for p in pieces])
        assert whole.text is not None and "authorization: Bearer ***" in whole.text
        assert "Bearer ***" in streamed
        assert KEY not in whole.text + streamed

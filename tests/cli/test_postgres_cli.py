"""``agentik serve``, ``conversations`` and ``show`` on a PostgreSQL URL
(``--database postgresql://…`` or ``[storage] url``), against a real server
(tests/postgres.py), each test on a database of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from agentik import Message, Role
from agentik.cli import main
from agentik.storage import open_postgres_storage
from tests.cli.test_serve_smoke import ROOT, _read_lines
from tests.postgres import fresh_database


async def test_serve_on_postgres(postgres_dsn: str, tmp_path: Path) -> None:
    """A turn served by ``agentik serve --database postgresql://…`` is in the
    database after SIGTERM, in agentik's schema."""
    url = await trio.to_thread.run_sync(fresh_database, postgres_dsn)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")}
    env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, "-m", "agentik.cli", "serve", "--bind", "127.0.0.1:0"]
    process = await trio.lowlevel.open_process(
        [*command, "--database", url], stderr=subprocess.PIPE, cwd=tmp_path, env=env
    )
    lines: list[str] = []
    bound = trio.Event()
    async with trio.open_nursery() as nursery:
        assert process.stderr is not None
        nursery.start_soon(_read_lines, process.stderr, lines, bound)
        with trio.fail_after(60):
            await bound.wait()
        serving = next(line for line in lines if "serving url=" in line)
        assert "storage=postgresql://" in serving
        base = serving.split("url=")[1].split()[0]
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            turn = await client.post("/agentik/conversations/pg/turns", json={"text": "hi"})
            assert turn.json()["text"] == "You said: hi"
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await process.wait() == 0, "\n".join(lines)
    async with open_postgres_storage(url) as storage:
        history = [m async for m in storage.message_store.get_messages("pg")]
    assert [(m.role, m.content) for m in history] == [
        (Role.USER, "hi"),
        (Role.ASSISTANT, "You said: hi"),
    ]


async def test_conversations_and_show_read_postgres(
    postgres_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = await trio.to_thread.run_sync(fresh_database, postgres_dsn)
    async with open_postgres_storage(url) as storage:
        await storage.message_store.append("chat", Message(Role.USER, "hello postgres"))

    def inspect() -> tuple[int, int, int]:
        return (
            main(["conversations", "--database", url]),
            main(["show", "chat", "--database", url]),
            main(["show", "other", "--database", url]),
        )

    assert await trio.to_thread.run_sync(inspect) == (0, 0, 1)
    out = capsys.readouterr().out.splitlines()
    assert out == ["chat\t0 tokens", "#1 user: hello postgres"]


def test_storage_url_setting(tmp_path: Path) -> None:
    """``[storage] url`` is the database; with ``database`` too it is refused,
    and a URL that is not PostgreSQL's is refused without showing it."""
    from agentik._config import ConfigError, load_config

    config = tmp_path / "agentik.toml"
    config.write_text('[storage]\nurl = "postgresql://agentik@db/agentik"\n')
    assert load_config(config, env={}).database == "postgresql://agentik@db/agentik"
    config.write_text('[storage]\nurl = "postgresql://a@b/c"\ndatabase = "x.db"\n')
    with pytest.raises(ConfigError, match=r"^set one of \[storage\] database and \[storage\] url"):
        load_config(config, env={})
    config.write_text('[storage]\nurl = "mysql://user:pw@db/x"\n')
    with pytest.raises(ConfigError, match=r"^\[storage\] url must start with postgresql://") as e:
        load_config(config, env={})
    assert "pw" not in str(e.value)

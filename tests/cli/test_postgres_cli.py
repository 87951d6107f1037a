"""``agentik serve``, ``conversations`` and ``show`` on a PostgreSQL URL
(``--database postgresql://…`` or ``[storage] url``), against a real server
(tests/postgres.py), each test on a database of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx2
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
        assert "storage=postgresql:user=" in serving  # libpq's options, secrets as ***
        base = serving.split("url=")[1].split()[0]
        async with httpx2.AsyncClient(base_url=base, timeout=30) as client:
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
    from agentik.server import ConfigError, load_config

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


async def test_export_delete_import_on_postgres(
    postgres_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``agentik export``, ``delete`` and ``import`` take a postgresql:// URL
    as ``--database``: the round trip gives the conversation back."""
    url = await trio.to_thread.run_sync(fresh_database, postgres_dsn)
    async with open_postgres_storage(url) as storage:
        await storage.message_store.append("chat", Message(Role.USER, "hello postgres"))
        await storage.message_store.append("chat", Message(Role.ASSISTANT, "hi there"))
    archive = tmp_path / "chat.jsonl"

    def export() -> int:
        return main(["export", "chat", "--database", url])

    assert await trio.to_thread.run_sync(export) == 0
    archive.write_text(capsys.readouterr().out, encoding="utf-8")

    def delete_then_import() -> tuple[int, int, int, int]:
        return (
            main(["delete", "chat", "--database", url]),
            main(["delete", "chat", "--database", url]),
            main(["import", str(archive), "--database", url]),
            main(["import", str(archive), "--as", "copy", "--database", url]),
        )

    assert await trio.to_thread.run_sync(delete_then_import) == (0, 1, 0, 0)
    out, err = capsys.readouterr()
    assert "deleted conversation 'chat'" in out
    assert "conversation 'chat' not found" in err
    async with open_postgres_storage(url) as storage:
        for conversation_id in ("chat", "copy"):
            history = [m async for m in storage.message_store.get_messages(conversation_id)]
            assert [(m.seq, m.role, m.content) for m in history] == [
                (1, Role.USER, "hello postgres"),
                (2, Role.ASSISTANT, "hi there"),
            ]


async def test_delete_over_http_on_postgres(postgres_dsn: str) -> None:
    """``DELETE /agentik/conversations/{id}`` on a server whose database is a
    postgresql:// URL: 204, the conversation is gone, a second DELETE is 404,
    and the export of a live one is served."""
    import attrs

    from agentik import ModelResponse, ScriptedModel
    from agentik.server import ServerConfig, serve_agentik

    url = await trio.to_thread.run_sync(fresh_database, postgres_dsn)
    config = ServerConfig(port=0, database=url)
    config = attrs.evolve(config)
    stop = trio.Event()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            base = await nursery.start(
                lambda task_status: serve_agentik(
                    config,
                    model=ScriptedModel(lambda r: ModelResponse(text="ok")),
                    shutdown_trigger=stop.wait,
                    task_status=task_status,
                )
            )
            async with httpx2.AsyncClient(base_url=base, timeout=30) as client:
                for name in ("gone", "kept"):
                    turn = await client.post(
                        f"/agentik/conversations/{name}/turns", json={"text": "hi"}
                    )
                    assert turn.status_code == 200, turn.text
                deleted = await client.delete("/agentik/conversations/gone")
                again = await client.delete("/agentik/conversations/gone")
                exported = await client.get("/agentik/conversations/kept/export")
            stop.set()
    assert deleted.status_code == 204, deleted.text
    assert again.status_code == 404, again.text
    assert exported.status_code == 200, exported.text
    assert len(exported.text.splitlines()) == 3  # the header and two messages
    async with open_postgres_storage(url) as storage:
        assert await storage.message_store.list_conversations() == ["kept"]

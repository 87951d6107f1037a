"""``agentik export``, ``delete`` and ``import`` on a real SQLite file: a round
trip loses nothing; bad input is one line on stderr and changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from agentik.cli import main
from agentik.storage import open_sqlite_storage
from agentik.testing._lifecycle_contract import _everything_of, _fill


async def _filled(database: Path) -> tuple[object, ...]:
    async with open_sqlite_storage(database) as storage:
        await _fill(storage, "conv")
        await _fill(storage, "other")
        return await _everything_of(storage, "conv")


async def _state(database: Path, conversation_id: str) -> tuple[object, ...]:
    async with open_sqlite_storage(database) as storage:
        return await _everything_of(storage, conversation_id)


def test_export_delete_import_round_trip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "a.db"
    before = trio.run(_filled, database)
    other = trio.run(_state, database, "other")
    capsys.readouterr()
    assert main(["export", "conv", "-d", str(database)]) == 0
    archive = tmp_path / "conv.jsonl"
    archive.write_text(capsys.readouterr().out, encoding="utf-8")
    assert archive.read_text().startswith('{"type":"agentik.conversation","version":1,')
    assert main(["delete", "conv", "-d", str(database)]) == 0
    assert "deleted conversation 'conv'" in capsys.readouterr().out
    assert main(["delete", "conv", "-d", str(database)]) == 1
    assert "not found" in capsys.readouterr().err
    assert main(["import", str(archive), "-d", str(database)]) == 0
    assert "imported conversation 'conv': 6 messages" in capsys.readouterr().out
    assert trio.run(_state, database, "conv") == before
    assert trio.run(_state, database, "other") == other
    # Into a fresh database, under another id.
    fresh = tmp_path / "fresh.db"
    assert main(["import", str(archive), "-d", str(fresh), "--as", "copy"]) == 0
    assert trio.run(_state, fresh, "copy") == before


def test_import_refuses_bad_archives_and_taken_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "a.db"
    trio.run(_filled, database)
    assert main(["export", "conv", "-d", str(database)]) == 0
    good = capsys.readouterr().out
    taken = tmp_path / "taken.jsonl"
    taken.write_text(good, encoding="utf-8")
    assert main(["import", str(taken), "-d", str(database)]) == 1
    assert "already holds data" in capsys.readouterr().err
    cases = {
        "empty.jsonl": "",
        "noheader.jsonl": good.split("\n", 1)[1],
        "version.jsonl": good.replace('"version":1', '"version":2', 1),
        "garbage.jsonl": good + "not json\n",
        "kind.jsonl": good + '{"type":"summary","text":"x"}\n',
        "field.jsonl": good.replace('"idempotency_key":"k1"', '"idempotency_key":"k1","x":1', 1),
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        assert main(["import", str(path), "-d", str(database), "--as", "new"]) == 1, name
        err = capsys.readouterr().err
        assert err.startswith("agentik import: ") and err.count("\n") == 1, (name, err)
    assert trio.run(_state, database, "new")[0] == [], "a refused import stored messages"


def test_missing_database_and_conversation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", "x", "-d", str(tmp_path / "none.db")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()
    database = tmp_path / "a.db"
    trio.run(_filled, database)
    assert main(["export", "nope", "-d", str(database)]) == 1
    assert "not found" in capsys.readouterr().err

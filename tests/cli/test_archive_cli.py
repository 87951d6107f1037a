"""``agentik export``, ``delete`` and ``import`` on a real SQLite file: a round
trip loses nothing, the owner included; bad input is one line on stderr and
changes nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import trio

from agentik.cli import main
from agentik.storage import open_sqlite_storage
from agentik.testing._lifecycle_contract import _everything_of, _fill


async def _filled(database: Path, *conversations: str) -> tuple[object, ...]:
    async with open_sqlite_storage(database) as storage:
        for conversation_id in conversations:
            await _fill(storage, conversation_id)
        return await _everything_of(storage, conversations[0])


async def _state(database: Path, conversation_id: str) -> tuple[object, ...]:
    async with open_sqlite_storage(database) as storage:
        return await _everything_of(storage, conversation_id)


async def _ids(database: Path) -> list[str]:
    async with open_sqlite_storage(database) as storage:
        return await storage.message_store.list_conversations()


def test_export_delete_import_round_trip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "a.db"
    before = trio.run(_filled, database, "conv", "other")
    other = trio.run(_state, database, "other")
    capsys.readouterr()
    assert main(["export", "conv", "-d", str(database)]) == 0
    archive = tmp_path / "conv.jsonl"
    archive.write_text(capsys.readouterr().out, encoding="utf-8")
    assert archive.read_text().startswith(
        '{"type":"agentik.conversation","version":2,"conversation_id":"conv","owner":null}\n'
    )
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


def test_an_owners_export_is_imported_as_hers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The archive carries its owner; import restores it, unless --owner says
    otherwise ('' the default owner); a stored id is never typed by hand."""
    database = tmp_path / "a.db"
    before = trio.run(_filled, database, "alice\x1fconv")
    capsys.readouterr()
    assert main(["export", "conv", "--owner", "alice", "-d", str(database)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(
        '{"type":"agentik.conversation","version":2,"conversation_id":"conv","owner":"alice"}\n'
    )
    assert "\x1f" not in text
    archive = tmp_path / "conv.jsonl"
    archive.write_text(text, encoding="utf-8")
    fresh = tmp_path / "fresh.db"
    assert main(["import", str(archive), "-d", str(fresh)]) == 0
    assert "imported conversation 'conv' of owner 'alice': 6 messages" in capsys.readouterr().out
    assert trio.run(_ids, fresh) == ["alice\x1fconv"]
    assert trio.run(_state, fresh, "alice\x1fconv") == before
    assert main(["import", str(archive), "-d", str(fresh), "--owner", "bob"]) == 0
    assert main(["import", str(archive), "-d", str(fresh), "--owner", ""]) == 0
    assert trio.run(_ids, fresh) == ["alice\x1fconv", "bob\x1fconv", "conv"]
    assert main(["delete", "conv", "--owner", "bob", "-d", str(fresh)]) == 0
    assert "deleted conversation 'conv' of owner 'bob'" in capsys.readouterr().out
    assert trio.run(_ids, fresh) == ["alice\x1fconv", "conv"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["export", "alice\x1fconv"], "conversation id must be 1..200 printable .* --owner NAME"),
        (["delete", "a\nb"], "conversation id must be 1..200 printable"),
        (["export", "conv", "--owner", "bob\x1f"], "--owner must be 1..48"),
        (["delete", "conv", "--owner", "a b"], "--owner must be 1..48"),
        (["delete", "conv", "--token", "t"], "--token goes with --url"),
        (["delete", "conv", "--url", "http://x", "--owner", "a"], "drop --owner"),
    ],
)
def test_ids_and_owners_are_checked(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "a.db"
    trio.run(_filled, database, "conv")
    capsys.readouterr()
    assert main([*args, "-d", str(database)] if "--url" not in args else args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert re.search(message, err), err
    assert trio.run(_ids, database) == ["conv"]


def _line(kind: str, **fields: object) -> str:
    return json.dumps({"type": kind, **fields}) + "\n"


def _message(seq: int, role: str, **fields: object) -> str:
    message: dict[str, object] = {
        "role": role,
        "content": "x",
        "tool_calls": [],
        "tool_call_id": None,
        "usage": None,
        "seq": seq,
        "created_at": "2026-01-01T00:00:00+00:00",
    }
    message.update(fields)
    return _line("message", message=message, idempotency_key=None)


HEADER = '{"type":"agentik.conversation","version":2,"conversation_id":"new","owner":null}\n'
CALL = {"id": "a", "name": "t", "arguments": "{}"}
CALLED = HEADER + _message(1, "user") + _message(2, "assistant", tool_calls=[CALL])


def test_import_refuses_bad_archives_and_taken_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each is one line on stderr, and nothing is stored: what outside testers
    found imported on main (results without calls, two results for one call,
    a call id twice, a system message, coerced values, deep nesting, ids the
    API refuses), and the rest."""
    database = tmp_path / "a.db"
    trio.run(_filled, database, "conv")
    capsys.readouterr()
    assert main(["export", "conv", "-d", str(database)]) == 0
    good = capsys.readouterr().out
    taken = tmp_path / "taken.jsonl"
    taken.write_text(good, encoding="utf-8")
    assert main(["import", str(taken), "-d", str(database)]) == 1
    assert "already holds data" in capsys.readouterr().err
    cases = {
        "empty": "",
        "no header": good.split("\n", 1)[1],
        "version": good.replace('"version":2', '"version":3', 1),
        "garbage": good + "not json\n",
        "kind": good + '{"type":"summary","text":"x"}\n',
        "field": good.replace('"idempotency_key":"k1"', '"idempotency_key":"k1","x":1', 1),
        "no call": HEADER + _message(1, "user") + _message(2, "tool", tool_call_id="zz"),
        "two results": CALLED
        + _message(3, "tool", tool_call_id="a")
        + _message(4, "tool", tool_call_id="a"),
        "call id twice": HEADER
        + _message(1, "user")
        + _message(2, "assistant", tool_calls=[CALL, CALL]),
        "system": HEADER + _message(1, "system") + _message(2, "user"),
        "approved no": good.replace('"approved":null', '"approved":"no"', 1),
        "archived false": good.replace('"archived":true', '"archived":"false"', 1),
        "content list": good.replace('"content":"first"', '"content":["a","b"]', 1),
        "seq float": good.replace('"seq":1,', '"seq":1.9,', 1),
        "seq text": good.replace('"seq":1,', '"seq":"1",', 1),
        "seq true": good.replace('"seq":1,', '"seq":true,', 1),
        "negative tokens": good.replace('"prompt_tokens":5', '"prompt_tokens":-5', 1),
        "deep": HEADER + "[" * 200_000 + "]" * 200_000 + "\n",
        "deep unclosed": HEADER + '{"a":' * 100_000 + "\n",
        "nul id": HEADER.replace('"new"', '"a\\u0000b"'),
        "newline id": HEADER.replace('"new"', '"a\\nb"'),
        "huge id": HEADER.replace('"new"', json.dumps("x" * 1_000_000)),
        "bob's namespace": HEADER.replace('"new"', '"bob\\u001fnotes"'),
        "bad owner": HEADER.replace('"owner":null', '"owner":"bob\\u001f"'),
    }
    assert good.count('"approved":null') and good.count('"archived":true')
    for name, text in cases.items():
        path = tmp_path / "bad.jsonl"
        path.write_text(text, encoding="utf-8")
        args = ["import", str(path), "-d", str(database)]
        if name not in ("nul id", "newline id", "huge id", "bob's namespace"):
            args += ["--as", "new"]
        assert main(args) == 1, name
        err = capsys.readouterr().err
        assert err.startswith("agentik import: ") and err.count("\n") == 1, (name, err)
        assert "Traceback" not in err and len(err) < 1000, (name, err)
        assert trio.run(_ids, database) == ["conv"], f"{name}: a refused import stored messages"
    assert trio.run(_state, database, "new")[4] == [], "a refused import stored notes"


def test_missing_database_and_conversation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", "x", "-d", str(tmp_path / "none.db")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()
    database = tmp_path / "a.db"
    trio.run(_filled, database, "conv")
    assert main(["export", "nope", "-d", str(database)]) == 1
    assert "not found" in capsys.readouterr().err

"""``agentik export ID``, ``agentik delete ID`` and ``agentik import FILE``: a
conversation as a whole, on a SQLite file or a ``postgresql://`` URL.

Run them on a database no server has open: a server keeps conversations in
memory and would not see a delete or an import made beside it (over HTTP,
``DELETE /agentik/conversations/{id}`` goes through the server). Export and
delete refuse a database that does not exist; import creates one, so an
archive can move a conversation to a new machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentik._config import load_config
from agentik.cli._failures import CommandError, report, run_command
from agentik.storage import ConversationArchiver, ConversationDeleter
from agentik.storage._jsonl import ArchiveFormatError, header_line, read_archive, record_line
from agentik.storage._location import is_postgres_url, open_storage


def add_archive_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    def database(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--database",
            "-d",
            help="SQLite database path or postgresql:// URL (default: config, then ./agentik.db)",
        )

    export = commands.add_parser("export", help="write one conversation as JSON Lines to stdout")
    export.add_argument("conversation_id", metavar="ID", help="the conversation id, as stored")
    database(export)
    delete = commands.add_parser("delete", help="delete one conversation whole")
    delete.add_argument("conversation_id", metavar="ID", help="the conversation id, as stored")
    database(delete)
    load = commands.add_parser("import", help="store a conversation from an export file")
    load.add_argument("file", help="a file 'agentik export' wrote ('-': stdin)")
    load.add_argument("--as", dest="as_id", metavar="ID", help="store it under this id instead")
    database(load)


async def _export(database: str, conversation_id: str) -> int:
    async with open_storage(database) as storage:
        store = storage.message_store
        assert isinstance(store, ConversationArchiver)
        out = sys.stdout
        found = False
        async for record in store.export_conversation(conversation_id):
            if not found:
                out.write(header_line(conversation_id))
                found = True
            out.write(record_line(record, conversation_id))
    if not found:
        raise CommandError(f"conversation {conversation_id!r} not found")
    return 0


async def _delete(database: str, conversation_id: str) -> int:
    async with open_storage(database) as storage:
        store = storage.message_store
        assert isinstance(store, ConversationDeleter)
        if not await store.delete_conversation(conversation_id):
            raise CommandError(f"conversation {conversation_id!r} not found")
    print(f"deleted conversation {conversation_id!r}")
    return 0


async def _import(database: str, text: str, as_id: str | None) -> int:
    try:
        conversation_id, records = read_archive(text.splitlines())
    except ArchiveFormatError as error:
        raise CommandError(f"cannot read the archive: {error}") from None
    target = as_id or conversation_id
    async with open_storage(database) as storage:
        store = storage.message_store
        assert isinstance(store, ConversationArchiver)
        messages = await store.import_conversation(target, records)
    print(f"imported conversation {target!r}: {messages} messages")
    return 0


def run_archive(args: argparse.Namespace) -> int:
    database = args.database or load_config(None).database
    command = args.command
    if command != "import" and not is_postgres_url(database) and not Path(database).is_file():
        return report(command, f"database {database!r} does not exist")
    if command == "export":
        return run_command(command, _export, database, args.conversation_id)
    if command == "delete":
        return run_command(command, _delete, database, args.conversation_id)
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        return report(command, f"cannot read {args.file!r}: {error}")
    return run_command(command, _import, database, text, args.as_id)

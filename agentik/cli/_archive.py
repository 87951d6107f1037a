"""``agentik export ID``, ``agentik delete ID`` and ``agentik import FILE``: a
conversation as a whole, on a SQLite file or a ``postgresql://`` URL.

Ids are the ones clients use, checked as the API checks them; ``--owner``
names the owner whose conversation it is (its stored id is owner-scoped,
``agentik._scope``), and an export carries its owner, which an import
restores (``--owner`` and ``--as`` put it elsewhere).

Delete and import refuse, in one line naming the server, while a server uses
the database (``storage._in_use``): a server keeps conversations in memory
and would go on with what it holds. ``agentik delete --url`` deletes through
the running server instead. Export only reads, so it runs beside a server
(a turn under way may or may not be in it). Export and delete refuse a
database that does not exist; import creates one, so an archive can move a
conversation to a new machine. Whatever is refused changes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from urllib.parse import quote

from agentik._input import InputError, checked_id
from agentik._scope import checked_owner, stored_id
from agentik.cli._failures import CommandError, report, run_command
from agentik.storage import (
    ArchiveFormatError,
    exclusive_use,
    header_line,
    is_postgres_url,
    open_storage,
    read_archive,
    record_line,
    split_lines,
)


def add_archive_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    def database(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--database",
            "-d",
            help="SQLite database path or postgresql:// URL (default: config, then ./agentik.db)",
        )

    def owner(parser: argparse.ArgumentParser, help: str) -> None:
        parser.add_argument("--owner", metavar="NAME", help=help)

    export = commands.add_parser("export", help="write one conversation as JSON Lines to stdout")
    export.add_argument("conversation_id", metavar="ID", help="the conversation id clients use")
    owner(export, "the owner whose conversation it is (default: the default owner)")
    database(export)
    delete = commands.add_parser("delete", help="delete one conversation whole")
    delete.add_argument("conversation_id", metavar="ID", help="the conversation id clients use")
    owner(delete, "the owner whose conversation it is (default: the default owner)")
    database(delete)
    delete.add_argument(
        "--url", help="delete through the server running at this base URL (its owner: the token's)"
    )
    delete.add_argument("--token", help="bearer token for --url (default: $AGENTIK_AUTH_TOKEN)")
    load = commands.add_parser("import", help="store a conversation from an export file")
    load.add_argument("file", help="a file 'agentik export' wrote ('-': stdin)")
    load.add_argument("--as", dest="as_id", metavar="ID", help="store it under this id instead")
    owner(load, "store it as this owner's ('' the default owner; default: the archive's owner)")
    database(load)


def _target(conversation_id: str, owner: str | None) -> str:
    """The stored id, or ``CommandError`` naming what is wrong with the id or owner."""
    try:
        checked_id(conversation_id)
        if owner is not None:
            checked_owner(owner, "--owner")
    except InputError as error:
        hint = ""
        if "\x1f" in conversation_id:
            hint = " (an owner's conversation: give its own id and --owner NAME)"
        raise CommandError(f"{error}{hint}") from None
    return stored_id(owner, conversation_id)


def _whose(conversation_id: str, owner: str | None) -> str:
    return repr(conversation_id) + ("" if owner is None else f" of owner {owner!r}")


async def _export(database: str, conversation_id: str, owner: str | None) -> int:
    target = _target(conversation_id, owner)
    async with open_storage(database) as storage:
        store = storage.message_store
        out = sys.stdout
        found = False
        async for record in store.export_conversation(target):
            if not found:
                out.write(header_line(conversation_id, owner))
                found = True
            out.write(record_line(record, conversation_id))
    if not found:
        raise CommandError(f"conversation {_whose(conversation_id, owner)} not found")
    return 0


async def _delete(database: str, conversation_id: str, owner: str | None) -> int:
    target = _target(conversation_id, owner)
    async with exclusive_use(database, "delete"), open_storage(database) as storage:
        store = storage.message_store
        if not await store.delete_conversation(target):
            raise CommandError(f"conversation {_whose(conversation_id, owner)} not found")
    print(f"deleted conversation {_whose(conversation_id, owner)}")
    return 0


async def _delete_through(url: str, conversation_id: str, token: str | None) -> int:
    """``DELETE /agentik/conversations/{id}`` on the running server: it
    deletes through the conversation's queue, after any turn under way."""
    import httpx2

    from agentik._probe import ServerCheckError, check_server, refused_token

    try:
        checked_id(conversation_id)
    except InputError as error:
        raise CommandError(str(error)) from None
    headers = {} if not token else {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(
        base_url=url, headers=headers, timeout=30.0, follow_redirects=True
    ) as client:
        await check_server(client, url)
        try:
            reply = await client.delete(f"/agentik/conversations/{quote(conversation_id, safe='')}")
        except httpx2.HTTPError as error:
            raise ServerCheckError(f"cannot reach {url}: {error}") from error
    if reply.status_code == 401:
        raise refused_token(url)
    if reply.status_code == 404:
        raise CommandError(f"conversation {conversation_id!r} not found at {url}")
    if reply.status_code != 204:
        raise CommandError(f"{url} answered HTTP {reply.status_code}: {reply.text[:200]}")
    print(f"deleted conversation {conversation_id!r} through {url}")
    return 0


async def _import(database: str, data: bytes, as_id: str | None, owner: str | None) -> int:
    try:
        archive = read_archive(split_lines(data))
    except ArchiveFormatError as error:
        raise CommandError(f"cannot read the archive: {error}") from None
    conversation_id = archive.conversation_id if as_id is None else as_id
    if owner is None:
        owner = archive.owner
    elif owner == "":
        owner = None  # --owner '': the default owner's
    target = _target(conversation_id, owner)
    async with exclusive_use(database, "import"), open_storage(database) as storage:
        store = storage.message_store
        messages = await store.import_conversation(target, archive.records)
    print(f"imported conversation {_whose(conversation_id, owner)}: {messages} messages")
    return 0


def run_archive(args: argparse.Namespace) -> int:
    command = args.command
    if command == "delete" and args.url:
        if args.owner is not None or args.database is not None:
            return report(command, "--url deletes through the server: drop --owner and --database")
        token = args.token or os.environ.get("AGENTIK_AUTH_TOKEN")
        return run_command(command, _delete_through, args.url, args.conversation_id, token)
    if command == "delete" and args.token is not None:
        return report(command, "--token goes with --url")
    database = args.database
    if not database:  # from the configuration: the server package, loaded only here
        from agentik.server import load_config

        database = load_config(None).database
    if command != "import" and not is_postgres_url(database) and not Path(database).is_file():
        return report(command, f"database {database!r} does not exist")
    if command == "export":
        return run_command(command, _export, database, args.conversation_id, args.owner)
    if command == "delete":
        return run_command(command, _delete, database, args.conversation_id, args.owner)
    try:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as error:
        return report(command, f"cannot read {args.file!r}: {error}")
    return run_command(command, _import, database, data, args.as_id, args.owner)

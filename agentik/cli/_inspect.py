"""``agentik conversations`` and ``agentik show ID``: read a database, change nothing.

``conversations`` lists at most ``--limit`` (a positive integer) and says on
stderr when there are more. A reader that goes away (``| head -1``) ends the
listing quietly (``_failures.stdout_gone``).

A database path that does not exist is an error rather than a new empty
database, so a typo cannot create files; one that cannot be opened (not a
database, damaged, a PostgreSQL server that cannot be reached) is one line on
stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import apsw

from agentik._messages import Message
from agentik.cli._failures import CommandError, report, run_command
from agentik.storage import is_postgres_url, open_storage


def format_message(message: Message) -> str:
    head = f"#{message.seq} {message.role.value}"
    if message.tool_call_id is not None:
        head += f" (answers {message.tool_call_id})"
    lines = [f"{head}: {message.content}" if message.content else head + ":"]
    for call in message.tool_calls:
        lines.append(f"    call {call.id}: {call.name}({call.arguments})")
    return "\n".join(lines)


async def _list(database: str, limit: int) -> int:
    async with open_storage(database) as storage:
        store = storage.message_store
        after: str | None = None
        shown = 0
        while shown < limit:
            page = await store.list_conversations(after=after, limit=min(100, limit - shown))
            if not page:
                break
            for conversation_id in page:
                stats = await store.token_stats(conversation_id)
                print(f"{conversation_id}\t{stats.total_tokens} tokens")
            shown += len(page)
            after = page[-1]
        # Say so when the limit cut the list short (on stderr: stdout stays the list).
        if shown == limit and await store.list_conversations(after=after, limit=1):
            report("conversations", f"{limit} listed; there are more (raise --limit to see them)")
    return 0


async def _show(database: str, conversation_id: str) -> int:
    async with open_storage(database) as storage:
        found = False
        async for message in storage.message_store.get_messages(conversation_id):
            found = True
            print(format_message(message))
    if not found:
        print(f"agentik show: conversation {conversation_id!r} not found", file=sys.stderr)
        return 1
    return 0


async def _reading(database: str, read: Callable[[], Awaitable[int]]) -> int:
    """``read()``; a SQLite file that opened but fails while it is read (a
    damaged page: ``CorruptError``) is one line naming the database."""
    try:
        return await read()
    except apsw.Error as error:
        raise CommandError(
            f"cannot read the database {database!r}: {type(error).__name__}: {error}"
        ) from error


def run_inspect(args: argparse.Namespace) -> int:
    database = args.database
    if not database:  # from the configuration: the server package, loaded only here
        from agentik.server import load_config

        database = load_config(None).database
    if not is_postgres_url(database) and not Path(database).is_file():
        return report(args.command, f"database {database!r} does not exist")
    if args.command == "conversations":
        return run_command(args.command, _reading, database, lambda: _list(database, args.limit))
    return run_command(
        args.command, _reading, database, lambda: _show(database, args.conversation_id)
    )

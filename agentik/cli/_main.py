"""The ``agentik`` command: argument parsing and dispatch to one subcommand.

Each subcommand imports what it needs only when it runs, so ``--version`` and
``--help`` stay instant. One event loop (``trio.run``) is entered here, at the
CLI edge, and nowhere else. Exit codes: 0 success, 1 runtime failure, 2 usage
or configuration error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

import agentik


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors in the one format of every CLI error:
    ``agentik COMMAND: message`` (argparse's own says ``COMMAND: error: …``).
    Subcommand parsers are made of the same class, so they say it too."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: {message}\n")


def _positive_int(text: str) -> int:
    # ASCII digits only: int() also reads " 7 ", "1_0" and "٣"
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return int(text)


def _add_database(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database",
        "-d",
        help="SQLite database path or postgresql:// URL (default: config, then ./agentik.db)",
    )


def build_parser() -> argparse.ArgumentParser:
    return _build()[0]


def _build() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser, and each command's own (for errors that name the command)."""
    parser: argparse.ArgumentParser = _Parser(
        prog="agentik",
        description="An LLM agent runtime on trio: serve, chat, inspect, export, bench.",
    )
    parser.add_argument("--version", action="version", version=f"agentik {agentik.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the HTTP server (native API, AG-UI, A2A)")
    serve.add_argument("--config", "-c", help="TOML config file (default: ./agentik.toml if any)")
    serve.add_argument("--bind", "-b", help="host:port to listen on (default 127.0.0.1:8080)")
    _add_database(serve)
    serve.add_argument("--model-base-url", help="OpenAI-compatible base URL ending in /v1")
    serve.add_argument("--model", help="model name at that backend")
    serve.add_argument("--system-prompt", help="system prompt text")
    serve.add_argument(
        "--gc-freeze",
        action="store_true",
        default=None,
        help="freeze start-up objects out of the garbage collector (faster under load)",
    )
    serve.add_argument(
        "--toolset",
        action="append",
        dest="toolsets",
        metavar="MODULE:ATTR",
        help="a toolset entry point (repeatable; replaces the configured list)",
    )
    serve.add_argument(
        "--tool",
        action="append",
        dest="tools",
        metavar="MODULE:ATTR",
        help="a core tool entry point, always offered (repeatable; replaces the configured list)",
    )

    chat = commands.add_parser("chat", help="interactive chat, streaming the answers")
    chat.add_argument("--url", help="a running server's base URL; without it, chat in-process")
    chat.add_argument("--token", help="bearer token for --url (default: $AGENTIK_AUTH_TOKEN)")
    chat.add_argument("--conversation", default="cli", help="conversation id (default: cli)")
    chat.add_argument("--config", "-c", help="config file for the in-process agent")
    _add_database(chat)

    conversations = commands.add_parser("conversations", help="list a database's conversations")
    _add_database(conversations)
    conversations.add_argument(
        "--limit",
        type=_positive_int,
        default=100,
        help="list at most this many (default: 100; a note on stderr says when there are more)",
    )

    show = commands.add_parser("show", help="print one conversation's messages")
    show.add_argument("conversation_id", metavar="ID", help="the conversation id, as stored")
    _add_database(show)

    from agentik.cli._archive import add_archive_parsers

    add_archive_parsers(commands)

    commands.add_parser("demo", help="a short scripted conversation on a temporary database")

    from agentik.cli._mcp import add_mcp_parser

    add_mcp_parser(commands)

    from agentik.cli._bench import add_bench_parser

    add_bench_parser(commands)
    return parser, commands.choices


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the process exit code."""
    parser, commands = _build()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # argparse names no command for these; the command's parser does
        commands.get(args.command, parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    from agentik._errors import ConfigError
    from agentik.cli._failures import report, stdout_gone

    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code = _run(args)
        sys.stdout.flush()  # inside the try: a reader gone (``| head``) fails here
    except BrokenPipeError:
        return stdout_gone()
    except ConfigError as error:
        return report(command_name(args), str(error), code=2)
    return code


def command_name(args: argparse.Namespace) -> str:
    """The command as typed (``serve``, ``mcp login``), for error lines."""
    sub = getattr(args, "mcp_command", None)
    return f"{args.command} {sub}" if args.command == "mcp" and sub else str(args.command)


def _run(args: argparse.Namespace) -> int:
    if args.command == "serve":
        from agentik.cli._serve import run_serve

        return run_serve(args)
    if args.command == "chat":
        from agentik.cli._chat import run_chat

        return run_chat(args)
    if args.command in ("conversations", "show"):
        from agentik.cli._inspect import run_inspect

        return run_inspect(args)
    if args.command in ("export", "delete", "import"):
        from agentik.cli._archive import run_archive

        return run_archive(args)
    if args.command == "bench":
        from agentik.cli._bench import run_bench_command

        return run_bench_command(args)
    if args.command == "mcp":
        from agentik.cli._mcp import run_mcp

        return run_mcp(args)
    from agentik.cli._demo import run_demo

    return run_demo()

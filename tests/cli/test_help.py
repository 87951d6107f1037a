"""Every command and every argument of ``agentik`` says what it is for."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from agentik.cli._main import build_parser


def parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from parsers(sub)


def test_every_argument_has_help() -> None:
    missing = [
        f"{parser.prog}: {action.option_strings or action.dest}"
        for parser in parsers(build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction)
        and (not action.help or action.help == argparse.SUPPRESS)
    ]
    assert missing == []


def test_every_command_has_help() -> None:
    top = build_parser()
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    described = {choice.dest: choice.help for choice in commands._choices_actions}
    assert set(described) == set(commands.choices)
    assert all(described.values()), described


def test_help_and_the_database_commands_do_not_load_the_server(tmp_path: Path) -> None:
    """``--help`` builds every command's parser, and ``conversations -d`` runs
    (``main`` catches the server's ``ConfigError`` around every command); none
    of it pays for Starlette and the server package, where the configuration
    lives: only a command that reads the configuration loads it."""
    code = (
        "import sys\n"
        "from agentik.cli._main import build_parser, main\n"
        "build_parser()\n"
        "code = main(['conversations', '--database', 'absent.db'])\n"
        "heavy = sorted(m for m in ('starlette', 'agentik.server') if m in sys.modules)\n"
        "print(code, heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert out.stdout.strip() == "1 []", out.stdout + out.stderr
    assert "does not exist" in out.stderr

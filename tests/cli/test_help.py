"""Every command and every argument of ``agentik`` says what it is for."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

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

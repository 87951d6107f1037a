"""The exception tree drawn in ``agentik._errors``'s docstring is the truth:
every public exception is an ``AgentikError`` and has its line there, under
its real parent, with the package it imports from."""

from __future__ import annotations

import importlib
import re

import attrs
import pytest

import agentik._errors
from agentik import AgentikError
from tests.api.snapshot import public_modules

ENTRY = re.compile(r"^    (?P<lead>(?:│   |    )*)(?:├── |└── )(?P<name>\w+)\s*(?P<text>.*)$")
HOME = re.compile(r"^\[(?P<home>[\w.]+)\]")


@attrs.frozen
class Entry:
    name: str
    parent: str | None
    home: str
    text: str


def drawn_tree() -> dict[str, Entry]:
    """The entries of the docstring's tree, by name."""
    lines = (agentik._errors.__doc__ or "").splitlines()
    start = lines.index("    AgentikError")
    entries = {"AgentikError": Entry(name="AgentikError", parent=None, home="agentik", text="")}
    path = ["AgentikError"]
    last = "AgentikError"
    for line in lines[start + 1 :]:
        if not line.startswith("    "):
            break
        match = ENTRY.match(line)
        if match is None:  # a continuation of the last entry's text
            extra = line.replace("│", " ").strip()
            entries[last] = attrs.evolve(entries[last], text=f"{entries[last].text} {extra}")
            continue
        depth = len(match["lead"]) // 4 + 1
        del path[depth:]
        name, text = match["name"], match["text"]
        home = HOME.match(text)
        assert name not in entries, f"{name} is drawn twice"
        entries[name] = Entry(
            name=name,
            parent=path[depth - 1],
            home=f"agentik.{home['home']}" if home else "agentik",
            text=text,
        )
        path.append(name)
        last = name
    return entries


def public_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in public_modules():
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, BaseException):
                assert found.setdefault(name, value) is value, f"two public classes named {name}"
    return found


PUBLIC = public_exceptions()
TREE = drawn_tree()


def test_the_tree_is_found_and_has_the_known_errors() -> None:
    """The parser reads the docstring (a tree it cannot read would pass vacuously)."""
    assert {"StoreError", "StoreClosedError", "ConfigError", "McpConfigError"} <= set(TREE)
    assert TREE["StoreClosedError"].parent == "StoreError"
    assert TREE["StoreClosedError"].home == "agentik.storage"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_exception_is_an_agentik_error(name: str) -> None:
    """One root: ``except AgentikError`` catches everything agentik raises on purpose."""
    assert issubclass(PUBLIC[name], AgentikError), f"{name} does not derive from AgentikError"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_exception_is_drawn_under_its_parent(name: str) -> None:
    cls = PUBLIC[name]
    assert name in TREE, f"{name} is public but missing from the tree in agentik/_errors.py"
    entry = TREE[name]
    if cls is AgentikError:
        return
    parent = next((base for base in cls.__bases__ if issubclass(base, AgentikError)), None)
    assert parent is not None, f"{name} does not derive from AgentikError"
    assert entry.parent == parent.__name__, f"{name} is drawn under {entry.parent}"
    for base in cls.__bases__:  # a second base (ValueError ...) keeps old except clauses
        if not issubclass(base, AgentikError):
            said = re.search(rf"also an? {base.__name__}\b", entry.text)
            assert said, f"{name}: say it is also a {base.__name__}"


@pytest.mark.parametrize("name", sorted(set(TREE) - {"AgentikError"}))
def test_every_drawn_error_is_public_where_the_tree_says(name: str) -> None:
    """No stale line: each drawn class imports from the package its bracket names."""
    home = importlib.import_module(TREE[name].home)
    assert name in home.__all__, f"{name} is drawn as [{TREE[name].home}] but not exported there"
    assert name in PUBLIC

"""The public surface, pinned: each public module's ``__all__`` against the
checked-in snapshot, and what every exported name must be."""

from __future__ import annotations

import difflib
import inspect
from types import ModuleType

import pytest

import agentik
from tests.api.snapshot import SNAPSHOT, public_module_names, public_modules, render

MODULES = public_modules()
HOMES = {module.__name__: module for module in MODULES}

# Names whose object reports a module outside agentik, on purpose. Type aliases
# (a union, a Callable, a Literal) report the module of their constructor.
NOT_OURS = {
    ("agentik.agent", "ElicitationAction"): "type alias (Literal)",
    ("agentik.agent", "TurnEvent"): "type alias (union of the stream events)",
    ("agentik.agent", "ImageDescriber"): "type alias (Callable)",
    ("agentik.models", "PartKind"): "type alias (Literal)",
    ("agentik.models", "ModelStreamEvent"): "type alias (union)",
    ("agentik.server.http", "ASGIApp"): "type alias (Callable): ASGI's application",
    ("agentik.server.http", "Message"): "type alias (MutableMapping): an ASGI event",
    ("agentik.server.http", "Receive"): "type alias (Callable): ASGI's receive",
    ("agentik.server.http", "Scope"): "type alias (MutableMapping): an ASGI scope",
    ("agentik.server.http", "Send"): "type alias (Callable): ASGI's send",
    ("agentik.models", "Responder"): "type alias (Callable)",
    ("agentik.storage", "ArchiveRecord"): "type alias (union of the archive records)",
    ("agentik.storage", "Clock"): "type alias (Callable)",
    ("agentik.storage", "Synchronous"): "type alias (Literal)",
    ("agentik.testing", "MakeBundle"): "type alias (Callable)",
    ("agentik.toolsets", "ToolHandler"): "type alias (Callable)",
}


def test_every_public_module_matches_the_snapshot() -> None:
    """A name added to or dropped from any public ``__all__`` shows here."""
    expected, actual = SNAPSHOT.read_text(), render()
    diff = "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            str(SNAPSHOT),
            "public API now",
        )
    )
    assert actual == expected, (
        "the public API changed. If that is on purpose (names are a contract: "
        "add, never rename), update the snapshot with `python -m tests.api.snapshot` "
        f"and commit it with the change:\n{diff}"
    )


def test_the_snapshot_knows_the_expected_modules() -> None:
    """The walk that finds public modules finds the packages a user imports."""
    assert {
        "agentik",
        "agentik.agent",
        "agentik.benchmark",
        "agentik.cli",
        "agentik.mcp",
        "agentik.models",
        "agentik.server",
        "agentik.storage",
        "agentik.testing",
        "agentik.toolsets",
    } <= set(public_module_names())


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_all_is_defined_without_duplicates(module: ModuleType) -> None:
    names = module.__all__
    assert isinstance(names, list)
    duplicates = sorted({name for name in names if names.count(name) > 1})
    assert not duplicates, f"{module.__name__}.__all__ lists {duplicates} twice"
    missing = [name for name in names if not hasattr(module, name)]
    assert not missing, f"{module.__name__}.__all__ lists {missing}, which it does not define"


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_no_third_party_object_is_re_exported(module: ModuleType) -> None:
    """A public name is agentik's own: re-exporting a library's object would
    make its API ours to keep (list the exceptions in NOT_OURS)."""
    foreign = {}
    for name in module.__all__:
        owner = getattr(getattr(module, name), "__module__", None)
        if not isinstance(owner, str) or owner == "agentik" or owner.startswith("agentik."):
            continue
        if (module.__name__, name) not in NOT_OURS:
            foreign[name] = owner
    assert not foreign, f"{module.__name__} re-exports objects of other modules: {foreign}"


def test_the_allowed_foreign_names_are_still_exported() -> None:
    """NOT_OURS lists only names that are public and still foreign."""
    for module_name, name in NOT_OURS:
        module = HOMES[module_name]
        assert name in module.__all__, (module_name, name)
        assert not getattr(module, name).__module__.startswith("agentik"), (module_name, name)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_exported_classes_and_functions_report_a_public_module(module: ModuleType) -> None:
    """``agentik.storage.ArchivedMessage``, not ``agentik.storage._archive.…``:
    in reprs, tracebacks and pickles, and pickle finds it there again."""
    private = {}
    for name in module.__all__:
        value = getattr(module, name)
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        owner = value.__module__
        if not owner.startswith("agentik"):
            continue
        home = HOMES.get(owner)  # a public module, or None
        if home is None:
            private[name] = owner
        elif getattr(home, value.__qualname__, None) is not value:
            private[name] = f"{owner} has no {value.__qualname__}"
    assert not private, f"{module.__name__}: {private}"


def test_dir_lists_only_the_public_names() -> None:
    """``dir(agentik)`` is ``__all__`` and dunders: no submodule, no helper,
    and no deprecated name."""
    extra = {name for name in dir(agentik) if not name.startswith("__")} - set(agentik.__all__)
    assert not extra
    assert set(agentik.__all__) <= set(dir(agentik))


def test_the_core_stays_small() -> None:
    """About forty names: DESIGN.md's, the error bases and the version (and
    the three content parts DESIGN.md added, and the two of remote A2A agents
    issue 34 asks the core for)."""
    assert len(agentik.__all__) <= 50, len(agentik.__all__)

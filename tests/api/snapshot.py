"""The public API as text: every public module's ``__all__``, one name a line.

``tests/api/public_api.txt`` is the checked-in copy that
``test_public_api.py`` compares against. After changing the public API on
purpose, rewrite it and review the diff:

    python -m tests.api.snapshot
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

import agentik

SNAPSHOT = Path(__file__).with_name("public_api.txt")


def public_module_names() -> list[str]:
    """``agentik`` and every module under it with no ``_`` part in its path."""
    found = ["agentik"]
    for info in pkgutil.walk_packages(agentik.__path__, "agentik."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            found.append(info.name)
    return sorted(found)


def public_modules() -> list[ModuleType]:
    return [importlib.import_module(name) for name in public_module_names()]


def render() -> str:
    lines = []
    for module in public_modules():
        names = getattr(module, "__all__", None)
        lines.append(f"[{module.__name__}]" + ("" if names is not None else "  no __all__"))
        lines.extend(f"    {name}" for name in sorted(names or ()))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    SNAPSHOT.write_text(render())
    print(f"wrote {SNAPSHOT}")

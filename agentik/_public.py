"""Exported names report the public module: ``agentik.Message``, not
``agentik._messages.Message``, in class reprs, tracebacks, pickles and
generated docs, as trio and httpx do.

Each public package publishes its ``__all__`` as its ``__init__`` finishes,
lower layers first and ``agentik`` last: a name takes the module of the
package that defines it (``agentik.storage.ArchivedMessage``), or, for a value
of a private root module (``agentik._errors``), of the first package that
exports it; ``agentik`` then claims its own core names. A name another public
module already reports is left alone.

``typing.get_type_hints`` (and so attrs and cattrs) evaluates a class's string
annotations (``from __future__ import annotations``) in the globals of the
module ``__module__`` names. Before it is changed, each annotation is
evaluated where it was written and stored evaluated; one that names something
imported only for type checkers stays a string, as unresolvable as before.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterable, Mapping


def publish(namespace: Mapping[str, object], names: Iterable[str], module: str) -> None:
    """Make each class and function among ``names`` that agentik defines report
    ``module`` as its module."""
    for name in names:
        value = namespace.get(name)
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        if not (value.__module__.startswith(f"{module}.") or _private(value.__module__)):
            continue  # not ours, or already published
        if inspect.isclass(value):
            _evaluate_annotations(value)
        value.__module__ = module


def _private(module: str) -> bool:
    """An agentik module not meant to be imported: ``agentik._x`` or ``agentik.x._y``."""
    parts = module.split(".")
    return parts[0] == "agentik" and any(part.startswith("_") for part in parts[1:])


def _evaluate_annotations(cls: type) -> None:
    own = inspect.get_annotations(cls)  # this class's own, unevaluated
    if not any(isinstance(annotation, str) for annotation in own.values()):
        return
    defining, local = vars(sys.modules[cls.__module__]), dict(vars(cls))
    for key, annotation in own.items():
        if isinstance(annotation, str):
            # a name imported only for type checkers stays a string
            with contextlib.suppress(NameError):
                own[key] = eval(annotation, defining, local)
    cls.__annotations__ = own

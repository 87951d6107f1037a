"""Exported names report the public module: ``agentik.Message``, not
``agentik._messages.Message``, in class reprs, tracebacks, pickles and
generated docs, as trio and httpx do.

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
        if not value.__module__.startswith(f"{module}."):
            continue  # not ours, or already published
        if inspect.isclass(value):
            _evaluate_annotations(value)
        value.__module__ = module


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

"""Exception groups: the one place agentik takes them apart.

A trio nursery wraps whatever its body and its tasks raise in a
``BaseExceptionGroup`` (strict exception groups). Where a nursery is an
implementation detail of an async context manager (``open_sqlite_storage``,
``open_postgres_storage``, ``open_chat_agent``), its tasks never raise, so a
group of one is the body's own error: ``raise_lone_error`` hands it out as
itself, as if there were no nursery there. It unwraps that one level only: a
group the body raised itself (its own nursery's) comes out as the body raised
it. A group of several stays the group: hiding one error would lose the others.

``innermost`` and ``leaves`` read a group for a person: the error behind a
chain of one-member groups (the SDKs' task groups nest them), and every leaf.

Cancellation and ``KeyboardInterrupt`` get no special case: a lone one is
raised as itself, as the body raised it, and trio goes on handling it.
``beside`` names members that do not count (a turn's tool tasks raise nothing
but ``Cancelled``), so the one error left beside them is still the body's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

ExceptionTypes = type[BaseException] | tuple[type[BaseException], ...]


def lone_error(
    group: BaseExceptionGroup[BaseException], *, beside: ExceptionTypes = ()
) -> BaseException | None:
    """The one member of ``group`` once members that are ``beside`` are set
    aside (a member itself, not its leaves: one level); None when none or
    several are left."""
    rest: BaseExceptionGroup[BaseException] | None = group
    if beside != ():
        rest = group.split(beside)[1]
    if rest is None or len(rest.exceptions) != 1:
        return None
    return rest.exceptions[0]


@contextmanager
def raise_lone_error(*, beside: ExceptionTypes = ()) -> Iterator[None]:
    """Around a nursery that is an implementation detail: a group of one error
    (``lone_error``) is raised as that error; any other group as it came."""
    try:
        yield
    except BaseExceptionGroup as group:
        error = lone_error(group, beside=beside)
        if error is None:
            raise
        raise error from None


def innermost(error: BaseException) -> BaseException:
    """``error`` with every enclosing one-member group taken off; a group of
    several (or none) is returned as it is."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def leaves(error: BaseException) -> Iterator[BaseException]:
    """The exceptions in ``error`` that are not groups, depth first, in order;
    ``error`` itself if it is not a group."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from leaves(inner)
    else:
        yield error

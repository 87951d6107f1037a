"""What the store contract's cases share: their type, text that is hard to
store, and the checks most of them make."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from agentik.storage import Storage

Case = Callable[[Storage], Awaitable[None]]
"""One case: drives a fresh bundle and raises ``AssertionError`` naming what broke."""

UNICODE = "héllo ✓ 中文 עברית 🦜\u200d\x00 end"
MEGABYTE = "ü" * (1 << 19) + "x" * (1 << 19)  # 1 MiB of characters, 1.5 MiB of UTF-8


@contextmanager
def raises(kind: type[BaseException], what: str) -> Iterator[None]:
    try:
        yield
    except kind:
        return
    raise AssertionError(f"{what}: expected {kind.__name__}, nothing was raised")


def is_utc(value: datetime | None) -> bool:
    return value is not None and value.utcoffset() == timedelta(0)

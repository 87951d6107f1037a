"""The garbage collector's first threshold while an agent is open.

Why: CPython (3.11, 3.12) runs a young collection every 700 net container
allocations, and after ten of those an older one; whenever the objects
allocated since the last full collection exceed a quarter of the long-lived
ones, a full collection walks every live object, every cached history of
every live conversation included. A turn allocates a few hundred container
objects, so with 10,000 live conversations the collector ran 31 full
collections in a 50,000-turn run and took more than half the time
(``bench/turns.py``, docs/performance.md). With the first threshold at 10,000
the same run makes 2.

Why it is safe: thresholds decide *when* the collector looks for cyclic
garbage, never *whether*; reference counting still frees everything else at
once. At most 10,000 more young objects wait for the next collection (a few
MiB at most). ``gc.freeze()`` would also help, but it keeps whatever garbage is
pending at that moment for ever, so agentik leaves it to the operator
(``agentik serve --gc-freeze``).

Rules: the thresholds are changed only while they are CPython's defaults, so
an application that tuned its own keeps them; they are restored when the last
open agent closes, unless someone changed them meanwhile.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

DEFAULT_THRESHOLDS = (700, 10, 10)
"""CPython's defaults (3.8 to 3.12)."""

RELAXED_THRESHOLDS = (10_000, 10, 10)
"""While an agent is open (measured: docs/performance.md, "Turns")."""

_lock = threading.Lock()
_holders = 0
"""Open agents that relaxed the thresholds (or found them relaxed by another)."""


@contextmanager
def relaxed_gc(enabled: bool = True) -> Iterator[None]:
    """Raise the collector's first threshold for the duration, if it is the default."""
    global _holders
    if not enabled:
        yield
        return
    with _lock:
        held = _holders > 0 or gc.get_threshold() == DEFAULT_THRESHOLDS
        if held:
            if _holders == 0:
                gc.set_threshold(*RELAXED_THRESHOLDS)
            _holders += 1
    try:
        yield
    finally:
        if held:
            with _lock:
                _holders -= 1
                if _holders == 0 and gc.get_threshold() == RELAXED_THRESHOLDS:
                    gc.set_threshold(*DEFAULT_THRESHOLDS)

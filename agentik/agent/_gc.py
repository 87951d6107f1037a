"""The garbage collector's thresholds while an agent is open.

Why: CPython's generational collector (3.11 to 3.13) runs a young collection
whenever the container objects allocated minus those freed since the last
one pass the first threshold (700; 2,000 on 3.13), an older one every ten of
those, and a full one, walking every live object, when the objects promoted
to the oldest generation since the last full collection pass a quarter of
those already there. Agentik's turns make no cyclic garbage (reference
counting frees all a finished turn leaves, a failing tool's or model's
included; ``tests/agent/test_gc.py`` checks it), so at run time the collector finds next to
nothing; it only walks. What it walks is what grows: new conversations and
their histories, and the turns in flight, which at 10,000 conversations in
lockstep live 5-20 s each and were promoted object by object. With the
defaults the collector took more than half of a 50,000-turn run (31 full
collections, docs/history/performance-log.md, "Per-turn cost against the
bare sketch" and "Long conversations"); with the first threshold at
10,000, 2 full and 11 of generation 1; at 100,000, none of either, and it
walked 40 objects a turn instead of 248 (100 at 10,000).

Why it is safe (memory): thresholds decide *when* the collector looks for
cyclic garbage, never *whether*; reference counting frees everything else at
once, whatever the thresholds. The counter that starts a young collection
counts net new container objects, so cyclic garbage (which is never freed
before a collection) starts one after at most ``RELAXED_THRESHOLDS[0]``
such objects: the young generation holds at most about 100,000 objects of
garbage, tens of MiB at a few hundred bytes each (a cycle that alone holds
a large string or buffer holds it that long too: the cost scales with the
first threshold, 143 times the default's). A cycle that was alive at a young
collection and died later waits for the next of generation 1 (every ten
young ones, 1 million net new objects) or the next full one (unchanged
rule). In a steady state, where as many objects are freed as allocated, no
collection runs at all, at any threshold: nothing is waiting.
With many conversations the first threshold scales with them
(``YOUNG_PER_CONVERSATION``): the turns in flight are young objects, about
60 per conversation, so at 10,000 conversations a young collection walked
600,000 of them whatever the threshold, 13 times in a 50,000-turn run
(1.3 s of 14 s). At 64 per conversation it runs twice. The garbage it may
wait for scales the same way: at most 64 young objects per live
conversation, which holds more than that itself.
``gc.freeze()`` would help more but keeps whatever garbage is pending at
that moment for ever, so agentik leaves it to the operator (``agentik serve
--gc-freeze``).

Rules: the thresholds are changed only while they are CPython's defaults, so
an application that tuned its own keeps them; the ones found are restored
when the last open agent closes, unless someone changed them meanwhile.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

DEFAULT_THRESHOLDS = (700, 10, 10)
"""CPython's defaults (3.8 to 3.12)."""

KNOWN_DEFAULTS = frozenset({DEFAULT_THRESHOLDS, (2000, 10, 10)})
"""Thresholds agentik treats as untouched: 3.8-3.12's and 3.13's."""

RELAXED_THRESHOLDS = (100_000, 10, 10)
"""While an agent is open (measured: docs/history/performance-log.md, "The
collector, and what a turn leaves it"; now: docs/performance.md, "Where the
time goes")."""

YOUNG_PER_CONVERSATION = 64
"""Young container objects a live conversation keeps while its turn is in
flight (its task's coroutine frames, closures, sets, lists, its new
messages): about 60 measured at 10,000 conversations, where a young
collection walked 600,000 objects although the first threshold was 100,000
(the count is allocations minus *any* frees, old objects' too). The first
threshold follows it: ``YOUNG_PER_CONVERSATION`` x live conversations when
that is more than ``RELAXED_THRESHOLDS[0]``, so young collections come about
once per ``YOUNG_PER_CONVERSATION`` allocations a conversation, however
many there are, instead of 10 times per 5 turns each at 10,000."""

_lock = threading.Lock()
_holders = 0
"""Open agents that relaxed the thresholds (or found them relaxed by another)."""
_found: tuple[int, int, int] = DEFAULT_THRESHOLDS
"""The defaults the first holder found: restored after the last."""
_set: tuple[int, int, int] | None = None
"""What agentik last set, while it holds the thresholds: if they are
something else now, someone else set them, and agentik leaves them alone."""
_live = 0
"""Live conversations of the agents that relaxed the collector."""


def track_conversations(delta: int) -> None:
    """A conversation of a relaxing agent started (+1) or ended (-1): keep the
    first threshold at ``YOUNG_PER_CONVERSATION`` x live conversations, in
    steps of doubling from ``RELAXED_THRESHOLDS[0]`` (up at once, down once a
    quarter of the step is enough), so a burst resets it a few times, not a
    thousand."""
    global _live, _set
    with _lock:
        _live += delta
        if _set is None or gc.get_threshold() != _set:
            return  # not holding, or someone else set them since
        wanted = YOUNG_PER_CONVERSATION * _live
        first = _set[0]
        if wanted > first or (first > RELAXED_THRESHOLDS[0] and wanted * 4 <= first):
            level = RELAXED_THRESHOLDS[0]
            while level < wanted:
                level *= 2
            _set = (level, *RELAXED_THRESHOLDS[1:])
            gc.set_threshold(*_set)


@contextmanager
def relaxed_gc(enabled: bool = True) -> Iterator[None]:
    """Raise the collector's thresholds for the duration, if they are the defaults."""
    global _holders, _found, _set
    if not enabled:
        yield
        return
    with _lock:
        current = gc.get_threshold()
        held = _holders > 0 or current in KNOWN_DEFAULTS
        if held:
            if _holders == 0:
                _found = current
                _set = RELAXED_THRESHOLDS
                gc.set_threshold(*RELAXED_THRESHOLDS)
            _holders += 1
    try:
        yield
    finally:
        if held:
            with _lock:
                _holders -= 1
                if _holders == 0:
                    if gc.get_threshold() == _set:
                        gc.set_threshold(*_found)
                    _set = None

"""``ToolsetActivation``: which toolsets one conversation has switched on.

Owned by the conversation's task, in memory only (a new conversation starts
with none). A toolset stays active until disabled or unused for ``timeout``
seconds; expiry is lazy: every call first drops what has expired, so there are
no timers and a clock reading is the only input besides the call itself.

All transitions go through ``_step``, driven by this table (``last use`` is
the time of the latest enable or use):

    action   inactive               active
    enable   active, use = now      active, use = now
    touch    (nothing)              active, use = now
    disable  (nothing)              inactive

A toolset may be enabled with only some of its tools (``enable(name,
tools)``); without ``tools`` it is whole. Enabling an active toolset again
only ever adds: its tools are the union of all those asked for since it was
switched on (whole, once asked whole). Only a switch-off takes tools away:
``disable`` or expiry all of a toolset's, ``keep_only`` (the budget making
room for the tools asked of it, when they cannot fit with its others) some,
which leaves its place in the table above as it is.

The tools keep the order they were switched on in (``offer_order``): a use
or a second enable moves nothing, and tools added later to a toolset enabled
in part come after everything switched on before them, not beside the
toolset's earlier ones. The tools array follows that order, so a request's
array extends the one before unless something was switched off: the prefix
a provider's prompt cache reuses.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable

import trio

DEFAULT_TIMEOUT = 600.0
"""Ten minutes since last use, the plan's locked decision."""


class _Action(enum.Enum):
    ENABLE = "enable"
    TOUCH = "touch"
    DISABLE = "disable"


class ToolsetActivation:
    """The active toolsets of one conversation, expiring ``timeout`` seconds after last use.

    ``clock`` returns seconds (any origin); it defaults to ``trio.current_time``,
    looked up at each call so the object can be built outside ``trio.run`` and
    follows a ``MockClock`` in tests. Small on purpose (slots, and no dict
    until something is enabled): the agent keeps one per conversation.
    """

    __slots__ = ("_clock", "_last_use", "_order", "_timeout", "_tools")

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, clock: Callable[[], float] | None = None):
        if not (isinstance(timeout, int | float) and 0 < timeout < math.inf):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self._timeout = float(timeout)
        self._clock = clock
        self._last_use: dict[str, float] | None = None
        """Active toolset -> time of its last use, in activation order."""
        self._tools: dict[str, frozenset[str]] | None = None
        """The toolsets enabled with only some tools -> those tools."""
        self._order: list[tuple[str, frozenset[str] | None]] | None = None
        """What was switched on, piece by piece in order: a toolset and the tools
        it gained then (None: all of its tools not in its earlier pieces)."""

    @property
    def timeout(self) -> float:
        """Seconds a toolset stays active after its last use."""
        return self._timeout

    def enable(self, name: str, tools: Iterable[str] | None = None) -> bool:
        """Switch ``name`` on, or refresh its use; True if it was not active before.

        ``tools``: only these of its tools (a toolset too big to take whole);
        None, the whole toolset. On an active toolset they are added to those
        enabled of it (never taken away): the tools it gains go last.
        """
        was_active = self._step(name, _Action.ENABLE)
        chosen = None if tools is None else frozenset(tools)
        if self._order is None:
            self._order = []
        selected = self._tools or {}
        if not was_active:
            self._order.append((name, chosen))
        elif name not in selected:  # already whole: nothing to add
            return False
        elif chosen is None:  # the rest of a toolset enabled in part
            self._order.append((name, None))
        else:
            gained = chosen - selected[name]
            if not gained:
                return False
            self._order.append((name, gained))
            chosen = selected[name] | gained
        if chosen is None:
            if self._tools is not None:
                self._tools.pop(name, None)
        else:
            if self._tools is None:
                self._tools = {}
            self._tools[name] = chosen
        self._drop_empty()
        return not was_active

    def keep_only(self, name: str, tools: Iterable[str]) -> None:
        """Switch off the tools of active toolset ``name`` other than ``tools``
        (to make room for these); those it keeps stay where they are. Not a
        use; no effect on an inactive toolset."""
        if not self.is_active(name) or self._order is None:
            return
        keep = frozenset(tools)
        selected = self._tools if self._tools is not None else {}
        before = selected.get(name)
        kept: set[str] = set()
        pieces: list[tuple[str, frozenset[str] | None]] = []
        for piece, gained in self._order:
            if piece == name:
                # Only a toolset's last piece can be "the rest": make it concrete.
                gained = (keep - kept) if gained is None else (gained & keep)
                if not gained:
                    continue
                kept |= gained
            pieces.append((piece, gained))
        self._order[:] = pieces
        selected[name] = keep if before is None else before & keep
        self._tools = selected
        self._drop_empty()

    def disable(self, name: str) -> bool:
        """Switch ``name`` off; True if it was active before."""
        return self._step(name, _Action.DISABLE)

    def touch(self, name: str) -> None:
        """Record a use of ``name``, restarting its expiry; no effect if it is inactive."""
        self._step(name, _Action.TOUCH)

    def is_active(self, name: str) -> bool:
        """Whether ``name`` is active now."""
        return name in self._expire(self._now())

    def tools_of(self, name: str) -> frozenset[str] | None:
        """The tools enabled of active toolset ``name``; None when it is whole
        (or inactive)."""
        if not self.is_active(name) or self._tools is None:
            return None
        return self._tools.get(name)

    def selection(self) -> tuple[tuple[str, frozenset[str] | None], ...]:
        """The active toolsets in the order they were switched on, each with
        the tools enabled of it (None: all): what the model is offered."""
        live = self._expire(self._now())
        tools = self._tools or {}
        return tuple((name, tools.get(name)) for name in live)

    def offer_order(self) -> tuple[tuple[str, frozenset[str] | None], ...]:
        """What the model is offered, in the order it was switched on: pieces
        of (toolset, the tools it gained then; None: all its tools not in its
        earlier pieces). A toolset enabled in part and extended later has
        several pieces. ``ToolsetIndex.tools_of`` turns it into the tools
        array, which thus only grows at its end until something is switched
        off."""
        live = self._expire(self._now())
        if not live or self._order is None:
            return ()
        return tuple(piece for piece in self._order if piece[0] in live)

    def least_recently_used(self) -> tuple[str, ...]:
        """The active toolsets, the least recently used first (ties: the
        earlier switched on first): the order they make room in."""
        live = self._expire(self._now())
        return tuple(sorted(live, key=live.__getitem__))

    def active_names(self) -> frozenset[str]:
        """The toolsets active now, dropping those unused for ``timeout`` seconds."""
        live = self._expire(self._now())
        return frozenset(live) if live else frozenset()

    def expires_in(self, name: str) -> float | None:
        """Seconds until ``name`` expires unless used, or None if it is inactive."""
        now = self._now()
        last = self._expire(now).get(name)
        return None if last is None else last + self._timeout - now

    def _now(self) -> float:
        return trio.current_time() if self._clock is None else self._clock()

    def _expire(self, now: float) -> dict[str, float]:
        last_use = self._last_use
        if not last_use:
            return {}
        deadline = now - self._timeout
        expired = [name for name, used in last_use.items() if used <= deadline]
        for name in expired:
            del last_use[name]
            if self._tools is not None:
                self._tools.pop(name, None)
        if expired:
            self._forget(frozenset(expired))
        return last_use

    def _forget(self, names: frozenset[str]) -> None:
        """Drop the pieces of toolsets switched off."""
        if self._order is not None:
            self._order[:] = [piece for piece in self._order if piece[0] not in names]
            if not self._order:
                self._order = None

    def _step(self, name: str, action: _Action) -> bool:
        """Apply one transition of the table; return whether ``name`` was active before."""
        now = self._now()
        live = self._expire(now)
        was_active = name in live
        if action is _Action.ENABLE or (action is _Action.TOUCH and was_active):
            if self._last_use is None:
                self._last_use = {}
            self._last_use[name] = now
        elif action is _Action.DISABLE and was_active:
            del live[name]
            if self._tools is not None:
                self._tools.pop(name, None)
            self._forget(frozenset((name,)))
        self._drop_empty()
        return was_active

    def _drop_empty(self) -> None:
        """An idle conversation holds no dict."""
        if self._last_use is not None and not self._last_use:
            self._last_use = None
        if self._tools is not None and not self._tools:
            self._tools = None
        if self._order is not None and not self._order:
            self._order = None

    def __repr__(self) -> str:
        names = sorted(self._last_use or ())
        return f"ToolsetActivation(timeout={self._timeout!r}, recorded={names!r})"

"""Owner scoping: which conversations a request may see, and who sent it.

A request's ``Caller`` names its owner. The default owner (no owners
configured, or the ``[server] auth_token``) stores conversation ids as sent,
so databases from before owners existed read unchanged. A named owner's id
``demo`` is stored as ``"alice\\x1fdemo"``: U+001F cannot appear in an id a
client sends (every transport requires printable ids) nor in an owner name,
so the mapping is one-to-one and no id one owner can send ever names another
owner's conversation. Responses carry only the id the client sent. Listings
keep only the caller's ids; a conversation of another owner answers exactly
as a missing one would.

``Authenticator`` maps an ``Authorization`` header to a caller. The header is
``Bearer``, in any case (RFC 9110 §11.1: the scheme is case-insensitive),
one or more spaces, and the token (§11.4: ``auth-scheme 1*SP token68``).
It keeps SHA-256 digests of the tokens, not the tokens, and compares the
presented token's against every one of them with ``hmac.compare_digest``, so
neither the comparison nor which entry matched shows in the timing.
"""

from __future__ import annotations

import hashlib
import hmac

import attrs
from starlette.requests import Request

from agentik._memory import Reflection
from agentik._scope import SEPARATOR as SEPARATOR
from agentik.server._settings import ServerConfig
from agentik.storage import MessageStore, ReflectionStore

_AFTER_EVERY_ID = "\U0010ffff"
"""Sorts after every character an id may start with (it is not printable)."""
REFLECTION_SCAN = 10_000
"""With owners, ``/agentik/reflections`` looks for the caller's among this many newest."""


@attrs.frozen
class Caller:
    """Who sent a request; ``owner`` None is the default owner (ids stored as sent)."""

    owner: str | None = None

    @property
    def _prefix(self) -> str:
        return "" if self.owner is None else f"{self.owner}{SEPARATOR}"

    def internal(self, conversation_id: str) -> str:
        """The stored id for an id this caller sent."""
        if SEPARATOR in conversation_id:
            raise ValueError("a conversation id cannot contain U+001F")
        return self._prefix + conversation_id

    def external(self, stored_id: str) -> str | None:
        """The id this caller knows a stored conversation by; None if it is not theirs."""
        if self.owner is None:
            return None if SEPARATOR in stored_id else stored_id
        prefix = self._prefix
        return stored_id[len(prefix) :] if stored_id.startswith(prefix) else None

    def describe(self, conversation_id: str) -> str:
        """For log lines: ``alice/demo``, or the id alone for the default owner."""
        return conversation_id if self.owner is None else f"{self.owner}/{conversation_id}"


DEFAULT_CALLER = Caller()
CALLER_KEY = "agentik.caller"
"""Where the guard puts the request's ``Caller`` in the ASGI scope."""


def caller_of(request: Request) -> Caller:
    """The request's caller, as the guard authenticated it (fails closed without one)."""
    caller = request.scope.get(CALLER_KEY)
    if not isinstance(caller, Caller):
        raise RuntimeError("request reached a handler without passing the guard")
    return caller


@attrs.frozen
class Authenticator:
    """Maps an ``Authorization`` header value to the caller its token belongs to."""

    required: bool
    digests: tuple[tuple[bytes, Caller], ...] = attrs.field(repr=False)

    @classmethod
    def from_config(cls, config: ServerConfig) -> Authenticator:
        entries: list[tuple[str, Caller]] = [(c.token, Caller(c.owner)) for c in config.clients]
        if config.auth_token is not None:
            entries.append((config.auth_token, DEFAULT_CALLER))
        return cls(
            required=config.requires_auth,
            digests=tuple((_digest(t.encode()), c) for t, c in entries),
        )

    def caller(self, authorization: bytes | None) -> Caller | None:
        """The caller, or None when a token is required and this is not a valid one."""
        if not self.required:
            return DEFAULT_CALLER
        if authorization is None:
            return None
        scheme, _, token = authorization.partition(b" ")
        if scheme.lower() != b"bearer":
            return None  # the scheme is no secret: no need to hide this in the timing
        presented = _digest(token.lstrip(b" "))
        found = None
        for digest, caller in self.digests:  # no early exit: every entry costs the same
            if hmac.compare_digest(presented, digest):
                found = caller
        return found


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


async def owned_conversations(
    store: MessageStore, caller: Caller, after: str | None, limit: int
) -> list[str]:
    """Up to ``limit`` of the caller's conversation ids after ``after``, in id order."""
    prefix = caller.internal("")
    cursor: str | None = prefix + after if after is not None else (prefix or None)
    found: list[str] = []
    while len(found) < limit:
        batch = await store.list_conversations(after=cursor, limit=limit)
        for stored in batch:
            mine = caller.external(stored)
            if mine is not None:
                found.append(mine)
            elif caller.owner is not None:
                return found[:limit]  # a named owner's ids are contiguous: past them
        if len(batch) < limit:
            break
        cursor = batch[-1]
        owner, sep, _ = cursor.partition(SEPARATOR)
        if sep and caller.owner is None:  # skip the rest of a named owner's ids at once
            cursor = f"{owner}{SEPARATOR}{_AFTER_EVERY_ID}"
    return found[:limit]


async def recent_reflections(
    store: ReflectionStore, caller: Caller, limit: int, *, scoped: bool
) -> tuple[list[Reflection], int]:
    """The caller's newest reflections (ids as the caller knows them) and their total.

    Without owners (``scoped`` false) that is the store's newest and its count;
    with owners, the caller's among the newest ``REFLECTION_SCAN``."""
    if not scoped:
        recent = await store.list_recent(limit)
        mine = [r for r in recent if caller.external(r.conversation_id) is not None]
        return mine, await store.count()
    own = []
    for reflection in await store.list_recent(REFLECTION_SCAN):
        external = caller.external(reflection.conversation_id)
        if external is not None:
            own.append(attrs.evolve(reflection, conversation_id=external))
    return own[:limit], len(own)

"""Owner-scoped conversation ids, as stored: one mapping for the server, the
archive and the CLI.

The default owner's conversation ``demo`` is stored as ``demo``; owner
``alice``'s as ``"alice\\x1fdemo"``. U+001F appears neither in an id a client
may send (``checked_id``: printable only) nor in an owner name
(``agentik._clients.OWNER``), so the mapping is one-to-one, and an id from
outside that still holds one (an archive's header) is refused rather than
let plant a conversation in another owner's namespace.
"""

from __future__ import annotations

from agentik._clients import OWNER, OWNER_RULE
from agentik._input import InputError, checked_id, shown

SEPARATOR = "\x1f"


def checked_owner(owner: str, what: str = "owner") -> str:
    """``owner`` if it is an owner name ``[[server.clients]]`` accepts."""
    if not OWNER.fullmatch(owner):
        raise InputError(f"{what} must be {OWNER_RULE}, got {shown(owner)}")
    return owner


def stored_id(owner: str | None, conversation_id: str) -> str:
    """The stored id of ``conversation_id`` (checked as the API checks it) of
    ``owner`` (checked; None: the default owner)."""
    checked_id(conversation_id)
    if owner is None:
        return conversation_id
    return f"{checked_owner(owner)}{SEPARATOR}{conversation_id}"

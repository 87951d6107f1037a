"""Owner scopes of stored names: one mapping for the server, the agent, the
archive and the CLI.

``agentik serve`` stores the default owner's conversation ``demo`` as
``demo``, and owner ``alice``'s as ``"alice\\x1fdemo"``. U+001F appears neither
in an id or a skill name a client may send (``checked_id``: printable only)
nor in an owner name (``OWNER``), so the mapping is
one-to-one: the prefix up to the first U+001F names the owner, no name one
owner sends reaches another owner's, and an id from outside that still holds
one (an archive's header) is refused rather than let plant a conversation in
another owner's namespace.

The agent reads the same convention for skills, the other thing an owner
writes that the model reads: a skill saved in one of alice's conversations
(by the model's ``skill_save``, or by alice over HTTP) is stored as
``"alice\\x1f<name>"``, and only alice's conversations list or load it. An
embedder whose conversation ids hold no U+001F has one scope, ``""``.
"""

from __future__ import annotations

import re

from agentik._input import InputError, checked_id, shown

SEPARATOR = "\x1f"
OWNER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,47}$")
"""An owner's name (``[[server.clients]]``): 1..48 characters; no separator
or control character can hide in it."""
OWNER_RULE = "1..48 of A-Z a-z 0-9 . _ - (starting with a letter or digit)"


def scope_of(stored: str) -> str:
    """The owner prefix of a stored id or name (``"alice\\x1f"``); ``""`` for the
    default owner."""
    owner, separator, _ = stored.partition(SEPARATOR)
    return owner + separator if separator else ""


def split_scope(stored: str) -> tuple[str, str]:
    """``(scope, name)`` of a stored name: ``("alice\\x1f", "greet")``, ``("", "greet")``."""
    owner, separator, name = stored.partition(SEPARATOR)
    return (owner + separator, name) if separator else ("", stored)


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

"""Owner scopes of stored names: which owner a conversation id or a skill name belongs to.

``agentik serve`` stores a named owner's conversation ``demo`` as
``"alice\\x1fdemo"`` (server/_owners.py); the default owner's ids are stored as
sent. U+001F cannot appear in an id or a skill name a client sends (they must
be printable), so the prefix up to the first U+001F names the owner, and no
name one owner sends reaches another owner's.

The agent reads the same convention for skills, the other thing an owner
writes that the model reads: a skill saved in one of alice's conversations
(by the model's ``skill_save``, or by alice over HTTP) is stored as
``"alice\\x1f<name>"``, and only alice's conversations list or load it. An
embedder whose conversation ids hold no U+001F has one scope, ``""``.
"""

from __future__ import annotations

SEPARATOR = "\x1f"


def scope_of(stored: str) -> str:
    """The owner prefix of a stored id or name (``"alice\\x1f"``); ``""`` for the
    default owner."""
    owner, separator, _ = stored.partition(SEPARATOR)
    return owner + separator if separator else ""


def split_scope(stored: str) -> tuple[str, str]:
    """``(scope, name)`` of a stored name: ``("alice\\x1f", "greet")``, ``("", "greet")``."""
    owner, separator, name = stored.partition(SEPARATOR)
    return (owner + separator, name) if separator else ("", stored)

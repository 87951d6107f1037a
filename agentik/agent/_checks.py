"""The checks a request's arguments pass before anything runs: a bad one
raises ``ValueError`` (``TypeError`` for a bundle that cannot do it) and
changes nothing."""

from __future__ import annotations

from agentik.agent._turn_events import Decided
from agentik.storage import Storage

MAX_CONVERSATION_ID = 256
"""Characters a conversation id may have at most."""


def check_deletes(storage: Storage) -> None:
    if storage.degraded:
        raise TypeError(
            "this bundle's message store cannot delete conversations: it is a seed"
            " MessageStore (deleting needs a FullMessageStore, in a Storage)"
        )


def decision(call_id: str, approve: bool, reason: str) -> Decided:
    if not isinstance(call_id, str) or not call_id:
        raise ValueError("call_id must be a non-empty string")
    if not isinstance(reason, str):
        raise ValueError(f"reason must be a string, got {type(reason).__name__}")
    check_unicode("reason", reason)
    return Decided(call_id, bool(approve), reason)


def check_turn(conversation_id: str, text: str | None, key: str | None) -> None:
    """``text`` None: a request that carries no message (a decision, a query)."""
    if not isinstance(conversation_id, str) or not conversation_id:
        raise ValueError("conversation_id must be a non-empty string")
    if len(conversation_id) > MAX_CONVERSATION_ID:
        raise ValueError(f"conversation_id must be at most {MAX_CONVERSATION_ID} characters")
    if text is not None and (not isinstance(text, str) or not text):
        raise ValueError("text must be a non-empty string")
    if key is not None and (not isinstance(key, str) or not key):
        raise ValueError("idempotency_key must be a non-empty string or None")
    check_unicode("conversation_id", conversation_id)
    if text is not None:
        check_unicode("text", text)
    if key is not None:
        check_unicode("idempotency_key", key)


def check_unicode(name: str, value: str) -> None:
    """Refuse a lone surrogate: a ``str`` may hold one, but it is not Unicode
    text, so no store can keep it (SQLite fails the write, a storage fault).
    ``isascii`` is O(1) in CPython, so the common case costs no encoding."""
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"{name} must be valid Unicode text: it has a lone surrogate"
            f" {value[error.start]!r} at index {error.start}"
        ) from None

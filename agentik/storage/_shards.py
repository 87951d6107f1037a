"""Which shard a conversation belongs to, when several nodes share one
PostgreSQL database (docs/scale-out.md).

Nodes lease shards, not conversations: owning a conversation is holding its
shard's lease. So every node, in every process and under every Python
version, must put a conversation in the same shard: the CRC-32 of its id's
UTF-8 bytes (``zlib``, a fixed polynomial), never ``hash()``, which is
salted per process.
"""

from __future__ import annotations

import zlib

DEFAULT_SHARDS = 256
"""Shards a database is split into unless ``[storage] shards`` says otherwise."""
MAX_SHARDS = 65_536


def shard_of(conversation_id: str, shards: int) -> int:
    """The shard (``0 <= shard < shards``) that holds ``conversation_id``."""
    return zlib.crc32(conversation_id.encode("utf-8", "surrogatepass")) % shards


def check_shards(shards: object) -> int:
    """``shards`` if it is a whole number from 1 to ``MAX_SHARDS``, else ``ValueError``."""
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards must be a whole number from 1 to {MAX_SHARDS}, got {shards!r}")
    return shards

"""Conversation ids with odd bytes, as raw path segments, and what HAProxy
makes of them (deploy/haproxy.cfg: ``path,field(4,/),url_dec,crc32,mod(256)``),
for the routing tests (test_odd_ids_shards.py, test_odd_ids_routing.py).

``haproxy_segment`` emulates HAProxy 2.6's ``field`` and ``url_dec``
(src/tools.c ``url_decode``: ``%XX`` in either case is the byte, a ``%``
not followed by two hex digits fails the fetch, so the shard is unset; ``+``
stays ``+`` in a path); test_odd_ids_routing.py checks the emulation against
the real HAProxy.
"""

from __future__ import annotations

import string
import zlib
from urllib.parse import quote

from hypothesis import strategies as st

NATIVE = b"/agentik/conversations/"
_HEX = frozenset(b"0123456789abcdefABCDEF")


def haproxy_segment(raw_path: bytes) -> bytes | None:
    """What HAProxy hashes for ``raw_path`` (its 4th ``/`` field,
    ``url_dec``-ed); None when it sets no shard (another path, or url_dec fails)."""
    path = raw_path.partition(b"?")[0]
    if not path.startswith(NATIVE):
        return None
    fields = path.split(b"/")
    field = fields[3] if len(fields) > 3 else b""
    out = bytearray()
    at = 0
    while at < len(field):
        byte = field[at]
        if byte == ord("%"):
            pair = field[at + 1 : at + 3]
            if len(pair) < 2 or not set(pair) <= _HEX:
                return None
            out.append(int(pair, 16))
            at += 3
        else:
            out.append(byte)
            at += 1
    return bytes(out)


def haproxy_shard(raw_path: bytes, shards: int = 256) -> int | None:
    """The shard HAProxy computes for ``raw_path``; None when it sets none."""
    segment = haproxy_segment(raw_path)
    return None if segment is None else zlib.crc32(segment) % shards


def _percent(data: bytes, *, lower: bool) -> str:
    encoded = "".join(f"%{b:02X}" for b in data)
    return encoded.lower() if lower else encoded


_PLAIN = string.ascii_letters + string.digits + "-._~!$&'()*+,;=:@"
_ODD = [
    "%2F",  # a slash inside the id
    "%2f",
    "%25",  # a literal percent: "%2541" is "%41", not "A"
    "%2541",
    "%252F",
    "%20",
    "+",
    "%2B",
    "%3F",
    "%23",
    "%5C",
    "%FF",  # not UTF-8
    "%C0%AF",  # an overlong '/'
    "%E0%80%AF",
    "%ED%A0%80",  # a surrogate, encoded
    "%EF%BC%91",  # a full-width digit one
    "%D9%A3",  # an Arabic-Indic digit three
    "e%CC%81",  # NFD é
    "%C3%A9",  # NFC é
    "%G1",  # not an escape
    "%",
    "%2",
    "%00",
    "%0A",
    "%7F",
    "turns",
    "messages",
    "approvals",
    ".",
    "..",
    "%2E%2E",
    "A",
    "a",
]
pieces = st.one_of(
    st.text(alphabet=_PLAIN, min_size=1, max_size=6),
    st.sampled_from(_ODD),
    st.builds(_percent, st.binary(min_size=1, max_size=4), lower=st.booleans()),
    # Any text as UTF-8, lone surrogates too (then it is not UTF-8).
    st.text(min_size=1, max_size=3).map(
        lambda t: quote(t.encode("utf-8", "surrogatepass"), safe="")
    ),
)
segments = st.one_of(
    st.lists(pieces, max_size=6).map("".join),
    st.integers(min_value=195, max_value=205).map(lambda n: "x" * n),  # MAX_ID_LENGTH is 200
)
"""A raw path segment naming a conversation: ASCII, as a client sends it."""
suffixes = st.sampled_from(
    ["", "/", "/turns", "/turns/", "/messages", "/messages/", "//messages", "/approvals/a%2Fb"]
)
"""What follows the conversation in the path."""

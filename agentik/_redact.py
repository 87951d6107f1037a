"""Masking credentials in text that came from outside: one mechanism for every
credential agentik sends (a model backend's API key, an MCP server's tokens and
client secrets), wherever the other side may quote it back.

``Redactor`` masks a fixed set of secret strings with ``***``: one leftmost
scan that takes, at each position, the longest secret there (``text``); for
raw bytes (``data``) and every string of a JSON value (``structure``) the
same. ``StreamRedactor`` masks one text that arrives in pieces: it holds back
the end of the text while it could still become a secret (at most the
longest secret's length less one character) and releases it, masked, once
the next piece or the end decides it; joined, what it shows is exactly what
``Redactor.text`` gives for the assembled text, only earlier.

The model backend's use (every body, every decoded answer, every stream) is
in ``agentik.models._redact``; the MCP toolsets' in ``agentik.mcp._credentials``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Self

import attrs
import httpx2

from agentik._json import JsonValue

SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "api-key", "x-api-key", "cookie"}
)
MASK = "***"
MIN_SECRET = 4
"""Shorter values are not credentials worth masking, and masking them would garble text."""


def _longest_first(secrets: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({s for s in secrets if s}, key=lambda s: (-len(s), s)))


def _alternation(secrets: tuple[str, ...]) -> str:
    # re tries alternatives in order: longest first makes each match the
    # longest secret at its position.
    return "|".join(re.escape(s) for s in secrets)


@attrs.frozen
class Redactor:
    """Masks a fixed set of secret strings: leftmost first, and the longest of
    those starting there."""

    secrets: tuple[str, ...] = attrs.field(repr=False, converter=_longest_first)
    _pattern: re.Pattern[str] | None = attrs.field(init=False, repr=False, eq=False)
    _bytes_pattern: re.Pattern[bytes] | None = attrs.field(init=False, repr=False, eq=False)
    _firsts: tuple[str, ...] = attrs.field(init=False, repr=False, eq=False)
    """The characters secrets start with: a text without any shows no secret and
    holds nothing back, and only at one can a held-back end begin."""
    longest: int = attrs.field(init=False, repr=False, eq=False)
    """The longest secret's length (0 without secrets)."""

    @_pattern.default
    def _compile(self) -> re.Pattern[str] | None:
        return re.compile(_alternation(self.secrets)) if self.secrets else None

    @_bytes_pattern.default
    def _compile_bytes(self) -> re.Pattern[bytes] | None:
        encoded = _alternation(self.secrets).encode()
        return re.compile(encoded) if self.secrets else None

    @_firsts.default
    def _first_characters(self) -> tuple[str, ...]:
        return tuple(sorted({s[0] for s in self.secrets}))

    @longest.default
    def _longest(self) -> int:
        return len(self.secrets[0]) if self.secrets else 0

    @classmethod
    def for_credentials(cls, api_key: str | None, headers: Mapping[str, str], url: str) -> Self:
        found = {api_key or ""}
        for name, value in headers.items():
            if name.lower() in SECRET_HEADERS:
                scheme, _, credentials = value.strip().partition(" ")
                found.add(credentials or scheme)  # "Bearer k" shows as "Bearer ***"
        userinfo = httpx2.URL(url).userinfo.decode(errors="replace")
        found |= {userinfo, userinfo.partition(":")[2]}
        found |= {s.strip() for s in found}  # a key read with its newline is quoted without it
        return cls(s for s in found if len(s) >= MIN_SECRET)

    def text(self, value: str) -> str:
        for secret in self.secrets:
            if secret in value:  # substring search first: much cheaper than a regex scan
                assert self._pattern is not None
                return self._pattern.sub(MASK, value)
        return value

    def data(self, value: bytes) -> bytes:
        if self._bytes_pattern is not None and self._bytes_pattern.search(value):
            return self._bytes_pattern.sub(MASK.encode(), value)
        return value

    def settle(self, value: str) -> tuple[str, str]:
        """Split ``value``, the start of a longer text, into what can be shown
        now (masked) and the rest that more text could still make part of a
        secret: raw, the longest end of ``value`` (after its last final match)
        that is a proper prefix of a secret, so at most ``longest - 1``
        characters, and usually none.

        ``shown + self.text(rest + more) == self.text(value + more)`` for any
        ``more``: a match starting before the rest is final, since no secret
        can start there and reach past the end.
        """
        for first in self._firsts:
            if first in value:
                break
        else:  # the common case, made cheap: nothing here can be or start a secret
            return value, ""
        pattern = self._pattern
        assert pattern is not None  # there are secrets: a first character was found
        undecided = self._undecided(value)
        if undecided == len(value):
            return pattern.sub(MASK, value), ""
        match = pattern.search(value)
        if match is None or match.start() >= undecided:
            return value[:undecided], value[undecided:]
        shown: list[str] = []
        done = 0
        while match is not None and match.start() < undecided:
            shown += (value[done : match.start()], MASK)
            done = match.end()
            match = pattern.search(value, done)
        shown.append(value[done:undecided])
        if done > undecided:  # a final match reached into the undecided end: scan on after it
            more, rest = self.settle(value[done:])
            return "".join(shown) + more, rest
        return "".join(shown), value[undecided:]

    def _undecided(self, value: str) -> int:
        """The first position from which ``value`` is a proper prefix of a
        secret (only the last ``longest - 1`` can be); ``len(value)`` if none."""
        end = len(value)
        start = end - self.longest + 1
        start = start if start > 0 else 0
        while start < end:
            rest = value[start:]
            for secret in self.secrets:
                if len(secret) > len(rest) and secret.startswith(rest):
                    return start
            # on to the next character a secret starts with
            found = end
            for first in self._firsts:
                at = value.find(first, start + 1, found)
                if at >= 0:
                    found = at
            start = found
        return end

    def structure(self, value: JsonValue) -> JsonValue:
        """``value`` with every string masked, keys included (JSON escapes were
        decoded before: a value spells a secret as it is)."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.structure(item) for item in value]
        if isinstance(value, dict):
            return {self.text(key): self.structure(item) for key, item in value.items()}
        return value


@attrs.define
class StreamRedactor:
    """Masks one text that arrives in pieces: what ``feed`` and ``flush``
    return, joined, is ``redactor.text`` of the pieces joined, and no prefix
    of it ever shows a secret."""

    redactor: Redactor
    _held: str = attrs.field(default="", init=False)

    @property
    def held(self) -> int:
        """How many characters of the text so far are held back."""
        return len(self._held)

    def feed(self, piece: str) -> str:
        """The next piece; returns what can be shown of the text so far."""
        shown, self._held = self.redactor.settle(self._held + piece if self._held else piece)
        return shown

    def flush(self) -> str:
        """The text is complete: the held-back end, masked."""
        rest, self._held = self._held, ""
        return self.redactor.text(rest)

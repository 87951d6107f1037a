"""Keeping a model backend's credentials out of everything its answers reach.

A backend (or a proxy in front of it) may echo the request's headers back: in
an error body, in a 200 body that is not JSON, even in the model's text. So
the credentials a model sends (the API key, secret-looking headers, a
password in the URL) are replaced by ``***`` at three levels:

- every body and every stream event's data read from the backend, *before*
  anything is parsed, clipped or quoted, so no error message can carry
  them, not even cut in half;
- every string of a decoded answer (text, tool-call ids, names, arguments):
  JSON ``\\u`` escapes spell a key no raw byte shows;
- a streamed answer's *assembled* text: a key quoted in 3-character deltas
  is in no single event, yet a client joining the deltas, and the store,
  would see it whole. ``StreamMasker`` holds back the end of each stream's text while
  it could still become a secret (at most the longest secret's length less
  one character) and releases it, masked, once the next piece or the end of
  the stream decides it.

Masking is one leftmost scan that takes, at each position, the longest
secret there (``Redactor.text``); the streamed form emits exactly what
``Redactor.text`` gives for the assembled text, only earlier. Error messages
leaving the model are scrubbed once more (they quote URLs and transport
errors too).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import partial

import attrs
import httpx2

from agentik._errors import ModelBackendError
from agentik.models._protocol import ModelResponse, TextDelta, ToolCallDelta

SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "api-key", "x-api-key", "cookie"}
)
MASK = "***"
_MIN_SECRET = 4
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
    def for_credentials(cls, api_key: str | None, headers: Mapping[str, str], url: str) -> Redactor:
        found = {api_key or ""}
        for name, value in headers.items():
            if name.lower() in SECRET_HEADERS:
                scheme, _, credentials = value.strip().partition(" ")
                found.add(credentials or scheme)  # "Bearer k" shows as "Bearer ***"
        userinfo = httpx2.URL(url).userinfo.decode(errors="replace")
        found |= {userinfo, userinfo.partition(":")[2]}
        found |= {s.strip() for s in found}  # a key read with its newline is quoted without it
        return cls(s for s in found if len(s) >= _MIN_SECRET)

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

    def response(self, answer: ModelResponse) -> ModelResponse:
        """``answer`` with every string the model wrote masked."""
        if self._pattern is None:
            return answer
        calls = [
            attrs.evolve(
                call,
                id=self.text(call.id),
                name=self.text(call.name),
                arguments=self.text(call.arguments),
            )
            for call in answer.tool_calls
        ]
        text = None if answer.text is None else self.text(answer.text)
        return attrs.evolve(answer, text=text, tool_calls=calls)

    def error(self, exc: ModelBackendError) -> ModelBackendError:
        """``exc`` itself when it shows no secret, else a masked copy (without the
        chained causes, whose messages may show it too)."""
        message = str(exc)
        masked = self.text(message)
        return exc if masked == message else ModelBackendError(masked)


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


@attrs.define
class _MaskedCall:
    """One streamed tool call. Clients open a call with its first delta's id
    and name, so that delta waits while the name's end could still start a
    secret: until more of the name settles it, or the arguments begin (then
    the name is taken as complete; servers send it first), or the stream
    ends. Name pieces after the arguments began are not streamed, since the
    name shown was already final (the final answer has them, masked)."""

    index: int
    name: StreamRedactor
    arguments: StreamRedactor
    id: str | None = None
    """The masked id, until a delta has carried it."""
    shown_name: str = ""
    shown_arguments: str = ""
    """What the next delta shows of the name and the arguments."""
    opened: bool = False
    name_done: bool = False

    def feed(self, delta: ToolCallDelta, redactor: Redactor) -> list[ToolCallDelta]:
        if delta.id is not None:
            self.id = redactor.text(delta.id)
        if delta.name and not self.name_done:
            self.shown_name += self.name.feed(delta.name)
        if delta.arguments and not self.name_done:
            self._end_name()
        self.shown_arguments += self.arguments.feed(delta.arguments)
        return self._release()

    def flush(self) -> list[ToolCallDelta]:
        self._end_name()
        self.shown_arguments += self.arguments.flush()
        return self._release()

    def _end_name(self) -> None:
        self.name_done = True
        self.shown_name += self.name.flush()

    def _release(self) -> list[ToolCallDelta]:
        if not self.opened:
            if not self.shown_name or self.name.held:
                return []
            self.opened = True
        delta = ToolCallDelta(
            index=self.index,
            arguments=self.shown_arguments,
            id=self.id,
            name=self.shown_name or None,
        )
        self.id, self.shown_name, self.shown_arguments = None, "", ""
        return [delta] if delta.arguments or delta.id or delta.name else []


@attrs.define
class StreamMasker:
    """The deltas of one streamed answer, masked on its assembled strings: the
    text and each tool call's name and arguments (ids come whole, so they are
    masked whole). Joined, the deltas give ``Redactor.response`` of the
    answer (unless a name piece came after its call's arguments)."""

    redactor: Redactor
    _text: StreamRedactor = attrs.field(init=False)
    _calls: dict[int, _MaskedCall] = attrs.field(factory=dict, init=False)

    @_text.default
    def _text_redactor(self) -> StreamRedactor:
        return StreamRedactor(self.redactor)

    def feed(self, deltas: Iterable[TextDelta | ToolCallDelta]) -> list[TextDelta | ToolCallDelta]:
        """The next deltas; returns those that can be shown now."""
        if self.redactor.longest == 0:
            return list(deltas)
        shown: list[TextDelta | ToolCallDelta] = []
        for delta in deltas:
            if isinstance(delta, TextDelta):
                text = self._text.feed(delta.text)
                if text == delta.text:  # the common case: pass it on as it came
                    shown.append(delta)
                elif text:
                    shown.append(TextDelta(text=text))
                continue
            call = self._calls.get(delta.index)
            if call is None:
                stream = partial(StreamRedactor, self.redactor)
                call = self._calls[delta.index] = _MaskedCall(delta.index, stream(), stream())
            shown += call.feed(delta, self.redactor)
        return shown

    def flush(self) -> list[TextDelta | ToolCallDelta]:
        """The stream is complete: what was held back, masked."""
        text = self._text.flush()
        shown: list[TextDelta | ToolCallDelta] = [TextDelta(text=text)] if text else []
        for index in sorted(self._calls):
            shown += self._calls[index].flush()
        return shown

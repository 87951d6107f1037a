"""Keeping a model backend's credentials out of everything its answers reach.

A backend (or a proxy in front of it) may echo the request's headers back: in
an error body, in a 200 body that is not JSON, even in the model's text. So
the credentials a model sends (the API key, secret-looking headers, a
password in the URL) are replaced by ``***`` (``agentik._redact``) at three
levels:

- every body and every stream event's data read from the backend, *before*
  anything is parsed, clipped or quoted, so no error message can carry
  them, not even cut in half;
- every string of a decoded answer (text, tool-call ids, names, arguments):
  JSON ``\\u`` escapes spell a key no raw byte shows;
- a streamed answer's *assembled* text: a key quoted in 3-character deltas
  is in no single event, yet a client joining the deltas, and the store,
  would see it whole. ``StreamMasker`` masks each stream's text and each
  tool call's name and arguments with a ``StreamRedactor``, so the streamed
  form emits exactly what ``Redactor.text`` gives for the assembled text,
  only earlier.

Error messages leaving the model are scrubbed once more (they quote URLs and
transport errors too).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

import attrs

import agentik._redact as _redact
from agentik._errors import ModelBackendError
from agentik._redact import MASK as MASK
from agentik._redact import SECRET_HEADERS as SECRET_HEADERS
from agentik._redact import StreamRedactor as StreamRedactor
from agentik.models._protocol import ModelResponse, TextDelta, ToolCallDelta


@attrs.frozen
class Redactor(_redact.Redactor):
    """``agentik._redact.Redactor``, and what a model's answers need of it."""

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
        if masked == message:
            return exc
        return ModelBackendError(
            masked, status=exc.status, retry_after=exc.retry_after, headers=exc.headers
        )


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

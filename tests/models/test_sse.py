"""The SSE decoder turns a stream's text (or lines) into event data, as browsers do."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from agentik.models._sse import SSEDecoder


def decode(lines: list[str]) -> list[str]:
    decoder = SSEDecoder()
    return [data for line in lines if (data := decoder.feed_line(line)) is not None]


def test_one_event_per_blank_line() -> None:
    """Each blank line dispatches the data gathered since the last one."""
    assert decode(["data: {}", "", "data: [DONE]", ""]) == ["{}", "[DONE]"]


def test_data_lines_join_with_newlines() -> None:
    """Several data lines form one event, joined by newlines."""
    assert decode(["data: a", "data:b", "data:  c", ""]) == ["a\nb\n c"]


def test_comments_and_other_fields_are_ignored() -> None:
    """Comments (keep-alives), event, id and retry lines carry no data."""
    lines = [": ping", "", "event: message", "id: 7", "retry: 10", "data: x", ""]
    assert decode(lines) == ["x"]


def test_an_empty_data_field_is_an_event() -> None:
    """``data:`` with nothing after it is an event with empty data."""
    assert decode(["data:", ""]) == [""]


def test_unterminated_event_is_not_dispatched() -> None:
    """A stream cut before the blank line yields nothing half-received."""
    assert decode(['data: {"a":', "data: 1}"]) == []


@given(st.lists(st.text(alphabet=st.characters(exclude_characters="\r\n"))))
def test_round_trip(payloads: list[str]) -> None:
    """Whatever one-line payloads a server frames come back unchanged."""
    lines = [line for p in payloads for line in (f"data: {p}", "")]
    assert decode(lines) == payloads


def decode_text(pieces: list[str]) -> list[str]:
    decoder = SSEDecoder()
    return [data for piece in pieces for data in decoder.feed(piece)]


def test_lines_end_only_at_cr_lf_or_crlf() -> None:
    """U+2028, U+2029, U+0085 (which JSON strings may hold raw) and the other
    characters ``str.splitlines`` splits at are text, not line ends."""
    text = "a\u2028b\u2029c\x85d\x0be\x0cf\x1cg\x1dh\x1ei"
    assert decode_text([f"data: {text}\n\n"]) == [text]


def test_a_crlf_cut_between_its_cr_and_its_lf() -> None:
    """A CR ending one piece and a LF starting the next are one line end, not
    a line end and a blank line (which would cut the event in two)."""
    assert decode_text(["data: a\r", "\ndata: b\r", "\n\r", "\n"]) == ["a\nb"]


line_texts = st.text(alphabet=st.characters(exclude_characters="\r\n"))


@given(st.lists(st.lists(line_texts, min_size=1, max_size=3)), st.data())
def test_any_line_ends_and_any_cuts(events: list[list[str]], data: st.DataObject) -> None:
    """Whatever events of one or more data lines a server frames, with any of
    the three line ends, come back unchanged however the text is cut."""
    ends = ["\n", "\r", "\r\n"]
    text = ""
    for lines in events:
        for line in lines:
            text += f"data: {line}{data.draw(st.sampled_from(ends))}"
        # a blank line; after a CR, a LF would only complete the line end before it
        blank = ends[1:] if text.endswith("\r") else ends
        text += data.draw(st.sampled_from(blank))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=20)))
    bounds = [0, *cuts, len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    assert decode_text(pieces) == ["\n".join(lines) for lines in events]

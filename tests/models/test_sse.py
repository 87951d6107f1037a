"""The SSE decoder turns a stream's lines into event data, as browsers do."""

from __future__ import annotations

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

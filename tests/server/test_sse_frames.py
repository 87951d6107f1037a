"""SSE frames survive clients that split lines wherever ``str.splitlines`` does.

JSON may carry U+0085, U+2028 and U+2029 raw; httpx's ``aiter_lines`` (and so
``agentik chat`` before) split there and then failed on half a JSON document.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from agentik.server.http._sse import sse_frame

texts = st.text(
    alphabet=st.characters(codec="utf-8")
    | st.sampled_from(["\x85", "\u2028", "\u2029", "\n", "\r", "\x0b", "\x0c", "\x1c"])
)
values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)


@given(value=values, event=st.none() | st.sampled_from(["message", "turn_finished"]))
def test_a_frame_is_its_lines_whoever_splits_them(value: object, event: str | None) -> None:
    lines = sse_frame(value, event=event).decode().splitlines()  # type: ignore[arg-type]
    expected = 3 if event is not None else 2
    assert len(lines) == expected, lines
    assert lines[-1] == ""
    if event is not None:
        assert lines[0] == f"event: {event}"
    assert lines[-2].startswith("data: ")
    assert json.loads(lines[-2].removeprefix("data: ")) == value

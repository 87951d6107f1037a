"""The Chat Completions codec, without I/O: accumulating chunks and decoding bodies."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentik._errors import ModelBackendError
from agentik._messages import ToolCall
from agentik.models import ModelResponse, TextDelta, ToolCallDelta
from agentik.models._wire import ChunkAccumulator, decode_completion
from tests.models.chat_server import call_delta, chunk

json_objects = st.dictionaries(
    st.text(max_size=5),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=10),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=5,
    ),
    max_size=4,
)
tool_calls = st.lists(
    st.builds(
        ToolCall,
        id=st.text(alphabet="abcdef0123456789", min_size=1, max_size=8).map("call_".__add__),
        name=st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True),
        arguments=json_objects.map(json.dumps),
    ),
    max_size=4,
)


@st.composite
def streamed(draw: st.DrawFn) -> tuple[list[ToolCall], list[dict[str, Any]]]:
    """Tool calls and chunks that stream them: each call's arguments cut into
    fragments, fragments of different calls interleaved, several per chunk."""
    calls = draw(tool_calls)
    queues = []
    for index, call in enumerate(calls):
        cuts = sorted(draw(st.sets(st.integers(0, len(call.arguments)), max_size=4)))
        bounds = [0, *cuts, len(call.arguments)]
        pieces = [call.arguments[a:b] for a, b in itertools.pairwise(bounds)]
        first = call_delta(index, pieces[0], id=call.id, name=call.name)
        queues.append([first, *(call_delta(index, piece) for piece in pieces[1:])])
    fragments = []
    while any(queues):
        queue = draw(st.sampled_from([q for q in queues if q]))
        fragments.append(queue.pop(0))
    chunks = []
    while fragments:
        size = draw(st.integers(1, 3))
        chunks.append(chunk(tool_calls=fragments[:size]))
        del fragments[:size]
    return calls, [*chunks, chunk(finish_reason="tool_calls")]


def feed_all(chunks: list[Any]) -> tuple[list[TextDelta | ToolCallDelta], ModelResponse]:
    accumulator = ChunkAccumulator()
    deltas = [delta for c in chunks for delta in accumulator.feed(c)]
    return deltas, accumulator.finish()


@given(streamed())
def test_interleaved_fragments_rebuild_each_call(case: tuple[list[ToolCall], list[Any]]) -> None:
    """However the arguments are split and interleaved, each call comes back whole."""
    calls, chunks = case
    deltas, response = feed_all(chunks)
    assert response.tool_calls == tuple(calls)
    for index, call in enumerate(calls):
        own = [d for d in deltas if isinstance(d, ToolCallDelta) and d.index == index]
        assert "".join(d.arguments for d in own) == call.arguments
        assert (own[0].id, own[0].name) == (call.id, call.name)
        assert all(d.id is None and d.name is None for d in own[1:])


@given(json_objects.map(json.dumps), st.data())
def test_length_never_returns_a_truncated_call(arguments: str, data: st.DataObject) -> None:
    """Cut at any point before its end, a call under finish_reason=length is dropped."""
    cut = data.draw(st.integers(0, len(arguments) - 1))
    chunks = [
        chunk(tool_calls=[call_delta(0, "{}", id="call_a", name="ok")]),
        chunk(tool_calls=[call_delta(1, arguments[:cut], id="call_b", name="cut")]),
        chunk(finish_reason="length"),
    ]
    _, response = feed_all(chunks)
    assert response.tool_calls == (ToolCall(id="call_a", name="ok", arguments="{}"),)
    assert response.finish_reason == "length"


def test_stop_keeps_malformed_arguments_for_the_caller_to_answer() -> None:
    """Only ``length`` drops calls; otherwise malformed arguments are kept verbatim."""
    chunks = [chunk(tool_calls=[call_delta(0, "{oops", id="c", name="t")], finish_reason="stop")]
    _, response = feed_all(chunks)
    assert response.tool_calls == (ToolCall(id="c", name="t", arguments="{oops"),)


def test_text_and_other_choices() -> None:
    """Text deltas accumulate; choices other than index 0 are ignored."""
    other = chunk("ignored")
    other["choices"][0]["index"] = 1
    deltas, response = feed_all([chunk("a"), other, chunk(""), chunk("b", finish_reason="stop")])
    assert deltas == [TextDelta(text="a"), TextDelta(text="b")]
    assert response == ModelResponse(text="ab", finish_reason="stop")


def test_missing_call_id_gets_a_positional_one() -> None:
    """A server that sends no call id still gets a usable, stable one."""
    _, response = feed_all([chunk(tool_calls=[call_delta(2, "{}", name="t")])])
    assert response.tool_calls == (ToolCall(id="call_2", name="t", arguments="{}"),)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"choices": "x"}, r"^chunk 'choices' must be a list, got 'x'$"),
        ({"choices": [{"delta": {"content": 3}}]}, r"^delta content must be a string or null"),
        (
            {"choices": [{"delta": {"tool_calls": [{"function": {"arguments": "{}"}}]}}]},
            r"^tool-call delta index must be an integer >= 0, got None$",
        ),
        ({"choices": [{"delta": {"tool_calls": {}}}]}, r"^delta 'tool_calls' must be a list"),
        ("text", r"^stream chunk must be a JSON object, got 'text'$"),
        ({"usage": {"completion_tokens": -1}}, r"^usage completion_tokens must be an integer"),
        ({"error": "overloaded"}, r"^model backend reported an error mid-stream: overloaded$"),
    ],
)
def test_malformed_chunks(bad: Any, message: str) -> None:
    """A malformed chunk raises an error naming the field and the expectation."""
    with pytest.raises(ModelBackendError, match=message):
        ChunkAccumulator().feed(bad)


def test_streamed_call_without_name() -> None:
    """A streamed call that never got a name is an error, not a call to nothing."""
    accumulator = ChunkAccumulator()
    accumulator.feed(chunk(tool_calls=[call_delta(0, "{}", id="c")]))
    with pytest.raises(ModelBackendError, match=r"^streamed tool call at index 0 has no name$"):
        accumulator.finish()


def test_completion_with_object_arguments() -> None:
    """Arguments sent as an object (some servers do) become their JSON text."""
    body = {
        "choices": [
            {
                "message": {
                    "content": "",
                    "tool_calls": [{"id": "c", "function": {"name": "t", "arguments": {"a": 1}}}],
                },
                "finish_reason": "tool_calls",
            }
        ]
    }
    response = decode_completion(body)
    assert response == ModelResponse(
        tool_calls=[ToolCall(id="c", name="t", arguments='{"a": 1}')], finish_reason="tool_calls"
    )

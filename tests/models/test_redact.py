"""Masking secrets in a model's answers, whole and streamed.

``Redactor.text`` of the whole text is the oracle: a stream, cut anywhere,
must come out as exactly that, without any secret in what was shown so far,
holding back no more than the longest secret less one character, and
nothing at all when the text's end cannot be the start of a secret.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import ModelResponse, ToolCall
from agentik.models import TextDelta, ToolCallDelta
from agentik.models._redact import MASK, Redactor, StreamMasker, StreamRedactor

# Few characters, so that secrets overlap, share prefixes and repeat; with a
# combining mark and an astral character. Secrets never contain the mask's
# '*' (then a mask next to text could spell one); texts may.
SECRET_CHARS = "ab-é🔑\u0301"
TEXT_CHARS = SECRET_CHARS + "*x "


def related(base: str) -> st.SearchStrategy[str]:
    """Secrets that overlap ``base``: itself, its prefixes and suffixes, longer
    ones around it, ones that start with its end, runs of one character
    ("aaaa"), and unrelated ones."""
    cut = st.integers(1, len(base))
    extra = st.text(SECRET_CHARS, min_size=1, max_size=3)
    return st.one_of(
        st.just(base),
        cut.map(lambda i: base[:i]),
        cut.map(lambda i: base[-i:]),
        extra.map(lambda x: base + x),
        extra.map(lambda x: x + base),
        st.tuples(cut, extra).map(lambda t: base[-t[0] :] + t[1]),
        st.integers(1, 6).map(lambda n: base[0] * n),
        st.text(SECRET_CHARS, min_size=1, max_size=8),
    )


secret_sets = st.text(SECRET_CHARS, min_size=1, max_size=8).flatmap(
    lambda base: st.lists(related(base), min_size=1, max_size=4).map(tuple)
)


@st.composite
def texts(draw: st.DrawFn, secrets: Sequence[str], parts: int = 10) -> str:
    """Filler, secrets, and pieces of secrets (starts and ends), run together."""
    chosen = st.sampled_from(secrets)
    part = st.one_of(
        st.text(TEXT_CHARS, max_size=6),
        chosen,
        chosen.flatmap(lambda s: st.integers(0, len(s)).map(lambda i: s[:i])),
        chosen.flatmap(lambda s: st.integers(0, len(s)).map(lambda i: s[i:])),
    )
    return "".join(draw(st.lists(part, max_size=parts)))


@st.composite
def pieces(draw: st.DrawFn, text: str) -> list[str]:
    """``text`` cut at random places (empty pieces included)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def streams(draw: st.DrawFn) -> tuple[Redactor, str, list[str]]:
    redactor = Redactor(draw(secret_sets))
    text = draw(texts(redactor.secrets))
    return redactor, text, draw(pieces(text))


def shows_no_secret(redactor: Redactor, text: str) -> bool:
    return not any(secret in text for secret in redactor.secrets)


def is_proper_prefix(redactor: Redactor, held: str) -> bool:
    return any(len(s) > len(held) and s.startswith(held) for s in redactor.secrets)


class TestRedactor:
    """The oracle itself: one leftmost scan, longest secret at each position."""

    def test_the_longest_secret_at_a_position_wins(self) -> None:
        """A secret that is a prefix of another does not leave the longer one's tail."""
        assert Redactor(("abcd", "abcdef")).text("x abcdef y abcd") == f"x {MASK} y {MASK}"

    def test_a_suffix_secret_inside_a_longer_one(self) -> None:
        """A password that ends the ``user:password`` secret is masked with it."""
        redactor = Redactor.for_credentials(None, {}, "http://user:pass@h/v1")
        assert redactor.text("got user:pass and pass") == f"got {MASK} and {MASK}"

    def test_repeated_characters(self) -> None:
        """A run of one character is masked left to right, without overlaps."""
        assert Redactor(("aaaa",)).text("a" * 9) == f"{MASK}{MASK}a"

    def test_bytes_and_text_agree(self) -> None:
        redactor = Redactor(("clé🔑-1",))
        assert redactor.data("x clé🔑-1 y".encode()) == redactor.text("x clé🔑-1 y").encode()

    def test_empty_secrets_are_ignored(self) -> None:
        """An empty secret would match everywhere; it is dropped."""
        assert Redactor(("", "abcd")).text("xy abcd") == f"xy {MASK}"
        assert Redactor(("",)).text("xy") == "xy"

    def test_response_masks_every_string_the_model_wrote(self) -> None:
        call = ToolCall(id="id-abcd", name="abcd_tool", arguments='{"k": "abcd"}')
        answer = ModelResponse(text="a abcd", tool_calls=(call,), finish_reason="stop")
        masked = Redactor(("abcd",)).response(answer)
        assert masked == ModelResponse(
            text=f"a {MASK}",
            tool_calls=(ToolCall(id=f"id-{MASK}", name=f"{MASK}_tool", arguments='{"k": "***"}'),),
            finish_reason="stop",
        )
        assert Redactor(()).response(answer) is answer


class TestStreamRedactor:
    """Examples of what the property below checks in general."""

    def test_plain_text_passes_straight_through(self) -> None:
        stream = StreamRedactor(Redactor(("sk-abcd",)))
        assert [stream.feed(p) for p in ("hel", "lo ", "you")] == ["hel", "lo ", "you"]
        assert stream.held == 0

    def test_a_key_in_three_character_pieces(self) -> None:
        stream = StreamRedactor(Redactor(("sk-abcd",)))
        shown = [stream.feed(p) for p in ("my ", "sk-", "abc", "d! ")]
        assert shown == ["my ", "", "", f"{MASK}! "]

    def test_a_held_tail_that_is_no_secret_is_released_as_is(self) -> None:
        stream = StreamRedactor(Redactor(("sk-abcd",)))
        assert stream.feed("ask-ab") == "a"
        assert stream.held == 5
        assert stream.feed("x") == "sk-abx"
        assert stream.held == 0

    def test_a_secret_that_may_grow_into_a_longer_one_waits(self) -> None:
        """ "abcd" is a secret, but "abcdef" too: "abcd" cannot be masked yet."""
        stream = StreamRedactor(Redactor(("abcd", "abcdef")))
        assert (stream.feed("abcd"), stream.feed("e"), stream.feed("!")) == ("", "", f"{MASK}e!")
        assert (stream.feed("abcd"), stream.flush()) == ("", MASK)

    def test_a_run_of_one_character(self) -> None:
        stream = StreamRedactor(Redactor(("aaaa",)))
        assert "".join(stream.feed("a") for _ in range(9)) + stream.flush() == f"{MASK}{MASK}a"

    def test_after_a_match_only_a_possible_secret_start_is_held(self) -> None:
        """ "cdQ" could begin "cdQRS", but "abcd" is masked first, and "Q" alone
        begins no secret: it shows at once."""
        stream = StreamRedactor(Redactor(("abcd", "cdQRS")))
        assert (stream.feed("abcdQ"), stream.held) == (f"{MASK}Q", 0)

    def test_the_end_of_the_stream_flushes_the_held_tail(self) -> None:
        stream = StreamRedactor(Redactor(("sk-abcd",)))
        assert (stream.feed("done sk-ab"), stream.flush()) == ("done ", "sk-ab")


@settings(max_examples=200, deadline=None)
@given(streams())
def test_a_stream_cut_anywhere_shows_what_the_whole_text_would(
    case: tuple[Redactor, str, list[str]],
) -> None:
    """Joined, the pieces shown are ``Redactor.text`` of the whole text; no
    prefix shown ever holds a secret; the held-back tail stays below the
    longest secret, and is empty whenever no end of the text so far could
    start a secret."""
    redactor, text, cut = case
    stream = StreamRedactor(redactor)
    shown, fed = "", ""
    for piece in cut:
        shown += stream.feed(piece)
        fed += piece
        assert shows_no_secret(redactor, shown)
        assert stream.held <= redactor.longest - 1
        if not any(is_proper_prefix(redactor, fed[i:]) for i in range(len(fed))):
            assert stream.held == 0
    shown += stream.flush()
    assert shown == redactor.text(text)
    assert shows_no_secret(redactor, shown)


@settings(max_examples=120, deadline=None)
@given(streams())
def test_settle_holds_back_only_a_possible_secret_start(
    case: tuple[Redactor, str, list[str]],
) -> None:
    """For every start of a text, what ``settle`` holds back is the raw end of
    that start and a proper prefix of a secret (the minimum: a secret may
    begin there); what it shows, followed by the rest masked with the rest of
    the text, is the whole text masked."""
    redactor, text, _ = case
    for cut in range(len(text) + 1):
        shown, rest = redactor.settle(text[:cut])
        assert text[:cut].endswith(rest)
        assert rest == "" or is_proper_prefix(redactor, rest)
        assert shown + redactor.text(rest + text[cut:]) == redactor.text(text)


@st.composite
def delta_streams(draw: st.DrawFn) -> tuple[Redactor, list[TextDelta | ToolCallDelta]]:
    """Text deltas and the fragments of up to three tool calls, interleaved.
    Each call comes as servers send it: its id with its name's first piece,
    maybe more name pieces, then its arguments in pieces (the last name piece
    may carry the first)."""
    redactor = Redactor(draw(secret_sets))
    strings = texts(redactor.secrets, parts=6)
    queues: list[list[TextDelta | ToolCallDelta]] = [
        [TextDelta(text=t) for t in draw(pieces(draw(strings)))]
    ]
    for index in range(draw(st.integers(0, 3))):
        names = [n for n in draw(pieces(draw(strings.filter(bool)))) if n]
        arguments = draw(pieces(draw(strings)))
        fragments = [ToolCallDelta(index=index, name=n) for n in names]
        fragments[0] = attrs.evolve(fragments[0], id=draw(strings.filter(bool)))
        if draw(st.booleans()):
            fragments[-1] = attrs.evolve(fragments[-1], arguments=arguments.pop(0))
        fragments += [ToolCallDelta(index=index, arguments=a) for a in arguments]
        queues.append(fragments)
    deltas: list[TextDelta | ToolCallDelta] = []
    while any(queues):
        queue = draw(st.sampled_from([q for q in queues if q]))
        deltas.append(queue.pop(0))
    return redactor, deltas


def assemble(deltas: Sequence[TextDelta | ToolCallDelta]) -> ModelResponse:
    """The answer the deltas make, put together as ``ChunkAccumulator`` does."""
    text = "".join(d.text for d in deltas if isinstance(d, TextDelta))
    calls: dict[int, list[str]] = {}
    for d in deltas:
        if isinstance(d, ToolCallDelta):
            call = calls.setdefault(d.index, ["", "", ""])
            call[0] = call[0] or (d.id or "")
            call[1] += d.name or ""
            call[2] += d.arguments
    return ModelResponse(
        text=text or None,
        tool_calls=[ToolCall(id=i, name=n, arguments=a) for _, (i, n, a) in sorted(calls.items())],
    )


@settings(max_examples=80, deadline=None)
@given(delta_streams(), st.data())
def test_masked_deltas_add_up_to_the_masked_answer(
    case: tuple[Redactor, list[TextDelta | ToolCallDelta]], data: st.DataObject
) -> None:
    """Whatever the deltas, fed in any batches, the masked ones add up to
    ``Redactor.response`` of the answer; no stream of them (the text, a call's
    name or arguments) ever shows a secret; each call's first delta carries
    its id and a name."""
    redactor, deltas = case
    masker = StreamMasker(redactor)
    shown: list[TextDelta | ToolCallDelta] = []
    batches = data.draw(pieces("x" * len(deltas)))
    start = 0
    for batch in batches:
        shown += masker.feed(deltas[start : start + len(batch)])
        start += len(batch)
        for stream in streams_of(shown):
            assert shows_no_secret(redactor, stream)
    shown += masker.flush()
    expected = redactor.response(assemble(deltas))
    assert assemble(shown) == expected
    for stream in streams_of(shown):
        assert shows_no_secret(redactor, stream)
    firsts = {}
    for d in shown:
        if isinstance(d, ToolCallDelta):
            firsts.setdefault(d.index, d)
    for index, first in firsts.items():
        call = expected.tool_calls[sorted(firsts).index(index)]
        assert first.id == call.id and first.name


def streams_of(deltas: Sequence[TextDelta | ToolCallDelta]) -> list[str]:
    joined = assemble(deltas)
    calls = [s for c in joined.tool_calls for s in (c.name, c.arguments)]
    return [joined.text or "", *calls]


def test_a_settled_name_opens_its_call_at_once() -> None:
    masker = StreamMasker(Redactor(("sk-abcd",)))
    first = ToolCallDelta(index=0, arguments="", id="c1", name="time_now")
    assert masker.feed([first]) == [first]


def test_a_name_whose_end_could_start_a_secret_waits_for_the_arguments() -> None:
    """ "clock_now" ends with the start of "now-secret": the call opens, with
    its whole name, when its arguments begin, not at the end of the stream."""
    masker = StreamMasker(Redactor(("now-secret",)))
    assert masker.feed([ToolCallDelta(index=0, id="c1", name="clock_now")]) == []
    shown = masker.feed([ToolCallDelta(index=0, arguments='{"tz": "UTC"}')])
    assert shown == [ToolCallDelta(index=0, arguments='{"tz": "UTC"}', id="c1", name="clock_now")]


def test_name_pieces_after_the_arguments_are_not_streamed() -> None:
    """A server that sent more of a name after its arguments began: the call
    was opened already, so no delta joins the two pieces into a secret."""
    masker = StreamMasker(Redactor(("now-secret",)))
    fragments = [
        ToolCallDelta(index=0, id="c1", name="x_now", arguments="{"),
        ToolCallDelta(index=0, name="-secret", arguments="}"),
    ]
    shown = masker.feed(fragments) + masker.flush()
    assert shown == [
        ToolCallDelta(index=0, arguments="{", id="c1", name="x_now"),
        ToolCallDelta(index=0, arguments="}"),
    ]


def test_without_secrets_deltas_pass_unchanged() -> None:
    deltas: list[TextDelta | ToolCallDelta] = [
        TextDelta(text="a"),
        ToolCallDelta(index=0, id="c", name="n"),
    ]
    assert StreamMasker(Redactor(())).feed(deltas) == deltas

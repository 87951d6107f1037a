"""The dialects under the shared SQL (``agentik.storage._dialect``): placeholders
translated token by token, values that come back as they went in. What the
statements do is the contract's and the backends-agree machine's to check, on
both backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from agentik.storage._dialect import psycopg_placeholders
from agentik.storage.postgres._queries import QUERIES as POSTGRES
from agentik.storage.sqlite._queries import QUERIES as SQLITE

_NAMES = st.from_regex(r"[a-z_]{1,8}", fullmatch=True)
_WORDS = st.from_regex(r"[A-Za-z0-9_.,()<>=*']{1,8}", fullmatch=True)

# Each token of a statement and what psycopg must be given for it.
_TOKENS = st.one_of(
    _WORDS.map(lambda w: (w, w)),
    st.just(("?", "%s")),
    st.just(("%", "%%")),
    _NAMES.map(lambda n: (f":{n}", f"%({n})s")),
    st.tuples(_NAMES, _NAMES).map(lambda p: (f":{p[0]}::{p[1]}", f"%({p[0]})s::{p[1]}")),
    _NAMES.map(lambda t: (f"x::{t}", f"x::{t}")),
)


@given(st.lists(_TOKENS, max_size=30))
def test_placeholders_become_psycopgs_token_by_token(tokens: list[tuple[str, str]]) -> None:
    """``?`` and ``:name`` become ``%s`` and ``%(name)s``, ``%`` is escaped, a
    ``::type`` cast (after a placeholder or not) and everything else stay."""
    statement = " ".join(original for original, _ in tokens)
    assert psycopg_placeholders(statement) == " ".join(wanted for _, wanted in tokens)


_TEXT = st.text(st.characters(exclude_categories=["Cs"]))
_TIMES = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(9999, 1, 1), timezones=st.just(UTC)
)


@given(_TEXT, _TIMES, st.lists(st.integers(-(2**70), 2**70)))
def test_values_come_back_as_they_went_in(text: str, at: datetime, ids: list[int]) -> None:
    """Any text (NUL, emoji) and any aware time to the microsecond, through
    either dialect's binding and back; the ids a dialect binds are the set
    given (PostgreSQL drops those no bigint can be: they match no note)."""
    for queries in (SQLITE, POSTGRES):
        d = queries.d
        assert d.text_of(d.text(text)) == text
        assert d.time_of(d.time(at)) == at
        assert d.time_of(d.time(at)).utcoffset() == timedelta(0)
    bound = POSTGRES.d.ids(ids)
    assert bound == sorted({i for i in ids if -(2**63) <= i < 2**63})

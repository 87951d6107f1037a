"""``HistoryCache.fold``: a summary that lands drops from the cache exactly
what it covers, or nothing, and the cache's invariants hold either way
(``history[i]`` is seq ``first_seq + i``; keys and costs only of what is
cached). Hypothesis over caches, earlier summaries, and summaries of any
point, before, inside and past what the cache holds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentik._messages import Message, Role
from agentik.agent._history_cache import HistoryCache
from agentik.storage import Summary


def cache_of(first_seq: int, roles: list[Role], loaded: bool) -> HistoryCache:
    runtime = None  # fold reads no runtime
    cache = HistoryCache("c", runtime, [], lambda: None)  # type: ignore[arg-type]
    cache.first_seq = first_seq
    seqs = range(first_seq, first_seq + len(roles))
    cache.history = [Message(r, f"m{seq}", seq=seq) for seq, r in zip(seqs, roles, strict=True)]
    cache.keys = {f"k{m.seq}": m.seq for m in cache.history if m.role is Role.USER and m.seq}
    cache.costs = {m.seq: 10 for m in cache.history if m.seq is not None}
    cache.loaded = loaded
    if first_seq > 1:
        cache.summary = Summary(through_seq=first_seq - 1, text="earlier")
    return cache


def invariants(cache: HistoryCache) -> None:
    for i, message in enumerate(cache.history):
        assert message.seq == cache.first_seq + i
    cached = {m.seq for m in cache.history}
    assert set(cache.keys.values()) <= cached
    assert set(cache.costs) <= cached


@given(
    first_seq=st.integers(1, 50),
    roles=st.lists(st.sampled_from([Role.USER, Role.ASSISTANT, Role.TOOL]), max_size=30),
    through_offset=st.integers(-5, 35),
    loaded=st.booleans(),
)
def test_a_summary_folds_exactly_what_it_covers_or_nothing(
    first_seq: int, roles: list[Role], through_offset: int, loaded: bool
) -> None:
    cache = cache_of(first_seq, roles, loaded)
    before = list(cache.history)
    through = first_seq - 1 + through_offset
    summary = Summary(through_seq=through, text="summary")
    cache.fold(summary)
    invariants(cache)
    covers_cached = loaded and 0 < through_offset <= len(before)
    if covers_cached:  # dropped what it covers; the rest is as it was
        assert cache.summary is summary and cache.summary_message is not None
        assert cache.first_seq == through + 1
        assert cache.history == before[through_offset:]
        assert cache.had_history
    else:  # already covered, past the cache, or the cache not loaded: nothing
        assert cache.history == before and cache.first_seq == first_seq
        assert cache.summary is not summary

"""find_tools' ranking: BM25 held to rank_bm25 as the oracle, on random corpora."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25Okapi

from agentik.toolsets._search import BM25, words


class LuceneIdfOkapi(BM25Okapi):  # type: ignore[misc]
    """rank_bm25's Okapi scoring with Lucene's never-negative idf, which
    agentik uses (rank_bm25's own floors negative idfs at a share of the mean)."""

    def _calc_idf(self, nd: dict[str, int]) -> None:
        for word, freq in nd.items():
            self.idf[word] = math.log(1 + (self.corpus_size - freq + 0.5) / (freq + 0.5))


TERMS = st.sampled_from(["git", "log", "issue", "create", "file", "read", "web", "x", "y"])


@settings(max_examples=300, deadline=None)
@given(
    corpus=st.lists(st.lists(TERMS, min_size=1, max_size=12), min_size=1, max_size=20),
    query=st.lists(TERMS, min_size=1, max_size=4),
)
def test_scores_equal_the_oracle(corpus: list[list[str]], query: list[str]) -> None:
    ours = BM25(corpus).scores(query)
    oracle = LuceneIdfOkapi(corpus).get_scores(query)
    assert ours == pytest.approx(list(oracle), rel=1e-9, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(
    corpus=st.lists(st.lists(TERMS, min_size=1, max_size=12), min_size=1, max_size=20),
    query=st.lists(TERMS, min_size=1, max_size=4),
    limit=st.integers(1, 25),
)
def test_top_is_the_best_positive_scores_in_order(
    corpus: list[list[str]], query: list[str], limit: int
) -> None:
    index = BM25(corpus)
    scores = index.scores(query)
    top = index.top(query, limit)
    assert len(top) == min(limit, sum(1 for s in scores if s > 0))
    assert [scores[i] for i in top] == sorted((scores[i] for i in top), reverse=True)
    if top:
        left_out = [scores[i] for i in range(len(corpus)) if i not in top]
        assert all(scores[top[-1]] >= s for s in left_out)


def test_words_split_names_and_drop_plurals() -> None:
    assert words("github_createIssue: Create issues, read FILES") == [
        "github",
        "create",
        "issue",
        "create",
        "issue",
        "read",
        "file",
    ]
    assert words("access class") == ["access", "class"]

"""Ranking tools by a query: Okapi BM25 over names and descriptions. Pure.

Offline on purpose: no model, no embedding, no download; a catalog of a few
thousand tools is indexed in milliseconds, once per ``ToolsetIndex``.

A tool's document is its name, its description and its toolset's name and
description (a query for "git" finds ``git_log``). Words are lowercase runs
of letters and digits of any script (in NFKC form: a fullwidth or decomposed
letter is the plain one), camelCase and ``snake_case`` split, and a plural
``s`` dropped (``issues`` finds ``create_issue``). Scores are BM25 with k1 = 1.5,
b = 0.75 and Lucene's idf, ``log(1 + (N - n + 0.5) / (n + 0.5))``, which is
never negative, so a word in most tools still counts a little. Written here,
not taken from rank_bm25 (the tests' oracle for these scores): that package
brings numpy into every install for some forty lines of arithmetic.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

K1 = 1.5
B = 0.75

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD = re.compile(r"[^\W_]+")
"""Letters and digits of any script: an MCP server's catalog in Russian is
searched in Russian words, not in the ASCII letters among them."""


def words(text: str) -> list[str]:
    """The terms of ``text``, in order (repeats kept)."""
    out = []
    text = unicodedata.normalize("NFKC", text)
    for word in _WORD.findall(_CAMEL.sub(" ", text).lower()):
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        out.append(word)
    return out


class BM25:
    """Okapi BM25 over a fixed list of documents (each a list of terms).

    Postings per term, so a query costs what its terms' documents do, not
    the whole catalog.
    """

    __slots__ = ("_count", "_idf", "_postings")

    def __init__(self, documents: Sequence[Sequence[str]]) -> None:
        count = len(documents)
        lengths = [len(doc) for doc in documents]
        avgdl = (sum(lengths) / count) if count else 1.0
        postings: dict[str, list[tuple[int, float]]] = {}
        for i, doc in enumerate(documents):
            norm = K1 * (1.0 - B + B * lengths[i] / (avgdl or 1.0))
            for term, freq in Counter(doc).items():
                # The term's weight in this document, but for its idf.
                postings.setdefault(term, []).append((i, freq * (K1 + 1.0) / (freq + norm)))
        self._count = count
        self._postings = postings
        self._idf = {
            term: math.log(1.0 + (count - len(docs) + 0.5) / (len(docs) + 0.5))
            for term, docs in postings.items()
        }

    def scores(self, query: Sequence[str]) -> list[float]:
        """Each document's score for ``query`` (a repeated term counts again).

        Term by term in sorted order, each once with its count: the same
        words in any order give the same floats, so two tools that tie stay
        in document order whatever the query's word order; and a query of one
        word repeated 50,000 times costs what one does (the search runs on
        the conversation's task, beside every other conversation)."""
        out = [0.0] * self._count
        for term, times in sorted(Counter(query).items()):
            docs = self._postings.get(term)
            if docs is None:
                continue
            gain = self._idf[term] * times
            for i, weight in docs:
                out[i] += gain * weight
        return out

    def top(self, query: Sequence[str], limit: int) -> list[int]:
        """The indexes of the ``limit`` best documents with a positive score,
        best first; ties in document order."""
        scores = self.scores(query)
        ranked = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: -scores[i])
        return ranked[:limit]

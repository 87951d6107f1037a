"""An outside tester's inputs for the toolsets: odd ``find_tools`` queries,
odd ``tools`` lists for ``enable_toolset``, and random switch sequences
under a tools budget, driven through a real agent where the behaviour is
the agent's and through the toolsets API where it is pure.

The answers must be answers (a result, or an error result the model reads),
never an exception out of the turn; rankings are the same for the same
words; a refused enable changes nothing; and the tools array a request
carries is the budget reference's (``tests/toolsets/test_budget_properties``)
with the seed's exact texts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentik import ContextPolicy, ModelRequest, ModelResponse, Role, ToolCall
from agentik._errors import ToolError
from agentik._json import JsonObject, JsonValue
from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import in_memory_storage, open_sqlite_storage
from agentik.testing import history
from agentik.toolsets import (
    ENABLE_TOOLSET_PARAMETERS,
    FIND_TOOLS_PARAMETERS,
    TOOLSET_NAME_PARAMETERS,
    Error,
    NamedTool,
    ToolCosts,
    ToolsetActivation,
    ToolsetContribution,
    ToolsetIndex,
    disable_answer,
    enable_answer,
    find_answer,
    parse_arguments,
)
from agentik.toolsets._budget import OverBudget
from agentik.toolsets._search import BM25
from tests.toolsets.test_budget_properties import _count, _ops, _Reference, catalogs

# ---------------------------------------------------------------- catalogs


async def _ok(arguments: JsonObject) -> str:
    return "ok"


def _tool(name: str, description: str) -> NamedTool:
    return NamedTool(name, description, {"type": "object", "properties": {}}, _ok)


WORDY = ToolsetIndex(
    [
        ToolsetContribution(
            "github",
            "Issues, pull requests and code search",
            [
                _tool("github_create_issue", "Create a new issue in a repository."),
                _tool("github_list_pulls", "List the pull requests of a repository."),
                _tool("github_search_code", "Search code across repositories; a regex (.*) works."),
                _tool("github_getRepo", "Get a repository's metadata."),
            ],
        ),
        ToolsetContribution(
            "files",
            "Read and write local files",
            [
                _tool("files_read", "Read a file from disk."),
                _tool("files_write", "Write a file to disk.\nSecond line."),
                _tool("files_list", "List a directory: SELECT * FROM files, so to speak."),
            ],
        ),
        ToolsetContribution(
            "web",
            "Fetch and search the web (العربية, עברית, 日本語)",
            [
                _tool("web_fetch", "Fetch a URL; \u0661\u0662\u0663 Arabic-Indic digits."),
                _tool("web_search", "Search the web for a query, café, naïve."),
            ],
        ),
    ],
    ToolCosts(lambda text: len(text) // 3),
)
TOOL_NAMES = [t.name for c in WORDY for t in c.tools]

# ------------------------------------------------------- odd query strategy

ODD = [
    "",
    " ",
    "\t\n\r ",
    "\u3000\u2003",  # ideographic and em spaces (str.strip removes them)
    "\u200b",  # zero-width space: not whitespace to str.strip
    "\ud800",  # a lone surrogate, as json.loads gives for "\\ud800"
    "\udfff issue \ud83d",
    "\u0663\u0661",  # Arabic-Indic digits
    "ISSUE\u0301\u0327",  # combining marks
    "\u202eeussi etaerc\u202c",  # RTL override
    "\u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    "!!!???...,,,;;;",
    "'; DROP TABLE tools; --",
    "SELECT * FROM files WHERE 1=1 OR ''=''",
    ".* (?:a|b)+ [^x] \\d{3} $^ \\",
    "%s %(x)s {0} {query} %%",
    "\x00\x01\x7f",
    "K\u212a",  # Kelvin sign: lowercases to ASCII k
    "issue" * 3,
    "createIssue getRepo",
    "read read read read read",
]


def queries() -> st.SearchStrategy[str]:
    """Text a model could send: any code point (lone surrogates too), the odd
    cases above, mixtures of catalog words and noise, and very long text."""
    any_char = st.characters(exclude_categories=())
    word = st.sampled_from(["issue", "repository", "file", "web", "search", "a", "the", "read"])
    noise = st.one_of(st.text(any_char, max_size=4), st.sampled_from(ODD))
    mixed = st.lists(st.one_of(word, noise), max_size=12).map(" ".join)
    long = st.tuples(st.sampled_from(["a ", "repository ", "\ud800", "x", "! "]), st.integers(1, 4))
    return st.one_of(
        st.text(any_char, max_size=60),
        st.sampled_from(ODD),
        mixed,
        long.map(lambda pair: pair[0] * (pair[1] * 25_000)),
    )


def _rows(answer: str) -> list[str]:
    """The tool names an answer lists, best first."""
    return [row.split(" ", 1)[0] for row in answer.split("\n")[1:]]


# ------------------------------------------------------- find_tools, pure


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(query=queries(), limit=st.integers(1, 20))
def test_find_answers_any_text_and_ranks_it_the_same_way_every_time(query: str, limit: int) -> None:
    """Any query is an answer, or, when it has nothing but whitespace, the
    error naming what to pass; the same words rank the same tools in the
    same order, on this index and a fresh one, and noise around them
    (punctuation, marks, RTL controls) changes nothing."""
    arguments: JsonObject = {"query": query, "limit": limit}
    if not query.strip():
        with pytest.raises(ToolError, match=r"^query (is missing|must be a non-empty string)"):
            find_answer(WORDY, arguments)
        return
    answer = find_answer(WORDY, arguments)
    assert answer.startswith(("Tools matching ", "No tool matches "))
    rows = _rows(answer)
    assert len(rows) <= limit
    assert len(set(rows)) == len(rows)
    assert set(rows) <= set(TOOL_NAMES)
    if answer.startswith("No tool matches "):
        assert rows == []
        assert answer.endswith("The toolsets are: github, files, web.")
    else:
        assert rows
    assert find_answer(WORDY, arguments) == answer
    fresh = ToolsetIndex(list(WORDY), ToolCosts(lambda text: len(text) // 3))
    assert find_answer(fresh, arguments) == answer
    noisy = f"\u202e!! {query} \u0301?;\u200f"
    assert _rows(find_answer(WORDY, {"query": noisy, "limit": limit})) == rows


@settings(max_examples=200, deadline=None)
@given(
    terms=st.lists(
        st.sampled_from(["issue", "repository", "file", "web", "search", "read", "list", "a"]),
        min_size=1,
        max_size=6,
    ),
    data=st.data(),
)
def test_the_order_of_the_words_does_not_change_the_ranking(
    terms: list[str], data: st.DataObject
) -> None:
    """A query is a bag of words: any order of the same words ranks alike."""
    shuffled = data.draw(st.permutations(terms))
    first = find_answer(WORDY, {"query": " ".join(terms), "limit": 20})
    second = find_answer(WORDY, {"query": " ".join(shuffled), "limit": 20})
    assert _rows(first) == _rows(second)


FOREIGN = ToolsetIndex(
    [
        ToolsetContribution(
            "tracker",
            "Задачи и тикеты",
            [
                _tool("tracker_create", "Создать задачу в репозитории."),
                _tool("tracker_close", "Créer un rapport, fermer un ticket résolu."),
                _tool("tracker_files", "Αρχεία του έργου."),
            ],
        ),
        ToolsetContribution("mail", "Send mail", [_tool("mail_send", "Send an email.")]),
    ],
    ToolCosts(lambda text: 1),
)


@pytest.mark.parametrize(
    ("query", "first"),
    [
        ("создать задачу", "tracker_create"),
        ("РЕПОЗИТОРИИ", "tracker_create"),
        ("ticket résolu", "tracker_close"),
        ("ticket re\u0301solu", "tracker_close"),  # the accent as a combining mark
        ("ΑΡΧΕΊΑ", "tracker_files"),
        ("ｅｍａｉｌ", "mail_send"),  # fullwidth letters
    ],
)
def test_words_are_letters_and_digits_of_any_script(query: str, first: str) -> None:
    """A catalog written in Russian, French or Greek is searchable in its own
    words (letters and digits of any script, compared in NFKC form), not
    only in the ASCII letters among them."""
    assert _rows(find_answer(FOREIGN, {"query": query}))[0] == first


def test_a_tie_stays_in_catalog_order_whatever_the_word_order() -> None:
    """The case Hypothesis found: both tools score the same, but summed in
    the query's order the floats differed in the last bit, and the word
    order decided which came first."""
    for query in ("repository read list a", "a read list repository"):
        rows = _rows(find_answer(WORDY, {"query": query, "limit": 2}))
        assert rows == ["github_list_pulls", "files_list"]


def test_a_long_query_is_answered_quickly_and_quoted_short() -> None:
    """100 KB of words is still an answer, and the answer quotes the query,
    never repeats 100 KB of it back into the context."""
    for query in ("a " * 50_000, "repository " * 10_000, "\ud800" * 100_000, "x" * 100_000):
        answer = find_answer(WORDY, {"query": query})
        assert len(answer.split("\n", 1)[0]) < 1_000
    # Cut to 80 characters of the query, at a word's end when it can be.
    assert find_answer(WORDY, {"query": " issue" * 30}).startswith(
        f"Tools matching '{'issue ' * 13}i…', best first."
    )
    assert find_answer(WORDY, {"query": "zz " * 30}) == (
        f"No tool matches '{'zz ' * 26}z…'; try other words. The toolsets are: github, files, web."
    )
    exact = "i" * 80  # up to 80 characters, quoted whole
    assert find_answer(WORDY, {"query": exact}).startswith(f"No tool matches '{exact}';")


class _Counting(dict[str, list[tuple[int, float]]]):
    """Postings that count their look-ups: the work a query does."""

    looked_up = 0

    def get(self, key: str, default: object = None) -> list[tuple[int, float]] | None:  # type: ignore[override]
        self.looked_up += 1
        return super().get(key)


def test_a_query_costs_one_look_up_per_distinct_word() -> None:
    """50,000 times the same word is one word's work, not 50,000 passes over
    its postings on the conversation's task (1.3 s on a 250-tool catalog)."""
    ranking = BM25([["a", "file"], ["a", "web"], ["read", "file"]])
    postings = _Counting(ranking._postings)
    ranking._postings = postings
    assert ranking.top(["a"] * 50_000 + ["file"] * 20_000 + ["zzz"], 3) == [0, 1, 2]
    assert postings.looked_up == 3


@pytest.mark.parametrize("limit", [1.0, 5.0, 20.0])
def test_a_whole_number_limit_the_schema_accepts_is_accepted(limit: float) -> None:
    """JSON Schema's integer takes 5.0, so the arguments check lets it
    through; the handler must not then refuse it as not an integer."""
    tool = NamedTool("find_tools", "search", FIND_TOOLS_PARAMETERS, _ok)
    arguments = parse_arguments(tool, json.dumps({"query": "issue", "limit": limit}))
    answer = find_answer(WORDY, arguments)
    assert answer == find_answer(WORDY, {"query": "issue", "limit": int(limit)})


@pytest.mark.parametrize("limit", [0.5, 2.5, 21.0, 0.0, -1.0])
def test_a_fractional_or_out_of_range_limit_is_still_refused(limit: float) -> None:
    with pytest.raises(ToolError, match=r"^limit must be an integer from 1 to 20, got a number "):
        find_answer(WORDY, {"query": "issue", "limit": limit})


# ------------------------------------------------- enable_toolset, tools list

_ITEMS = st.one_of(
    st.sampled_from(TOOL_NAMES),
    st.sampled_from(["github", "files", "web", "", " ", "github_", "GITHUB_CREATE_ISSUE"]),
    st.text(st.characters(exclude_categories=()), max_size=8),
    st.integers(),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.lists(st.sampled_from(TOOL_NAMES), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _tools_lists() -> st.SearchStrategy[JsonValue]:
    own = st.sampled_from(["github", "files", "web"]).flatmap(
        lambda n: st.lists(st.sampled_from([t for t in TOOL_NAMES if t.startswith(n + "_")]))
    )
    return st.one_of(
        st.lists(_ITEMS, max_size=8),
        own,
        own.map(lambda names: names * 3),  # duplicates
        own.map(lambda names: names * 5_000),  # huge
        st.just([]),
        st.sampled_from([None, "github_read", 3, {"x": 1}, True]),
    )


def _state(activation: ToolsetActivation) -> tuple[object, ...]:
    recency = activation.least_recently_used()
    expiry = tuple(activation.expires_in(name) for name in recency)
    return (activation.selection(), activation.offer_order(), recency, expiry)


@settings(max_examples=500, deadline=None)
@given(
    name=st.sampled_from(["github", "files", "web"]),
    before=st.lists(
        st.tuples(
            st.sampled_from(["github", "files", "web"]),
            st.none() | st.frozensets(st.sampled_from(TOOL_NAMES), min_size=1),
        ),
        max_size=3,
    ),
    tools=_tools_lists(),
)
def test_enable_with_a_tools_list_is_exactly_those_tools_or_changes_nothing(
    name: str,
    before: list[tuple[str, frozenset[str] | None]],
    tools: JsonValue,
) -> None:
    """A list of that toolset's tool names (duplicates and all) enables
    exactly those, added to those enabled of it; anything else (an empty
    list, an unknown name, another toolset's tool, a non-string) is an
    error that names the toolset's tools or the expectation, and changes
    nothing, not even the toolset's recency."""
    now = [0.0]
    activation = ToolsetActivation(clock=lambda: now[0])
    for other, picked in before:
        now[0] += 1
        own: list[JsonValue] = [t for t in sorted(picked or ()) if t.startswith(other + "_")]
        enable_answer(WORDY, activation, {"name": other, "tools": own or None})
    now[0] += 1
    state = _state(activation)
    earlier = activation.tools_of(name) if activation.is_active(name) else frozenset()
    known = [t.name for t in WORDY.get(name).tools]  # type: ignore[union-attr]
    good = (
        isinstance(tools, list)
        and bool(tools)
        and all(isinstance(t, str) and t in known for t in tools)
    )
    if tools is None:
        good = True
    if not good:
        with pytest.raises(ToolError) as caught:
            enable_answer(WORDY, activation, {"name": name, "tools": tools})
        assert _state(activation) == state
        message = str(caught.value)
        assert message.startswith(
            (
                f"tools must be a non-empty list of tool names of toolset {name!r}, got ",
                f"toolset {name!r} has no tool ",
            )
        )
        if message.startswith("toolset"):
            assert message.endswith(f"; its tools are: {', '.join(known)}")
        return
    answer = enable_answer(WORDY, activation, {"name": name, "tools": tools})
    assert isinstance(tools, list | None)
    if tools is None or earlier is None or set(tools) | (earlier or set()) >= set(known):
        expected = None
    else:
        expected = frozenset(tools) | earlier
    assert activation.tools_of(name) == expected
    if earlier is None or (expected is not None and expected == earlier):
        assert answer == f"Toolset {name!r} is already active."
    elif expected is None:
        assert answer == f"Toolset {name!r} activated."
    else:
        assert answer == f"Toolset {name!r} activated ({len(expected)} of its {len(known)} tools)."


_HUGE = "x" * 100_000


@pytest.mark.parametrize(
    ("call", "start"),
    [
        (("enable", {"name": _HUGE}), "unknown toolset 'xxx"),
        (("disable", {"name": _HUGE}), "unknown toolset 'xxx"),
        (("enable", {"name": "github", "tools": [_HUGE]}), "toolset 'github' has no tool 'xxx"),
        (("enable", {"name": "github", "tools": ["github_create_issue", _HUGE]}), "toolset"),
    ],
)
def test_a_huge_name_is_quoted_short_in_the_error(call: tuple[str, JsonObject], start: str) -> None:
    """What the model sent is quoted, never repeated whole: a 100 KB name is
    an error of a few lines, not 100 KB more of context."""
    switch = enable_answer if call[0] == "enable" else disable_answer
    with pytest.raises(ToolError) as caught:
        switch(WORDY, ToolsetActivation(clock=lambda: 0.0), call[1])
    assert str(caught.value).startswith(start)
    assert len(str(caught.value)) < 400


def test_a_huge_tool_name_is_quoted_short_when_not_found() -> None:
    decision = WORDY.dispatch(frozenset(), ToolCall("c", "github_" + _HUGE, "{}"), {})
    assert isinstance(decision, Error)
    assert decision.message == f"tool 'github_{'x' * 56}…' not found"


def test_a_name_of_up_to_64_characters_is_quoted_whole() -> None:
    """Valid names are at most 64 characters: their errors are unchanged."""
    name = "n" * 64
    with pytest.raises(ToolError, match=rf"^unknown toolset '{name}'; available toolsets: "):
        enable_answer(WORDY, ToolsetActivation(clock=lambda: 0.0), {"name": name})
    decision = WORDY.dispatch(frozenset(), ToolCall("c", name, "{}"), {})
    assert decision == Error(f"tool '{name}' not found")


_ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=6)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _ANY_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_ANY_TEXT, inner, max_size=3),
    max_leaves=6,
)
_SWITCHES: dict[str, tuple[JsonObject, Callable[[ToolsetActivation, JsonObject], str]]] = {
    "enable_toolset": (ENABLE_TOOLSET_PARAMETERS, lambda on, a: enable_answer(WORDY, on, a, 50)),
    "disable_toolset": (TOOLSET_NAME_PARAMETERS, lambda on, a: disable_answer(WORDY, on, a)),
    "find_tools": (FIND_TOOLS_PARAMETERS, lambda on, a: find_answer(WORDY, a)),
}


@settings(max_examples=400, deadline=None)
@given(
    tool=st.sampled_from(sorted(_SWITCHES)),
    arguments=st.dictionaries(
        st.sampled_from(["name", "tools", "query", "limit"]) | _ANY_TEXT, _JSON, max_size=3
    ),
)
@example(tool="find_tools", arguments={"query": "x", "limit": "\ud800"})
@example(tool="enable_toolset", arguments={"name": ["\ud83d"]})
def test_every_answer_of_the_switches_can_be_stored(tool: str, arguments: JsonObject) -> None:
    """The model's JSON may escape a lone surrogate ("\\ud800": a split
    emoji); an answer or error that repeats it must escape it again, or no
    UTF-8 store (SQLite, PostgreSQL) can keep the result and the turn fails."""
    parameters, answer = _SWITCHES[tool]
    named = NamedTool(tool, "switch", parameters, _ok)
    raw = json.dumps(arguments)  # ASCII: what a provider sends
    try:
        checked = parse_arguments(named, raw)
        text = answer(ToolsetActivation(clock=lambda: 0.0), checked)
    except ToolError as error:
        text = str(error)
    text.encode("utf-8")


def test_a_lone_surrogate_in_the_arguments_does_not_fail_a_turn_on_sqlite(tmp_path: Path) -> None:
    """Through an agent on a real SQLite file: the calls' error results are
    stored and the turn ends; before, the store refused the raw surrogate the
    error repeated and the turn failed (storage write failed)."""
    calls = (
        ToolCall("a", "find_tools", '{"query": "x", "limit": "\\ud800"}'),
        ToolCall("b", "enable_toolset", '{"name": ["\\ud83d"]}'),
        ToolCall("c", "enable_toolset", '{"name": "github", "tools": ["\\udc00"]}'),
        ToolCall("d", "find_tools", '{"query": "\\ud800 issue"}'),
    )
    model = _Model()
    model.calls = calls

    async def main() -> None:
        async with (
            open_sqlite_storage(str(tmp_path / "agent.db")) as storage,
            open_chat_agent(
                model=ScriptedModel(model),
                storage=storage,
                toolsets=list(WORDY),
                builtin_tools=False,
            ) as agent,
        ):
            result = await agent.send("c", "go")
            assert result.messages[-1].content == "done"
            stored = await history(storage, "c")
        assert [m.content for m in stored if m.role is Role.TOOL] == model.results

    trio.run(main)
    assert model.results[0].startswith("error: invalid arguments for tool 'find_tools'")
    assert model.results[1].endswith('got an array ["\\ud83d"]')
    assert model.results[2].startswith("error: toolset 'github' has no tool '\\udc00'")
    assert model.results[3].startswith("Tools matching '\\ud800 issue', best first.")


def test_over_the_budget_it_suggests_some_tools_only_when_one_would_fit() -> None:
    """'enable only the tools you need' is advice the model follows with
    another call: given for a toolset with one tool, or none that fits
    alone, that call could only fail the same way."""
    index = ToolsetIndex(
        [
            ToolsetContribution("one", "one", [_tool("one", "cost=30")]),
            ToolsetContribution(
                "two", "two", [_tool("two_a", "cost=30"), _tool("two_b", "cost=21")]
            ),
        ],
        ToolCosts(_count),
    )
    activation = ToolsetActivation(clock=lambda: 0.0)
    needs = "needs {} tokens of tool schemas, more than the tools budget of 20 tokens"
    for name, cost in (("one", 30), ("two", 51)):
        with pytest.raises(ToolError) as caught:
            enable_answer(index, activation, {"name": name}, 20)
        assert str(caught.value) == f"toolset {name!r} {needs.format(cost)}"
    with pytest.raises(ToolError) as caught:
        enable_answer(index, activation, {"name": "two"}, 25)
    assert str(caught.value).endswith(
        'enable only the tools you need: enable_toolset({"name": "two", "tools": [...]})'
    )
    assert activation.active_names() == frozenset()


# ------------------------------------------- random switches through an agent


def _quote(names: Sequence[str], name: str) -> str:
    """The doc's wording for what was switched off (its table, written out)."""
    said = ["its other tools" if n == name else f"'{n}'" for n in names]
    verb = "was" if len(said) == 1 and names[0] != name else "were"
    listed = said[0] if len(said) == 1 else f"{', '.join(said[:-1])} and {said[-1]}"
    return f"{listed} {verb} switched off to make room."


def _expected_enable(ref: _Reference, name: str, tools: frozenset[str] | None, now: float) -> str:
    """The enable answer the docs' table gives, applying it to ``ref``."""
    if tools is not None and not tools:
        return (
            f"error: tools must be a non-empty list of tool names of toolset {name!r},"
            " got an array []"
        )
    rec = ref.on.get(name)
    if rec is not None and (rec.tools is None or (tools is not None and tools <= rec.tools)):
        ref.enable(name, tools, now)
        return f"Toolset {name!r} is already active."
    outcome = ref.enable(name, tools, now)
    if isinstance(outcome, OverBudget):
        text = (
            f"error: toolset {name!r} needs {outcome.needed:,} tokens of tool schemas, more"
            f" than the tools budget of {outcome.budget:,} tokens"
        )
        cheapest = min(_count(t.description) for t in ref.index.get(name).tools)  # type: ignore[union-attr]
        if ref.whole(name, tools) is None and cheapest <= ref.budget:  # some tools would fit
            text += (
                f'; enable only the tools you need: enable_toolset({{"name": "{name}",'
                ' "tools": [...]})'
            )
        return text
    text = f"Toolset {name!r} activated"
    now_tools = ref.on[name].tools
    if now_tools is not None:
        text += f" ({len(now_tools)} of its {len(ref.index.get(name).tools)} tools)"  # type: ignore[union-attr]
    return f"{text}; {_quote(outcome, name)}" if outcome else f"{text}."


class _Model:
    """Makes the scripted calls (one response, run as a batch) on a turn's
    first request, then answers; keeps every request and the results."""

    def __init__(self) -> None:
        self.calls: tuple[ToolCall, ...] = ()
        self.requests: list[ModelRequest] = []
        self.results: list[str] = []
        """The latest batch's results, in the order of its calls."""

    def __call__(self, request: ModelRequest) -> ModelResponse:
        assert request.purpose == "turn"
        self.requests.append(request)
        if request.messages[-1].role is Role.TOOL:
            by_id = {m.tool_call_id: m.content for m in request.messages if m.role is Role.TOOL}
            self.results = [by_id[c.id] for c in self.calls]
            return ModelResponse(text="done")
        if not self.calls:
            return ModelResponse(text="nothing to do")
        return ModelResponse(tool_calls=self.calls)


def _run_agent(index: ToolsetIndex, budget: int, body: Callable[..., object]) -> None:
    clock = trio.testing.MockClock()

    async def main() -> None:
        model = _Model()
        policy = ContextPolicy(max_tokens=10**7, tools_budget=budget, count_tokens=_count)
        async with open_chat_agent(
            model=ScriptedModel(model),
            storage=in_memory_storage(),
            toolsets=list(index),
            builtin_tools=False,
            context=policy,
            idle_timeout=10**6,
        ) as agent:
            await body(agent, model, clock)  # type: ignore[misc]

    trio.run(main, clock=clock)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), budget=st.integers(1, 200))
def test_random_switches_through_an_agent_keep_the_budget_lru_order_and_texts(
    data: st.DataObject, budget: int
) -> None:
    """enable_toolset (whole or some tools), disable_toolset, calls by name
    and expiry in random order, one or several calls per model response
    (in one instant: ties in recency go to the earlier switched on): every request's tools
    array is the core tools, then exactly the reference's toolset tools
    (least recently used out first, in activation order); their schemas
    never pass the budget; and every answer is the docs' text."""
    index = data.draw(catalogs())
    if not len(index):
        return
    ops = data.draw(_ops(index))
    batched = data.draw(st.lists(st.booleans(), min_size=len(ops), max_size=len(ops)))
    batches: list[list[tuple[str, str, frozenset[str] | None]]] = []
    for op, joins in zip(ops, batched, strict=True):
        if batches and joins and op[0] != "wait" and batches[-1][-1][0] != "wait":
            batches[-1].append(op)  # one more call of the same response
        else:
            batches.append([op])

    async def body(agent: object, model: _Model, clock: trio.testing.MockClock) -> None:
        ref = _Reference(index, budget, 600.0)
        core: list[str] | None = None
        for i, batch in enumerate(batches):
            clock.jump(1.0)
            if batch[0][0] == "wait":
                clock.jump(float(batch[0][1]))
                continue
            now = trio.current_time()
            ref.expire(now)
            calls: list[ToolCall] = []
            expected: list[str] = []
            for j, (op, name, tools) in enumerate(batch):
                if op == "disable":
                    calls.append(
                        ToolCall(f"c{i}_{j}", "disable_toolset", json.dumps({"name": name}))
                    )
                    if name in ref.on:
                        ref.switch_off(name)
                    expected.append(f"Toolset {name!r} deactivated.")
                elif op == "call":
                    calls.append(ToolCall(f"c{i}_{j}", name, "{}"))
                    ref.call(name, now)
                    expected.append("ok")
                else:
                    arguments: JsonObject = {"name": name}
                    if tools is not None:
                        arguments["tools"] = list[JsonValue](sorted(tools))
                    calls.append(ToolCall(f"c{i}_{j}", "enable_toolset", json.dumps(arguments)))
                    expected.append(_expected_enable(ref, name, tools, now))
            model.calls = tuple(calls)
            seen = len(model.requests)
            await agent.send("c", f"step {i}")  # type: ignore[attr-defined]
            assert model.results == expected, batch
            for request in model.requests[seen:]:
                offered = [t.name for t in request.tools]
                ours = [t for t in offered if index.toolset_of(t) is None]
                core = ours if core is None else core
                assert ours == core  # the same core tools, every request
                assert offered[: len(core)] == core  # and first
                toolset_part = offered[len(core) :]
                assert sum(_count(t.description) for t in request.tools[len(core) :]) <= budget
            assert toolset_part == ref.array  # after the calls: the reference's array

    _run_agent(index, budget, body)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    asked=st.lists(
        st.fixed_dictionaries(
            {"query": queries()},
            optional={"limit": st.sampled_from([1, 3, 20, 0, 21, 2.0, 2.5, "3", None, True])},
        ),
        min_size=1,
        max_size=4,
    )
)
def test_find_tools_through_an_agent_always_answers(asked: list[JsonObject]) -> None:
    """Whatever the query, the turn ends and the model reads an answer or an
    error result; the same call answers the same way again."""

    async def body(agent: object, model: _Model, clock: trio.testing.MockClock) -> None:
        for i, arguments in enumerate(asked):
            model.calls = (ToolCall(f"f{i}", "find_tools", json.dumps(arguments)),)
            answers = []
            for _ in range(2):
                result = await agent.send("c", f"find {i}")  # type: ignore[attr-defined]
                assert result.messages[-1].content == "done"
                answers += model.results
            first, second = answers
            assert first == second
            if first.startswith("error: "):
                assert first.startswith(
                    (
                        "error: query ",
                        "error: limit must be an integer from 1 to 20",
                        "error: invalid arguments for tool 'find_tools'",
                    )
                ), first
                assert not first.startswith("error: limit") or arguments.get("limit") != 2.0
            else:
                assert first.startswith(("Tools matching ", "No tool matches ")), first
            assert len(first) < 2_000

    _run_agent(WORDY, 50, body)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tools=_tools_lists(), name=st.sampled_from(["github", "files", "web"]))
def test_enable_with_odd_tools_through_an_agent_is_an_answer(tools: JsonValue, name: str) -> None:
    """Through the agent, the arguments check refuses what is not a list of
    strings before the handler sees it; either way the model reads an error
    result naming the problem, and the offered tools stay as they were."""
    known = [t.name for t in WORDY.get(name).tools]  # type: ignore[union-attr]

    async def body(agent: object, model: _Model, clock: trio.testing.MockClock) -> None:
        model.calls = (ToolCall("e", "enable_toolset", json.dumps({"name": name, "tools": tools})),)
        await agent.send("c", "enable")  # type: ignore[attr-defined]
        result = model.results[-1]
        first, after = model.requests[-2], model.requests[-1]
        good = (  # null is not an array: the arguments check refuses it
            isinstance(tools, list)
            and bool(tools)
            and all(isinstance(t, str) and t in known for t in tools)
        )
        if good:
            assert re.match(rf"^Toolset '{name}' activated", result), result
            assert isinstance(tools, list)
            assert {t.name for t in after.tools} - {t.name for t in first.tools} == set(tools)
        else:
            assert result.startswith("error: "), result
            assert [t.name for t in after.tools] == [t.name for t in first.tools]
            assert len(result) < 2_000

    _run_agent(WORDY, 10**5, body)

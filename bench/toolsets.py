"""What toolsets save: prompt tokens of tools per request on a real catalog.

Run: .venv/bin/python -m bench.toolsets [--tasks 60] [--seed 1] [--breaks]

The catalog (``bench/toolsets_catalog.json``) is the tool list of 24 real
MCP servers (247 tools: the official ``@modelcontextprotocol/server-*``
packages, ``mcp-server-fetch``/``-git``/``-time`` from PyPI, Playwright's,
Notion's, Kubernetes', Firecrawl's, Tavily's, Exa's, Context7's and Desktop
Commander's), as each answered ``tools/list``; ``bench/toolsets_list.py``
made it. Each server is one toolset.

The workload is one conversation of ``--tasks`` turns, each needing 1 to 3
random tools of the catalog. A scripted model behaves as a well-behaved model
would: it calls a tool it is offered; otherwise it gets it the way the
strategy allows, then calls it (a tool an earlier search in its window
found is not searched again). Strategies, each through a real agent:

- ``flat``: every schema on every request (no toolsets);
- ``toolsets``: agentik without a context policy: ``enable_toolset`` of the
  tool's whole toolset (nothing is bounded);
- ``budget+search``: ``ContextPolicy(max_tokens=32_000)`` (tools budget
  8,000): ``find_tools`` with words of the task, then ``enable_toolset`` of
  just the task's tools of that toolset, as ``find_tools``' answer says
  (added to those enabled of it; least recently used toolsets are switched
  off to make room);
- ``vendor search``: an emulation of the providers' tool search: the same
  ``find_tools``, but found tools are only ever added (no budget, nothing
  switched off).

Per strategy: the mean and total tokens of the tools array per request
(every tool, core ones included, by the offline estimate), the largest
request's, the share of requests whose tools array starts with the previous
request's (what a prompt cache can reuse of the tools array), the share
whose tools array equals the previous request's (providers render the tools
before the system prompt and the history, so any change of the array, an
append included, leaves only the array's unchanged part cached), the
largest the active toolsets' schemas got (against the budget), and for the
search strategies how often the needed tool was among ``find_tools``' five answers.
What a prompt cache saves is counted too: per request, the tokens of the
tools array past its longest common prefix (tool by tool) with the previous
request's, which a provider computes afresh ("uncached/req"; the first
request's whole array); the tool tokens a request is billed for, the
cached ones at ``--cache-price`` of the full price (0.1: Anthropic's cache
reads, OpenAI's on its recent models; the premium some providers charge for
writing the cache is left out) ("billed/req"); and how many requests' tools
alone exceed the window of the budget strategy's model (``--max-tokens``,
32,000 by default: such a request cannot be sent to that model at all).
``--max-tokens`` moves the budget (a quarter of the window): a larger one
evicts less (more of the prefix kept) and sends more tokens; no budget both
keeps every prefix and stays under 10 % of flat's tokens on this workload
(docs/performance.md, "Toolsets").
``--breaks`` lists, per strategy, each request whose tools array does not
start with the previous one's, with what was switched off and why (the tool
result just before it).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from agentik import ContextPolicy, ModelRequest, ModelResponse, NamedTool, Role, ToolCall
from agentik._json import JsonObject
from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import in_memory_storage
from agentik.toolsets import ToolCosts, ToolsetContribution

CATALOG = Path(__file__).with_name("toolsets_catalog.json")
MAX_TOKENS = 32_000
STRATEGIES = ("flat", "toolsets", "budget+search", "vendor search")
_TOOLS = ("enable_toolset", "disable_toolset", "find_tools")


async def _ok(arguments: JsonObject) -> str:
    return "ok"


def _toolset_name(server: str) -> str:
    name = server.removeprefix("mcp-server-").removesuffix("-mcp-server").removesuffix("-mcp")
    return name.removesuffix("-server")


def load_catalog() -> list[ToolsetContribution]:
    """One toolset per server, each tool renamed ``<toolset>_<its name>``."""
    out = []
    for server in json.loads(CATALOG.read_text()):
        name = _toolset_name(server["server"])
        tools = []
        seen = set()
        for t in server["tools"]:
            tool_name = f"{name}_{re.sub(r'[^A-Za-z0-9_-]', '_', t['name'])}"[:64]
            if tool_name in seen:
                continue
            seen.add(tool_name)
            schema = t["inputSchema"] or {"type": "object"}
            tools.append(NamedTool(tool_name, t["description"] or t["name"], schema, _ok))
        if tools:
            out.append(ToolsetContribution(name, f"the {server['server']} MCP server", tools))
    return out


@attrs.frozen
class Task:
    tools: tuple[str, ...]
    """The tools the task needs, in the order it calls them."""


def make_tasks(catalog: list[ToolsetContribution], count: int, seed: int) -> list[Task]:
    rng = random.Random(seed)
    everything = [t.name for c in catalog for t in c.tools]
    return [Task(tuple(rng.sample(everything, rng.randint(1, 3)))) for _ in range(count)]


def query_for(tool: NamedTool) -> str:
    """The words a model would search with: the first sentence of what it does."""
    first = re.split(r"(?<=[.!?])\s", tool.description.strip(), maxsplit=1)[0]
    return " ".join(first.split()[:12])


def _call(name: str, arguments: JsonObject, n: int) -> ModelResponse:
    return ModelResponse(tool_calls=(ToolCall(f"c{n}", name, json.dumps(arguments)),))


def model_for(
    strategy: str, tasks: list[Task], by_name: dict[str, NamedTool], hits: list[bool]
) -> Callable[[ModelRequest], ModelResponse]:
    """The well-behaved model of ``strategy``, deciding from what each request offers."""

    def respond(request: ModelRequest) -> ModelResponse:
        messages = request.messages
        start = max(i for i, m in enumerate(messages) if m.role is Role.USER)
        task = tasks[int(messages[start].content.split()[1])]
        turn = messages[start + 1 :]
        calls = [c for m in turn for c in m.tool_calls]
        results = {m.tool_call_id: m.content for m in turn if m.role is Role.TOOL}
        called = {c.name for c in calls}
        offered = {t.name for t in request.tools}
        n = len(calls)
        for name in task.tools:
            if name in called:
                continue
            if strategy == "flat" or name in offered:
                return _call(name, {}, n)
            toolset = name.split("_", 1)[0]
            enables = [c for c in calls if c.name == "enable_toolset"]
            if any(json.loads(c.arguments)["name"] == toolset for c in enables):
                return _call(name, {}, n)  # enabled and still not offered: by name
            if strategy == "toolsets":
                return _call("enable_toolset", {"name": toolset}, n)
            # A tool some search of the window already found needs none.
            known = any(
                m.role is Role.TOOL and f"\n{name} (toolset " in m.content for m in messages
            )
            query = query_for(by_name[name])
            searched = {
                json.loads(c.arguments)["query"]: c.id for c in calls if c.name == "find_tools"
            }
            if query in searched:  # the search was for this tool: did it find it?
                hits.append(f"\n{name} (" in results.get(searched[query], ""))
            elif not known:
                return _call("find_tools", {"query": query}, n)
            wanted = [t for t in task.tools if t.split("_", 1)[0] == toolset]
            if strategy == "vendor search":  # found tools are only ever added
                wanted += [t for t in offered if t.split("_", 1)[0] == toolset]
            return _call("enable_toolset", {"name": toolset, "tools": sorted(set(wanted))}, n)
        return ModelResponse(text="done")

    return respond


@attrs.frozen
class Break:
    """A request whose tools array does not start with the previous one's."""

    request: int
    """Its number in the conversation, from 1."""
    task: int
    switched_off: tuple[str, ...]
    """The toolsets whose tools the previous request had and this one lacks."""
    why: str
    """The tool result just before it (an enable answer naming what made room)."""


@attrs.frozen
class Figures:
    strategy: str
    requests: int
    mean_tokens: float
    total_tokens: int
    largest: int
    prefix_share: float
    same_share: float
    largest_toolsets: int
    search_hits: float | None
    breaks: tuple[Break, ...]
    uncached_tokens: float
    """Mean tokens a request's tools array has past its common prefix with the
    previous request's: what a prompt cache cannot serve."""
    over_window: int
    """Requests whose tools alone exceed the budget strategy's window
    (``max_tokens``, ``MAX_TOKENS`` unless told)."""

    def billed(self, cache_price: float) -> float:
        """Mean tool tokens a request is billed for, a cached one at ``cache_price``."""
        return self.uncached_tokens + cache_price * (self.mean_tokens - self.uncached_tokens)


async def run(
    strategy: str,
    catalog: list[ToolsetContribution],
    tasks: list[Task],
    max_tokens: int = MAX_TOKENS,
) -> Figures:
    by_name = {t.name: t for c in catalog for t in c.tools}
    requests: list[ModelRequest] = []
    hits: list[bool] = []
    respond = model_for(strategy, tasks, by_name, hits)

    def record(request: ModelRequest) -> ModelResponse:
        if request.purpose == "summary":  # beside the conversation: no tools
            return ModelResponse(text="Tasks were done with tools.")
        requests.append(request)
        return respond(request)

    options: dict[str, object] = {"toolsets": catalog}
    if strategy == "flat":
        options = {"tools": [t for c in catalog for t in c.tools]}
    elif strategy == "budget+search":
        options["context"] = ContextPolicy(max_tokens=max_tokens)
    elif strategy == "vendor search":
        options["context"] = ContextPolicy(max_tokens=10**9, find_tools=True)
    async with open_chat_agent(
        model=ScriptedModel(record),
        storage=in_memory_storage(),
        builtin_tools=False,
        max_tool_rounds=20,
        **options,  # type: ignore[arg-type]
    ) as agent:
        for i in range(len(tasks)):
            await agent.send("bench", f"task {i}")
    costs = ToolCosts()
    sizes = [costs.total(r.tools) for r in requests]
    toolsets = [costs.total(t for t in r.tools if t.name not in _TOOLS) for r in requests]
    arrays = [tuple(t.name for t in r.tools) for r in requests]
    kept = sum(1 for a, b in itertools.pairwise(arrays) if b[: len(a)] == a)
    breaks = tuple(
        _break(i, requests[i], a, b)
        for i, (a, b) in enumerate(itertools.pairwise(arrays), start=1)
        if b[: len(a)] != a
    )
    same = sum(1 for a, b in itertools.pairwise(arrays) if b == a)
    uncached = sizes[0] + sum(
        costs.total(r.tools[_common(a, b) :])
        for r, (a, b) in zip(requests[1:], itertools.pairwise(arrays), strict=True)
    )
    return Figures(
        strategy=strategy,
        requests=len(requests),
        mean_tokens=sum(sizes) / len(sizes),
        total_tokens=sum(sizes),
        largest=max(sizes),
        prefix_share=kept / max(1, len(arrays) - 1),
        same_share=same / max(1, len(arrays) - 1),
        largest_toolsets=0 if strategy == "flat" else max(toolsets),
        search_hits=sum(hits) / len(hits) if hits else None,
        breaks=breaks,
        uncached_tokens=uncached / len(sizes),
        over_window=sum(1 for size in sizes if size > max_tokens),
    )


def _common(before: tuple[str, ...], now: tuple[str, ...]) -> int:
    """How many tools ``now`` starts with that ``before`` starts with too."""
    n = 0
    for a, b in zip(before, now, strict=False):
        if a != b:
            break
        n += 1
    return n


def _break(i: int, request: ModelRequest, before: tuple[str, ...], now: tuple[str, ...]) -> Break:
    gone = dict.fromkeys(t.split("_", 1)[0] for t in before if t not in now)
    users = [m for m in request.messages if m.role is Role.USER]
    results = [m for m in request.messages if m.role is Role.TOOL]
    why = results[-1].content if results and request.messages[-1].role is Role.TOOL else "-"
    return Break(i + 1, int(users[-1].content.split()[1]), tuple(gone), why)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--breaks", action="store_true", help="list the prefix breaks")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=MAX_TOKENS,
        help="the budget strategy's window (its tools budget: a quarter); the trade"
        " between tokens and prefix kept moves with it",
    )
    parser.add_argument(
        "--cache-price",
        type=float,
        default=0.1,
        help="a cached token's price, a share of an uncached one's (billed/req)",
    )
    args = parser.parse_args()
    catalog = load_catalog()
    tasks = make_tasks(catalog, args.tasks, args.seed)
    total = ToolCosts().total(t for c in catalog for t in c.tools)
    print(
        f"catalog: {len(catalog)} toolsets, {sum(len(c.tools) for c in catalog)} tools,"
        f" {total:,} tokens of schemas; {len(tasks)} tasks;"
        f" budget+search: max_tokens {args.max_tokens:,}, tools budget {args.max_tokens // 4:,}"
    )
    print(
        f"{'strategy':<14} {'requests':>8} {'tokens/req':>10} {'total':>10} {'% flat':>7}"
        f" {'largest':>8} {'prefix kept':>11} {'same tools':>10} {'max active':>10} {'found':>6}"
        f" {'uncached/req':>12} {'billed/req':>10} {'> window':>8}"
    )
    flat_total = None
    for strategy in STRATEGIES:
        f = trio.run(run, strategy, catalog, tasks, args.max_tokens)
        flat_total = flat_total or f.total_tokens
        found = "-" if f.search_hits is None else f"{f.search_hits:.0%}"
        print(
            f"{f.strategy:<14} {f.requests:>8} {f.mean_tokens:>10,.0f} {f.total_tokens:>10,}"
            f" {f.total_tokens / flat_total:>7.1%} {f.largest:>8,} {f.prefix_share:>11.0%}"
            f" {f.same_share:>10.0%} {f.largest_toolsets:>10,} {found:>6}"
            f" {f.uncached_tokens:>12,.0f} {f.billed(args.cache_price):>10,.0f}"
            f" {f.over_window:>8}"
        )
        if args.breaks:
            for b in f.breaks:
                lost = ", ".join(b.switched_off)
                print(f"  request {b.request} (task {b.task}) lost {lost}: {b.why}")


if __name__ == "__main__":
    main()

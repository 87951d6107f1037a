"""``agentik bench``: N concurrent conversations x M turns, in process or
against a running server, and what it measured.

Each conversation sends its turns one after another; all conversations start
at once (closed loop). Latency is per turn, as the caller sees it. In process,
the model is wrapped to time it, so framework time (turn latency minus model
time) can be told apart from model time.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import attrs
import httpx2
import trio

from agentik._errors import OverloadedError, TurnError
from agentik._probe import check_server, refused_token
from agentik.agent import open_chat_agent
from agentik.benchmark._http import BenchClient
from agentik.benchmark._scripted import bench_tool, workload_responder
from agentik.models import (
    ChatModel,
    ModelRequest,
    ModelResponse,
    OpenAICompatibleModel,
    ScriptedModel,
)
from agentik.storage import StorageBundle, in_memory_storage, open_sqlite_storage, writer_stats


@attrs.frozen(kw_only=True)
class BenchConfig:
    """What to run."""

    conversations: int = 100
    turns: int = 5
    url: str | None = None
    """A running server's base URL; None runs the agent in this process."""
    storage: str = "sqlite"
    """``sqlite`` (a temporary database unless ``database`` is set) or ``memory``."""
    database: str | None = None
    synchronous: str = "FULL"
    latency: float = 0.0
    """Seconds the scripted model waits per call."""
    tool_calls: int = 1
    reply_chars: int = 64
    model_base_url: str | None = None
    """Use a real OpenAI-compatible endpoint instead of the scripted model."""
    model_name: str | None = None
    api_key: str | None = attrs.field(default=None, repr=False)
    """The model endpoint's API key."""
    auth_token: str | None = attrs.field(default=None, repr=False)
    """Bearer token for the server at ``url``."""
    progress: bool = False
    http_timeout: float = 120.0
    prefix: str | None = None
    """Conversation ids are ``{prefix}-0`` .. ``{prefix}-{N-1}``: several bench
    clients sharing a cluster (or a ``database`` kept between runs) give each
    its own. None: ``bench-`` and six random hex digits, new each run."""


@attrs.frozen(kw_only=True)
class BenchResult:
    """What one run measured."""

    target: str
    conversations: int
    turns_per_conversation: int
    turns_ok: int
    turns_failed: int
    turns_overloaded: int
    seconds: float
    turns_per_s: float
    latency_ms_p50: float
    latency_ms_p95: float
    latency_ms_p99: float
    model_seconds: float | None
    """Time spent inside the model, summed over calls (in process only)."""
    framework_share: float | None
    """Share of turn latency not spent in the model (in process only)."""
    writer_batches: int | None
    writer_mean_batch: float | None
    writer_largest_batch: int | None
    rss_mb: float
    peak_rss_mb: float
    client_cpu_ms_per_turn: float | None = None
    """Against a server: CPU this process (the bench's HTTP client) spent per turn,
    which it takes from the machine the server runs on when both share it."""
    client_cpu_cores: float | None = None
    """Against a server: the client's CPU seconds per second of the run, i.e.
    the cores it kept busy; what is left of the machine was the server's."""
    prefix: str = "bench"
    """The conversation ids were ``{prefix}-0`` .. ``{prefix}-{N-1}``."""


@attrs.define
class _TimedModel:
    """Adds up the time spent in the wrapped model."""

    inner: ChatModel
    seconds: float = 0.0
    calls: int = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        start = trio.current_time()
        try:
            return await self.inner.complete(request)
        finally:
            self.seconds += trio.current_time() - start
            self.calls += 1


@attrs.define
class _Tally:
    total: int
    latencies: list[float] = attrs.Factory(list)
    failed: int = 0
    overloaded: int = 0

    @property
    def done(self) -> int:
        return len(self.latencies) + self.failed + self.overloaded


_PREFIX = re.compile(r"[A-Za-z0-9._~-]{1,64}")
"""Characters a URL path carries as they are (RFC 3986 "unreserved"), so an id
goes into ``/agentik/conversations/{id}/turns`` without escaping."""


def _prefix(config: BenchConfig) -> str:
    if config.prefix is None:
        return f"bench-{secrets.token_hex(3)}"
    if _PREFIX.fullmatch(config.prefix) is None:
        raise ValueError(
            f"prefix must be 1..64 characters of A-Z a-z 0-9 . _ ~ -, got {config.prefix[:80]!r}"
        )
    return config.prefix


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * len(sorted_values)) - 1))
    return 1000 * sorted_values[index]


def _memory_mb() -> tuple[float, float]:
    """(current, peak) resident set size of this process, in MB."""
    rss = peak = 0.0
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) / 1024
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) / 1024
    except OSError:
        pass
    return rss, peak


def _model(config: BenchConfig) -> ChatModel:
    if config.model_base_url:
        if not config.model_name:
            raise ValueError("a model base URL needs a model name (--model-name)")
        return OpenAICompatibleModel(
            config.model_base_url, config.model_name, api_key=config.api_key
        )
    return ScriptedModel(
        workload_responder(config.tool_calls, config.reply_chars), latency=config.latency
    )


@asynccontextmanager
async def _storage(config: BenchConfig) -> AsyncIterator[StorageBundle]:
    if config.storage == "memory":
        yield in_memory_storage()
        return
    if config.storage != "sqlite":
        raise ValueError(f"storage must be 'sqlite' or 'memory', got {config.storage!r}")
    with tempfile.TemporaryDirectory(prefix="agentik-bench-") as tmp:
        path = config.database or os.path.join(tmp, "bench.db")
        async with open_sqlite_storage(path, synchronous=config.synchronous) as bundle:  # type: ignore[arg-type]
            yield bundle


async def _progress(tally: _Tally, started: float) -> None:
    """A one-line progress bar on stderr, redrawn a few times a second."""
    while True:
        await trio.sleep(0.25)
        _draw(tally, started)


def _draw(tally: _Tally, started: float, end: str = "") -> None:
    width = 30
    filled = width * tally.done // max(1, tally.total)
    rate = tally.done / max(1e-9, trio.current_time() - started)
    sys.stderr.write(
        f"\r[{'#' * filled}{'.' * (width - filled)}] {tally.done}/{tally.total} turns"
        f" {rate:,.0f}/s failed {tally.failed} overloaded {tally.overloaded}{end}"
    )
    sys.stderr.flush()


async def _drive(
    config: BenchConfig,
    prefix: str,
    send: Callable[[str, str], AbstractAsyncContextManager[None]],
) -> tuple[_Tally, float]:
    tally = _Tally(total=config.conversations * config.turns)

    async def conversation(i: int) -> None:
        for t in range(config.turns):
            start = trio.current_time()
            try:
                async with send(f"{prefix}-{i}", f"turn {t} of conversation {i}"):
                    pass
            except OverloadedError:
                tally.overloaded += 1
            except TurnError:
                tally.failed += 1
            else:
                tally.latencies.append(trio.current_time() - start)

    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        if config.progress:
            nursery.start_soon(_progress, tally, started)
        async with trio.open_nursery() as clients:
            for i in range(config.conversations):
                clients.start_soon(conversation, i)
        nursery.cancel_scope.cancel()
    seconds = trio.current_time() - started
    if config.progress:
        _draw(tally, started, end="\n")
    return tally, seconds


async def run_bench(config: BenchConfig) -> BenchResult:
    """Run the workload once and measure it.

    Against a server (``url``), raises ``ServerCheckError`` before any turn if
    the server cannot be reached or refuses the token, and stops with it if a
    turn is refused 401: a run of refused turns measures nothing."""
    if config.conversations < 1 or config.turns < 1:
        raise ValueError("conversations and turns must be >= 1")
    prefix = _prefix(config)
    if config.url is not None:
        return await _run_http(config, prefix)
    timed = _TimedModel(_model(config))
    async with (
        _storage(config) as storage,
        open_chat_agent(
            model=timed,
            storage=storage,
            tools=[bench_tool()],
            builtin_tools=False,
            max_queued_turns=max(8, config.turns),
        ) as agent,
    ):

        @asynccontextmanager
        async def send(cid: str, text: str) -> AsyncIterator[None]:
            await agent.send(cid, text)
            yield

        tally, seconds = await _drive(config, prefix, send)
        stats = writer_stats(agent.storage)
    latencies = sorted(tally.latencies)
    total_latency = sum(latencies)
    return _result(
        config,
        prefix,
        f"in-process ({config.storage})",
        tally,
        seconds,
        model_seconds=timed.seconds,
        framework_share=(max(0.0, 1 - timed.seconds / total_latency) if total_latency else None),
        batches=None if stats is None else (stats.batches, stats.writes, stats.largest_batch_size),
    )


async def _run_http(config: BenchConfig, prefix: str) -> BenchResult:
    url = config.url
    assert url is not None
    headers = {"authorization": f"Bearer {config.auth_token}"} if config.auth_token else {}
    async with httpx2.AsyncClient(
        base_url=url.rstrip("/"), headers=headers, follow_redirects=True
    ) as probe:
        await check_server(probe, url)
    clients: dict[str, BenchClient] = {}

    @asynccontextmanager
    async def send(cid: str, text: str) -> AsyncIterator[None]:
        client = clients.get(cid)
        if client is None:
            client = clients[cid] = BenchClient(url, headers)
        body = json.dumps({"text": text}).encode()
        try:
            with trio.fail_after(config.http_timeout):
                reply = await client.post(f"/agentik/conversations/{cid}/turns", body)
        except (OSError, trio.TooSlowError) as error:
            raise TurnError(f"{type(error).__name__}: {error}") from error
        if reply.status == 401:
            raise refused_token(url)
        if reply.status == 429:
            raise OverloadedError("429 from the server")
        if reply.status != 200:
            raise TurnError(f"HTTP {reply.status}: {reply.body[:200]!r}")
        yield

    cpu = time.process_time()
    try:
        tally, seconds = await _drive(config, prefix, send)
    finally:
        cpu = time.process_time() - cpu
        for client in clients.values():
            await client.aclose()
    return attrs.evolve(
        _result(config, prefix, f"http {config.url}", tally, seconds, None, None, None),
        client_cpu_ms_per_turn=1000 * cpu / max(1, tally.done),
        client_cpu_cores=cpu / seconds if seconds else None,
    )


def _result(
    config: BenchConfig,
    prefix: str,
    target: str,
    tally: _Tally,
    seconds: float,
    model_seconds: float | None,
    framework_share: float | None,
    batches: tuple[int, int, int] | None,
) -> BenchResult:
    latencies = sorted(tally.latencies)
    rss, peak = _memory_mb()
    return BenchResult(
        target=target,
        conversations=config.conversations,
        turns_per_conversation=config.turns,
        turns_ok=len(latencies),
        turns_failed=tally.failed,
        turns_overloaded=tally.overloaded,
        seconds=seconds,
        turns_per_s=len(latencies) / seconds if seconds else 0.0,
        latency_ms_p50=_percentile(latencies, 0.50),
        latency_ms_p95=_percentile(latencies, 0.95),
        latency_ms_p99=_percentile(latencies, 0.99),
        model_seconds=model_seconds,
        framework_share=framework_share,
        writer_batches=None if batches is None else batches[0],
        writer_mean_batch=(None if batches is None or not batches[0] else batches[1] / batches[0]),
        writer_largest_batch=None if batches is None else batches[2],
        rss_mb=rss,
        peak_rss_mb=peak,
        prefix=prefix,
    )


def format_table(result: BenchResult) -> str:
    """The human-readable summary ``agentik bench`` prints."""

    def opt(value: float | int | None, fmt: str) -> str:
        return "n/a" if value is None else format(value, fmt)

    rows = [
        ("target", result.target),
        ("conversations x turns", f"{result.conversations} x {result.turns_per_conversation}"),
        ("conversation ids", f"{result.prefix}-0 .. {result.prefix}-{result.conversations - 1}"),
        (
            "turns ok / failed / overloaded",
            f"{result.turns_ok} / {result.turns_failed} / {result.turns_overloaded}",
        ),
        ("wall time", f"{result.seconds:.2f} s"),
        ("turns/s", f"{result.turns_per_s:,.0f}"),
        *_client_cpu(result),
        (
            "turn latency p50 / p95 / p99",
            f"{result.latency_ms_p50:.1f} / {result.latency_ms_p95:.1f}"
            f" / {result.latency_ms_p99:.1f} ms",
        ),
        (
            "model time (sum)",
            opt(result.model_seconds, ".2f") + (" s" if result.model_seconds is not None else ""),
        ),
        (
            "framework share of latency",
            opt(None if result.framework_share is None else 100 * result.framework_share, ".0f")
            + ("%" if result.framework_share is not None else ""),
        ),
        (
            "writer batches / mean / largest",
            f"{opt(result.writer_batches, 'd')} / {opt(result.writer_mean_batch, '.1f')}"
            f" / {opt(result.writer_largest_batch, 'd')}",
        ),
        ("RSS now / peak", f"{result.rss_mb:.0f} / {result.peak_rss_mb:.0f} MB"),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _client_cpu(result: BenchResult) -> list[tuple[str, str]]:
    """Beside turns/s, what the client itself cost, so a reader can see that
    the figure is the server's: its CPU per turn, and the cores it kept busy
    (on a shared machine, the rest was the server's)."""
    if result.client_cpu_ms_per_turn is None:
        return []
    cores = "" if result.client_cpu_cores is None else f", {result.client_cpu_cores:.2f} cores"
    return [("bench client CPU per turn", f"{result.client_cpu_ms_per_turn:.3f} ms{cores}")]

"""``/metrics`` in the Prometheus text exposition format (version 0.0.4).

Pure rendering from counters the agent, the storage writer and the app keep;
nothing here counts anything itself. Counters end in ``_total``; the model
latency is a cumulative histogram with an ``+Inf`` bucket, ``_sum`` and
``_count``, as Prometheus expects.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from agentik._histogram import Histogram
from agentik._json import JsonObject
from agentik.agent import AgentStats
from agentik.models import ModelScheduler
from agentik.server.http import ReserveCounts
from agentik.storage import WriterStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Out:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def metric(
        self,
        name: str,
        kind: str,
        help_text: str,
        samples: Mapping[str, float] | float,
        label: str = "",
    ) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        if isinstance(samples, Mapping):
            for value_label, value in samples.items():
                self.lines.append(f'{name}{{{label}="{_label(value_label)}"}} {_number(value)}')
        else:
            self.lines.append(f"{name} {_number(samples)}")

    def histogram(self, name: str, help_text: str, histogram: Histogram) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        for bound, count in histogram.cumulative():
            self.lines.append(f'{name}_bucket{{le="{_number(bound)}"}} {count}')
        self.lines += [f"{name}_sum {_number(histogram.total)}", f"{name}_count {histogram.count}"]


def render_metrics(
    stats: AgentStats,
    *,
    uptime: float,
    http_requests: Mapping[str, int],
    writer: WriterStats | None,
    scheduler: ModelScheduler | None = None,
    reserve: ReserveCounts | None = None,
) -> str:
    out = _Out()
    out.metric("agentik_uptime_seconds", "gauge", "Seconds since the server started.", uptime)
    out.metric(
        "agentik_turns_total",
        "counter",
        "Turns by outcome.",
        {
            "started": stats.turns_started,
            "finished": stats.turns_finished,
            "failed": stats.turns_failed,
            "replayed": stats.turns_replayed,
            "overloaded": stats.overloaded,
        },
        "outcome",
    )
    out.metric("agentik_tool_calls_total", "counter", "Tool calls run.", stats.tool_calls)
    out.metric(
        "agentik_errors_total",
        "counter",
        "Errors by kind.",
        {
            "tool": stats.tool_errors,
            "model": stats.model_errors,
            "turn": stats.turns_failed,
            "http_5xx": http_requests.get("5xx", 0),
        },
        "kind",
    )
    out.metric("agentik_model_calls_total", "counter", "Model calls made.", stats.model_calls)
    out.metric(
        "agentik_tokens_total",
        "counter",
        "Tokens the model reported, by kind (input: prompt, output: completion).",
        {"input": stats.input_tokens, "output": stats.output_tokens},
        "kind",
    )
    out.histogram("agentik_model_latency_seconds", "Model call latency.", stats.model_latency)
    if scheduler is not None:
        _scheduler_metrics(out, scheduler)
    out.metric(
        "agentik_live_conversations",
        "gauge",
        "Conversation tasks alive now.",
        stats.live_conversations,
    )
    out.metric(
        "agentik_http_requests_total",
        "counter",
        "HTTP requests by status class.",
        dict(http_requests),
        "status",
    )
    if reserve is not None:
        out.metric(
            "agentik_http_at_bound_total",
            "counter",
            "At max_connections: clients turned away (503 at_capacity), clients that"
            " waited for a slot, peers' connections moved to the peers' reserve.",
            {
                "turned_away": reserve.turned_away,
                "waited": reserve.waited,
                "moved": reserve.moved,
            },
            "event",
        )
    if writer is not None:
        out.metric(
            "agentik_writer_batches_total", "counter", "Commits the writer made.", writer.batches
        )
        out.metric(
            "agentik_writer_writes_total", "counter", "Writes the writer committed.", writer.writes
        )
        out.metric(
            "agentik_writer_batch_size",
            "gauge",
            "Writes in the writer's last commit.",
            writer.last_batch_size,
        )
        out.metric(
            "agentik_writer_max_batch_size",
            "gauge",
            "Most writes in one commit so far.",
            writer.largest_batch_size,
        )
        out.metric(
            "agentik_writer_queue_depth",
            "gauge",
            "Writes waiting for the writer.",
            writer.queue_depth,
        )
        out.metric(
            "agentik_writer_failed_writes_total",
            "counter",
            "Writes that failed (alone, or with their whole batch).",
            writer.failed_writes,
        )
        out.metric(
            "agentik_writer_failed_batches_total",
            "counter",
            "Transactions SQLite could not commit (lock, I/O error, full disk).",
            writer.failed_batches,
        )
        out.metric(
            "agentik_storage_failing",
            "gauge",
            "1 while writes fail for a reason of the storage and none has committed since.",
            int(writer.failing),
        )
    return "\n".join(out.lines) + "\n"


def _scheduler_metrics(out: _Out, scheduler: ModelScheduler) -> None:
    """The model-limits scheduler's series (only with ``model_limits``)."""
    stats = scheduler.stats
    out.metric(
        "agentik_model_queue_depth",
        "gauge",
        "Model calls waiting for the model's limits, by purpose.",
        {"turn": scheduler.queued("turn"), "background": scheduler.queued("background")},
        "purpose",
    )
    out.metric(
        "agentik_model_in_flight",
        "gauge",
        "Model calls admitted and on the wire.",
        scheduler.in_use,
    )
    out.histogram(
        "agentik_model_queue_wait_seconds",
        "Seconds each model call waited for the model's limits.",
        stats.wait,
    )
    out.metric(
        "agentik_model_requests_granted_total",
        "counter",
        "Model requests admitted under the limits (each attempt counts).",
        stats.requests_granted,
    )
    out.metric(
        "agentik_model_tokens_granted_total",
        "counter",
        "Tokens admitted under the limits: estimates, corrected with reported usage.",
        round(stats.tokens_granted),
    )
    out.metric(
        "agentik_model_rate_limited_total",
        "counter",
        "Answers of the provider that it is rate limited (429, or 503 saying so).",
        stats.rate_limited,
    )
    out.metric(
        "agentik_model_pauses_total",
        "counter",
        "Times every model call was paused at the provider's word.",
        stats.pauses,
    )
    out.metric(
        "agentik_model_paused_seconds",
        "gauge",
        "Seconds the provider's pause still holds every model call back.",
        scheduler.paused_for(),
    )
    out.metric(
        "agentik_model_refused_total",
        "counter",
        "New turns refused because they would wait past max_queue_wait (429).",
        stats.refused,
    )


def limits_health(scheduler: ModelScheduler) -> JsonObject:
    """What ``/health`` says of the model's limits: the limits (this node's
    share of them), the pause the provider asked for, and the queue."""
    limits = scheduler.limits
    paused = scheduler.paused_for()
    return {
        "requests_per_minute": limits.requests_per_minute,
        "tokens_per_minute": limits.tokens_per_minute,
        "max_concurrent": limits.max_concurrent,
        "max_queue_wait": limits.max_queue_wait,
        "nodes": scheduler.nodes,
        "paused_for_seconds": round(paused, 3) if paused > 0 else None,
        "queued": scheduler.waiting,
        "in_flight": scheduler.in_use,
    }

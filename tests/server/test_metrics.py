"""``/metrics``: token counters, and docs/server.md lists exactly the series
served (a real server on 127.0.0.1 with SQLite, so the writer's series are
there too)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx2
import trio

from agentik import ModelLimits, ModelResponse, ScriptedModel, TokenUsage
from agentik.agent import AgentStats
from agentik.models import ModelScheduler
from agentik.server import ServerConfig, serve_agentik
from agentik.server._metrics import render_metrics
from agentik.server.http import ReserveCounts
from agentik.storage import WriterStats

DOCS = Path(__file__).resolve().parents[2] / "docs" / "server.md"


def _series(text: str) -> set[str]:
    return set(re.findall(r"^# TYPE (agentik_\w+) ", text, re.MULTILINE))


def _documented() -> set[str]:
    section = DOCS.read_text(encoding="utf-8").split("## Health and metrics", 1)[1]
    section = section.split("\n## ", 1)[0]
    return set(re.findall(r"`(agentik_[a-z_]+)", section))


def _sample(text: str, name: str, labels: str = "") -> float:
    line = next(line for line in text.splitlines() if line.startswith(f"{name}{labels} "))
    return float(line.split()[-1])


async def test_token_counters_follow_the_model_usage(tmp_path: Path) -> None:
    """agentik_tokens_total{kind=input|output} add up what the model reported."""
    model = ScriptedModel(lambda r: ModelResponse(text="ok", usage=TokenUsage(9, 4)))
    config = ServerConfig(port=0, database=str(tmp_path / "agentik.db"))
    async with trio.open_nursery() as nursery:
        url = await nursery.start(
            lambda task_status: serve_agentik(config, model=model, task_status=task_status)
        )
        async with httpx2.AsyncClient(base_url=url) as client:
            for text in ("one", "two"):
                reply = await client.post("/agentik/conversations/c/turns", json={"text": text})
                assert reply.status_code == 200
            metrics = (await client.get("/metrics")).text
        nursery.cancel_scope.cancel()
    assert _sample(metrics, "agentik_tokens_total", '{kind="input"}') == 18
    assert _sample(metrics, "agentik_tokens_total", '{kind="output"}') == 8


async def test_the_documented_series_are_the_served_ones() -> None:
    """Every series /metrics serves (with a SQLite writer, model limits and
    the peers' reserve of a forwarding node) is
    named in docs/server.md's "Health and metrics", and nothing else is."""
    writer = WriterStats(
        running=True,
        batches=0,
        writes=0,
        failed_writes=0,
        failed_batches=0,
        last_batch_size=0,
        largest_batch_size=0,
        queue_depth=0,
        queue_capacity=1,
    )
    scheduler = ModelScheduler(ModelLimits(requests_per_minute=60))
    served = _series(
        render_metrics(
            AgentStats(),
            uptime=1.0,
            http_requests={},
            writer=writer,
            scheduler=scheduler,
            reserve=ReserveCounts(),
        )
    )
    assert served == _documented(), (
        f"served, not documented: {sorted(served - _documented())};"
        f" documented, not served: {sorted(_documented() - served)}"
    )

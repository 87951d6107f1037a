"""``ModelLimits``: the budget of a model provider, as the agent keeps to it.

A value object (validated at construction); ``ModelScheduler`` enforces it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import final

import attrs


def _count(instance: object, attribute: attrs.Attribute[int | None], value: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be an integer >= 1 or None, got {value!r}")


def _wait(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (0 < value < math.inf):
        raise ValueError(f"{attribute.name} must be a number of seconds > 0, got {value!r}")


def _weights(value: Mapping[str, float] | None) -> Mapping[str, float] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"weights must be a mapping of key to weight, got {value!r}")
    checked: dict[str, float] = {}
    for key, weight in value.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"weights keys must be non-empty strings, got {key!r}")
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not (0 < weight < math.inf)
        ):
            raise ValueError(f"weights[{key!r}] must be a number > 0, got {weight!r}")
        checked[key] = float(weight)
    return MappingProxyType(checked)


@final
@attrs.frozen(kw_only=True)
class ModelLimits:
    """What the model provider allows, kept by one scheduler for every model
    call of an agent (``open_chat_agent(model_limits=...)``; ``agentik serve``:
    ``[model] requests_per_minute``, ``tokens_per_minute``, ``max_concurrent``,
    ``max_queue_wait``). None means unlimited. On several nodes sharing one
    PostgreSQL database, each node keeps the limit divided by the live nodes."""

    requests_per_minute: int | None = attrs.field(default=None, validator=_count)
    """Requests sent per minute, at most, over any 60 s."""
    tokens_per_minute: int | None = attrs.field(default=None, validator=_count)
    """Prompt and completion tokens per minute, at most: estimated before a
    request is sent, corrected with the usage the backend reports."""
    max_concurrent: int | None = attrs.field(default=None, validator=_count)
    """Requests on the wire at once, at most."""
    max_queue_wait: float = attrs.field(default=30.0, validator=_wait)
    """Seconds a new turn may expect to wait for the model; past it ``send`` and
    ``stream`` raise ``OverloadedError`` (HTTP 429 with ``Retry-After``) before
    anything is stored."""
    weights: Mapping[str, float] | None = attrs.field(default=None, converter=_weights, hash=False)
    """Shares of fairness keys (an owner's name, or a conversation id when
    there are no owners); a key not named has weight 1."""

    @property
    def unlimited(self) -> bool:
        """Whether no limit is set (the agent then schedules nothing)."""
        return (
            self.requests_per_minute is None
            and self.tokens_per_minute is None
            and self.max_concurrent is None
        )

    def weight(self, key: str) -> float:
        """The share of fairness key ``key``."""
        weights = self.weights
        return 1.0 if weights is None else weights.get(key, 1.0)

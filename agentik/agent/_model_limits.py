"""The agent's side of ``ModelLimits``: one scheduler for every model call it makes.

``open_chat_agent(model_limits=...)`` puts the model behind a
``ModelScheduler`` (``limited_model``), so turns, summaries and reflections
all wait in one queue. Each conversation's task names whose calls it makes
(``current_fairness_key``: the owner of an owned conversation, else the
conversation), so fairness needs nothing passed through the turn. With no
limits (None, or none set) the model is used as given: nothing is
scheduled, nothing costs.
"""

from __future__ import annotations

from collections.abc import Callable

from agentik._scope import SEPARATOR
from agentik.agent._context import ContextPolicy, estimate_tokens
from agentik.models import ChatModel, ModelLimits, ModelScheduler, OpenAICompatibleModel, schedule
from agentik.storage import StorageBundle


def fairness_key(conversation_id: str) -> str:
    """Whose share a conversation's model calls take: its owner's, when it has
    one (``alice`` of ``"alice\\x1fdemo"``), else its own."""
    owner, separator, _ = conversation_id.partition(SEPARATOR)
    return owner if separator else conversation_id


def limited_model(
    model: ChatModel,
    limits: ModelLimits | None,
    *,
    context: ContextPolicy | None,
    storage: StorageBundle,
) -> tuple[ChatModel, ModelScheduler | None]:
    """``model`` behind a scheduler of ``limits`` (and the scheduler), or
    ``model`` itself when there are no limits."""
    if limits is None:
        return model, None
    if not isinstance(limits, ModelLimits):
        raise TypeError(f"model_limits must be a ModelLimits or None, got {limits!r}")
    if limits.unlimited:
        return model, None
    capacity = None
    allowance = None
    if isinstance(model, OpenAICompatibleModel):
        # Its gate never waits behind the scheduler: no more slots than connections.
        capacity = model.gate.capacity
        allowance = model.max_output_tokens
    scheduler = ModelScheduler(
        limits,
        capacity=capacity,
        count_tokens=estimate_tokens if context is None else context.count_tokens,
        output_allowance=allowance,
        nodes=_nodes(storage),
    )
    return schedule(model, scheduler), scheduler


def _nodes(storage: StorageBundle) -> Callable[[], int] | None:
    """How many nodes share the limits now: the live node leases (PostgreSQL)."""
    ownership = storage.ownership
    if ownership is None:
        return None
    return lambda: ownership.live_nodes

"""``ModelScheduler``: the one queue of an agent's model calls under ``ModelLimits``.

It is a ``Gate`` (``slot(request)``), so it takes the FIFO gate's place in
front of the wire: with ``OpenAICompatibleModel`` every attempt waits here
(``with_admission``) and no queue waits behind it; any other ``ChatModel``
waits here once per call (``ScheduledModel``). It decides which waiting call
goes next and when:

- **Budgets**: requests and tokens per minute, each a continuous token
  bucket that paces and a 60 s window that bounds (``_bucket``), divided by
  the live nodes on PostgreSQL. A call is charged its estimate when admitted
  (the prompt's tokens plus the output allowance) and corrected with the
  usage the backend reports (``settle``).
- **Concurrency**: at most ``max_concurrent`` slots held at once.
- **Priority**: turns before summaries and reflections.
- **Fairness**: within a priority, deficit round robin across fairness keys
  (``_fair_queue``): an owner, or a conversation.
- **The provider's word**: an answer that says the provider is rate limited
  (a 429, a 503 with ``Retry-After`` or ``x-ratelimit-*``) leaving a slot
  pauses every waiting call once, for as long as it asked, and empties the
  buckets down to what the provider says is left (``_rate_limits``).
- **Admission at the edge**: ``check`` refuses a new turn whose expected wait
  passes ``max_queue_wait`` (``OverloadedError``), before anything is stored.

Invariants:

- At most ``capacity`` slots are held; a slot is released exactly once,
  however its holder leaves, and a grant its waiter never used (cancelled
  at the moment it was granted) is undone: slot, request and tokens.
- Nothing is admitted while paused, or before the buckets allow it; the call
  served next is the fair queue's head of the highest priority, and no other
  call overtakes it (a large call is not starved by small ones).
- Waiting costs one entry in the fair queue and one ``trio.Event``: no waiter
  polls. Only the head waits with a deadline (when the buckets will allow
  it, or the pause ends); every other waiter sleeps until a release, a
  refund, an arrival or a cancellation hands it the turn.
- A waiter cancelled while it waits leaves the queue at once and holds nothing.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable
from types import TracebackType
from typing import final

import trio

from agentik._errors import ModelBackendError, OverloadedError
from agentik._messages import TokenUsage
from agentik._tokens import estimate_tokens, message_tokens
from agentik.models._bucket import Budget
from agentik.models._fair_queue import FairQueue
from agentik.models._limits import ModelLimits
from agentik.models._protocol import ModelRequest
from agentik.models._rate_limits import RateLimitAnswer, provider_word
from agentik.models._tickets import ScheduledCall, SchedulerStats, Ticket

current_fairness_key: contextvars.ContextVar[str] = contextvars.ContextVar(
    "agentik_fairness_key", default=""
)
"""Whose model calls this task makes: the agent sets it in each conversation's
task (the owner, or the conversation id), and its summaries inherit it."""

UNBOUNDED = 1 << 31
"""``capacity`` when nothing bounds concurrency."""
DEFAULT_ALLOWANCE = 256
"""Output tokens charged per call until completions were seen (then their mean)."""
_EPSILON = 1e-6
"""Seconds: a wait this short is no wait (float rounding of bucket levels)."""
_ALPHA = 0.05
"""Weight of the newest sample in the running means (costs, completions, durations)."""
_TURN, _BACKGROUND = 0, 1


@final
class ModelScheduler:
    """Admission of model calls under ``ModelLimits``; a ``Gate``.

    Args:
        limits: the provider's budget.
        capacity: another bound on slots (the model's connections); the
            smaller of it and ``max_concurrent`` holds. Give one (or
            ``max_concurrent``) when the scheduler is an
            ``OpenAICompatibleModel``'s ``gate=``: it sizes the pools.
        count_tokens: tokens in a text (the context policy's).
        output_allowance: output tokens charged per call before the usage is
            known (the model's ``max_tokens``); None: the mean of the
            completions seen.
        nodes: how many nodes share the limits now (PostgreSQL's live node
            leases); each keeps its share.
    """

    def __init__(
        self,
        limits: ModelLimits,
        *,
        capacity: int | None = None,
        count_tokens: Callable[[str], int] = estimate_tokens,
        output_allowance: int | None = None,
        nodes: Callable[[], int] | None = None,
    ) -> None:
        if not isinstance(limits, ModelLimits):
            raise TypeError(f"limits must be a ModelLimits, got {limits!r}")
        bound = limits.max_concurrent
        if capacity is not None:
            if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
                raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
            bound = capacity if bound is None else min(bound, capacity)
        self.limits = limits
        self.stats = SchedulerStats()
        self._bound = bound
        self._count = count_tokens
        self._fixed_allowance = output_allowance
        self._allowance = float(DEFAULT_ALLOWANCE if output_allowance is None else output_allowance)
        self._nodes = nodes
        self._share = 1
        self._requests = _budget(limits.requests_per_minute)
        self._tokens = _budget(limits.tokens_per_minute)
        self._in_use = 0
        self._queues: tuple[FairQueue[Ticket], FairQueue[Ticket]] = (
            FairQueue(limits.weight),
            FairQueue(limits.weight),
        )
        self._head: Ticket | None = None
        self._paused_until = -math.inf
        self._mean_tokens = float(DEFAULT_ALLOWANCE)
        self._mean_seconds = 0.0

    def __repr__(self) -> str:
        return f"ModelScheduler({self.limits!r}, in_use={self._in_use}, waiting={self.waiting})"

    # --- the Gate protocol --------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Slots in all (``UNBOUNDED`` when neither limit nor capacity bounds them)."""
        return UNBOUNDED if self._bound is None else self._bound

    def slot(self, request: ModelRequest) -> _Slot:
        """One attempt at ``request``, for the task's fairness key (a call of its
        own: nothing corrects its charge; ``ScheduledModel`` does, per call)."""
        return _Slot(self, self.call(request, current_fairness_key.get()))

    # --- calls ----------------------------------------------------------------------

    def call(self, request: ModelRequest, key: str) -> ScheduledCall:
        """What ``request`` is, as this scheduler sees it (estimated once per call)."""
        prompt = 0.0
        if self._tokens is not None:
            count = self._count
            prompt = float(sum(message_tokens(m, count) for m in request.messages))
        priority = _TURN if request.purpose == "turn" else _BACKGROUND
        return ScheduledCall(key, priority, prompt)

    def tokens_of(self, call: ScheduledCall) -> float:
        """What an attempt at ``call`` is charged now: its prompt and the output
        allowance (as it is when charged: a call that waited long is charged
        what is known by then)."""
        return call.prompt + self._allowance

    def attempt(self, call: ScheduledCall) -> _Slot:
        """A slot for one attempt at ``call`` (``async with``)."""
        return _Slot(self, call)

    def gate_for(self, call: ScheduledCall) -> _CallGate:
        """A ``Gate`` whose every slot is an attempt at ``call`` (for a model
        that takes a slot per attempt: ``with_admission``)."""
        return _CallGate(self, call)

    def settle(self, call: ScheduledCall, usage: TokenUsage | None) -> None:
        """Correct ``call``'s charge with the usage the backend reported."""
        if usage is None:
            return
        completion = usage.completion_tokens
        if self._fixed_allowance is None and completion >= 0:
            self._allowance += _ALPHA * (completion - self._allowance)
        budget, grant = self._tokens, call.grant
        if budget is None or grant is None:
            return
        actual = float(max(0, usage.prompt_tokens) + max(0, completion))
        correction = actual - grant.amount
        self.stats.tokens_granted += correction
        budget.correct(grant, actual, trio.current_time())
        if call.charged is not None:  # fairness counts what was used, too
            self._queues[call.priority].refund(call.key, call.charged - actual)
            call.charged = actual
        if correction < 0:
            self._dispatch()  # the head may go sooner

    # --- the edge -------------------------------------------------------------------

    def expected_wait(self, key: str) -> float:
        """Seconds a new turn of ``key`` would wait to be sent, as things are now:
        behind what its key has queued and, from every other key, at most as
        much as its share lets through meanwhile; at the rate the buckets
        refill, the slots free up, and after the pause."""
        now = trio.current_time()
        self._follow_nodes(now)
        queue = self._queues[_TURN]
        count, cost = queue.queued(key)
        weight = self.limits.weight(key)
        others = queue.active_weight - (weight if count else 0.0)
        mean = self._mean_tokens
        ahead_cost = cost + min(queue.cost - cost, (cost + mean) / weight * others)
        ahead = count + min(len(queue) - count, (count + 1) / weight * others)
        wait = max(0.0, self._paused_until - now)
        if self._tokens is not None:
            wait = max(wait, self._tokens.time_for(ahead_cost + mean, now))
        if self._requests is not None:
            wait = max(wait, self._requests.time_for(ahead + 1, now))
        if self._bound is not None:
            free = self._bound - self._in_use
            if ahead + 1 > free:
                wait = max(wait, (ahead + 1 - free) * self._mean_seconds / self._bound)
        return wait

    def check(self, key: str) -> None:
        """Raise ``OverloadedError`` (with ``retry_after``) when a new turn of
        ``key`` would expect to wait longer than ``max_queue_wait``."""
        wait = self.expected_wait(key)
        limit = self.limits.max_queue_wait
        if wait <= limit:
            return
        self.stats.refused += 1
        raise OverloadedError(
            f"the model's limits would keep this turn waiting about {wait:.0f} s"
            f" (max_queue_wait={limit:g}); retry later",
            retry_after=max(1.0, wait - limit),
        )

    # --- what /health and /metrics show ----------------------------------------------

    @property
    def in_use(self) -> int:
        return self._in_use

    @property
    def waiting(self) -> int:
        return len(self._queues[_TURN]) + len(self._queues[_BACKGROUND])

    def queued(self, purpose: str) -> int:
        """Calls waiting: ``turn`` or ``background`` (summaries and reflections)."""
        return len(self._queues[_TURN if purpose == "turn" else _BACKGROUND])

    @property
    def nodes(self) -> int:
        """Nodes sharing the limits, as last seen."""
        return self._share

    def paused_for(self) -> float:
        """Seconds the provider's word still holds every call back; 0 if not paused."""
        return max(0.0, self._paused_until - trio.current_time())

    # --- admission --------------------------------------------------------------------

    async def _enter(self, call: ScheduledCall) -> Ticket:
        await trio.lowlevel.checkpoint_if_cancelled()
        now = trio.current_time()
        ticket = Ticket(call, now)
        self._follow_nodes(now)
        if (
            not self._queues[_TURN]
            and not self._queues[_BACKGROUND]
            and (self._bound is None or self._in_use < self._bound)
            and self._ready_in(ticket, now) <= _EPSILON
        ):
            self._grant(ticket, now)
            await trio.lowlevel.cancel_shielded_checkpoint()
            return ticket
        queue = self._queues[call.priority]
        ticket.cost = self.tokens_of(call) if self._tokens is not None else 1.0
        queue.push(call.key, ticket, ticket.cost, front=call.attempts > 0)
        used = False
        try:
            self._dispatch()
            while not ticket.granted:
                with trio.move_on_at(ticket.wake_at):
                    await ticket.event.wait()
                if ticket.granted:
                    break
                if ticket.event.is_set():  # told of a new wake-up time
                    ticket.event = trio.Event()
                    continue
                self._dispatch()  # its time came: it goes, or waits on
            used = True
            return ticket
        finally:
            if not used:  # cancelled while waiting, or as it was granted
                if ticket.granted:
                    self._undo(ticket)
                else:
                    queue.remove(call.key, ticket)
                    if self._head is ticket:
                        self._head = None
                self._dispatch()

    def _ready_in(self, ticket: Ticket, now: float) -> float:
        wait = self._paused_until - now
        if self._requests is not None:
            wait = max(wait, self._requests.ready_in(1.0, now))
        if self._tokens is not None:
            wait = max(wait, self._tokens.ready_in(self.tokens_of(ticket.call), now))
        return wait

    def _dispatch(self) -> None:
        """Admit waiting calls while they may go; tell the head when it may."""
        now = trio.current_time()
        self._follow_nodes(now)
        queues = self._queues
        while self._bound is None or self._in_use < self._bound:
            queue = queues[_TURN] if queues[_TURN] else queues[_BACKGROUND]
            ticket = queue.head()
            if ticket is None:
                break
            wait = self._ready_in(ticket, now)
            if wait > _EPSILON:
                self._designate(ticket, now + wait)
                return
            queue.pop()
            if self._head is ticket:
                self._head = None
            ticket.call.charged = ticket.cost if self._tokens is not None else None
            self._grant(ticket, now)
        self._designate(None, math.inf)

    def _designate(self, ticket: Ticket | None, at: float) -> None:
        """Make ``ticket`` the one waiter with a deadline (its own wake-up)."""
        old = self._head
        if old is not None and old is not ticket:
            old.wake_at = math.inf  # it wakes once more at most, and sleeps on
        self._head = ticket
        if ticket is not None and ticket.wake_at != at:
            ticket.wake_at = at
            ticket.event.set()

    def _grant(self, ticket: Ticket, now: float) -> None:
        call = ticket.call
        if self._requests is not None:
            ticket.request = self._requests.take(1.0, now)
        if self._tokens is not None:
            tokens = self.tokens_of(call)
            call.grant = self._tokens.take(tokens, now)
            self.stats.tokens_granted += tokens
            self._mean_tokens += _ALPHA * (tokens - self._mean_tokens)
        call.attempts += 1
        self._in_use += 1
        self.stats.requests_granted += 1
        self.stats.wait.observe(now - ticket.since)
        ticket.granted = True
        ticket.began = now
        ticket.event.set()

    def _undo(self, ticket: Ticket) -> None:
        """A grant its waiter never used: slot, request and tokens back."""
        now = trio.current_time()
        self._in_use -= 1
        ticket.call.attempts -= 1
        self.stats.requests_granted -= 1
        if self._requests is not None and ticket.request is not None:
            self._requests.correct(ticket.request, 0.0, now)
        grant = ticket.call.grant
        if self._tokens is not None and grant is not None:
            self.stats.tokens_granted -= grant.amount
            self._tokens.correct(grant, 0.0, now)
            ticket.call.grant = None
        self._refund_fairness(ticket.call)

    def _leave(self, ticket: Ticket, exc: BaseException | None) -> None:
        """The attempt is over: free its slot, heed what the provider said."""
        now = trio.current_time()
        self._in_use -= 1
        if self._bound is not None:
            self._mean_seconds += _ALPHA * (now - ticket.began - self._mean_seconds)
        if isinstance(exc, ModelBackendError):
            answer = provider_word(exc)
            if answer is not None:
                self._heed(answer, ticket, now)
        self._dispatch()

    def _heed(self, answer: RateLimitAnswer, ticket: Ticket, now: float) -> None:
        """The provider refused an attempt: pause everyone once, drain the buckets."""
        stats = self.stats
        stats.rate_limited += 1
        grant = ticket.call.grant
        if self._tokens is not None and grant is not None:
            stats.tokens_granted -= grant.amount
            self._tokens.correct(grant, 0.0, now)  # it took none of them
            ticket.call.grant = None
        self._refund_fairness(ticket.call)  # it goes again, and is charged again
        until = now + answer.pause
        if until > self._paused_until:
            if self._paused_until <= now:
                stats.pauses += 1
            self._paused_until = until
        share = self._share
        if self._requests is not None and answer.remaining_requests is not None:
            self._requests.drain_to(answer.remaining_requests / share, now)
        if self._tokens is not None and answer.remaining_tokens is not None:
            self._tokens.drain_to(answer.remaining_tokens / share, now)

    def _refund_fairness(self, call: ScheduledCall) -> None:
        if call.charged is not None:
            self._queues[call.priority].refund(call.key, call.charged)
            call.charged = None

    def _follow_nodes(self, now: float) -> None:
        """Keep this node's share of the limits as nodes come and go."""
        if self._nodes is None:
            return
        nodes = max(1, self._nodes())
        if nodes == self._share:
            return
        self._share = nodes
        limits = self.limits
        if self._requests is not None and limits.requests_per_minute is not None:
            self._requests.resize(limits.requests_per_minute / nodes, now)
        if self._tokens is not None and limits.tokens_per_minute is not None:
            self._tokens.resize(limits.tokens_per_minute / nodes, now)


def _budget(limit: int | None) -> Budget | None:
    return None if limit is None else Budget(limit)


@final
class _Slot:
    """``async with``: one attempt's slot, from admission to release."""

    __slots__ = ("_call", "_scheduler", "_ticket")

    def __init__(self, scheduler: ModelScheduler, call: ScheduledCall) -> None:
        self._scheduler = scheduler
        self._call = call
        self._ticket: Ticket | None = None

    async def __aenter__(self) -> None:
        self._ticket = await self._scheduler._enter(self._call)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        ticket = self._ticket
        assert ticket is not None
        self._ticket = None
        self._scheduler._leave(ticket, exc)


@final
class _CallGate:
    """A ``Gate`` for the attempts of one call."""

    __slots__ = ("_call", "_scheduler")

    def __init__(self, scheduler: ModelScheduler, call: ScheduledCall) -> None:
        self._scheduler = scheduler
        self._call = call

    @property
    def capacity(self) -> int:
        return self._scheduler.capacity

    def slot(self, request: ModelRequest) -> _Slot:
        return _Slot(self._scheduler, self._call)

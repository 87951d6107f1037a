"""Resuming, as the agent opens, the turns a stopped process left interrupted.

Why at start, and not on the conversation's next request: until it resumes,
an interrupted turn is neither running nor ended, and a client that asks
(A2A GetTask) must not be told it ended, or it will send the work again as
new work (a payment twice); and nothing may ever touch its conversation
again. So the agent resumes every such turn as it opens
(``FullMessageStore.interrupted_conversations``), and transports report them running meanwhile
(``ChatAgent.resumes_interrupted``).

Invariants:
- each turn is resumed by its conversation's own task, through the agent's
  ordinary routing (a ``status_only`` request, whose load recovers the last
  turn): a request for the conversation that comes meanwhile queues behind
  it, and a turn is never resumed twice;
- at most ``RESUME_AT_ONCE`` turns resume at once, and the listing is read a
  page at a time as they finish: thousands of interrupted turns do not
  stampede the model, the tools or memory at start;
- several nodes on one database (PostgreSQL with shard leases): a node
  resumes only the conversations it owns (the shards it holds), at once as
  it opens, and again each time it takes shards (``on_gained``: a node that
  died or stopped, a rebalance), so a turn a dead node left interrupted,
  and the A2A task it answers, reaches a final state without anyone asking.
  A resume refused meanwhile (``NotOwnedError``: the shard moved on) is left
  to the new owner, which resumes it when it takes the shard.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from agentik._errors import AgentikError, NotOwnedError, TurnError
from agentik.storage import ConversationOwnership, FullMessageStore

log = logging.getLogger("agentik.agent")

RESUME_AT_ONCE = 8
"""Interrupted turns resumed at the same time, at most."""
PAGE = 100
"""Conversations listed per read."""
Recover = Callable[[str], Awaitable[None]]
"""Resume the conversation's interrupted turn (through its task) and wait
for it; ``NotOwnedError`` when another live node owns the conversation."""


async def resume_interrupted_turns(
    store: FullMessageStore, recover: Recover, ownership: ConversationOwnership | None = None
) -> None:
    """Resume every conversation's interrupted turn (see the module
    docstring); with ``ownership``, those this node owns, now and after
    every gain of shards, until cancelled."""
    if ownership is None:
        await _pass(store, recover, None)
        return
    gains = [trio.Event()]
    unsubscribe = ownership.on_gained(lambda: gains[-1].set())
    try:
        while True:
            gained = gains[-1] = trio.Event()  # a gain during the pass: another pass
            await _pass(store, recover, ownership.owns)
            await gained.wait()
    finally:
        unsubscribe()


async def _pass(
    store: FullMessageStore, recover: Recover, wanted: Callable[[str], bool] | None
) -> set[str]:
    """One walk of the interrupted conversations (those ``wanted`` says,
    when given), resuming each; the ids whose resume was refused."""
    refused: set[str] = set()
    resumed = 0
    slots = trio.Semaphore(RESUME_AT_ONCE)

    async def one(conversation_id: str) -> None:
        nonlocal resumed
        try:
            await recover(conversation_id)
            resumed += 1
        except NotOwnedError:
            refused.add(conversation_id)
        except TurnError as exc:  # resumed, and ended so (recorded: not resumed again)
            log.info("conversation %r: its resumed turn ended: %s", conversation_id, exc)
        except (AgentikError, ValueError) as exc:  # overloaded, storage: its next request
            log.warning(
                "conversation %r: its interrupted turn could not be resumed at start (%s);"
                " it resumes on the conversation's next request",
                conversation_id,
                exc,
            )
        finally:
            slots.release()

    after: str | None = None
    async with trio.open_nursery() as nursery:
        while True:
            try:
                page = await store.interrupted_conversations(after=after, limit=PAGE)
            except AgentikError as exc:
                log.warning("could not list the interrupted turns to resume: %s", exc)
                break
            for conversation_id in page:
                if wanted is None or wanted(conversation_id):
                    await slots.acquire()  # released by ``one`` when that turn is done
                    nursery.start_soon(one, conversation_id)
            if len(page) < PAGE:
                break
            after = page[-1]
    if resumed:
        log.info("resumed %d interrupted turn(s)", resumed)
    return refused

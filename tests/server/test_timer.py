"""``ConnectionTimer``: a connection is cut exactly when its deadline passes,
never while the app is answering, and its watcher ends with the connection.

The property test drives the timer as the HTTP/1.1 connection
(``agentik.server.http._connection``) does (``arrived`` before a read is handled,
``stop`` when a head is complete, ``handled`` after, ``restart`` when a
response is done) through random request schedules (idle
gaps, heads and bodies in pieces with gaps between them, app time, and maybe a
server shutdown) under trio's autojump clock, and checks the cut against a
model of the table in the module docstring: when, and whether for a slow
request (408) or an idle connection.
"""

from __future__ import annotations

import math

import attrs
import pytest
import trio
import trio.testing
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agentik.server.http._timer import ConnectionLimits, ConnectionTimer, Phase

KEEP_ALIVE = 5.1
LIMITS = ConnectionLimits(header_timeout=10.3, body_timeout=20.7, body_min_rate=499.0)
"""Odd values, so that no deadline falls on a whole second, where pieces arrive."""


@attrs.frozen
class Piece:
    gap: float
    """Seconds after the previous event."""
    size: int


@attrs.frozen
class Request:
    head: tuple[Piece, ...]
    """The first piece starts the head; the head is complete with the last."""
    body: tuple[Piece, ...]
    app: float
    """Seconds the app takes once the body is in."""


@attrs.frozen
class Schedule:
    requests: tuple[Request, ...]
    shutdown: float | None
    """When the server shuts down (seconds from the start), if it does."""


pieces = st.lists(
    st.builds(Piece, st.integers(0, 15).map(float), st.integers(1, 6000)), max_size=4
).map(tuple)
requests = st.builds(
    Request,
    head=st.builds(
        lambda first, rest: (first, *rest),
        st.builds(Piece, st.integers(0, 7).map(float), st.integers(1, 300)),
        pieces,
    ),
    body=pieces,
    app=st.integers(0, 60).map(float),
)
schedules = st.builds(
    Schedule,
    requests=st.lists(requests, min_size=1, max_size=3).map(tuple),
    shutdown=st.none() | st.integers(0, 150).map(lambda s: s + 0.5),
)


@attrs.frozen
class Cut:
    at: float
    too_slow: bool


def expected_cut(schedule: Schedule) -> tuple[Cut, list[float]]:
    """The model: when the connection is cut, and every time an event happens
    (to rule out ties with a deadline, whose order is arbitrary)."""
    now, events = 0.0, [0.0]
    shutdown = math.inf if schedule.shutdown is None else schedule.shutdown
    for request in schedule.requests:
        # IDLE until the head's first byte.
        idle_deadline = now + KEEP_ALIVE
        first = now + request.head[0].gap
        if min(idle_deadline, shutdown) < first:
            return Cut(min(idle_deadline, shutdown), False), events
        now = first
        events.append(now)
        # HEAD until its last piece.
        head_deadline = now + LIMITS.header_timeout
        for piece in request.head[1:]:
            if min(head_deadline, shutdown) < now + piece.gap:
                return Cut(min(head_deadline, shutdown), head_deadline < shutdown), events
            now += piece.gap
            events.append(now)
        # BODY until its last piece; shutdown does not cut it.
        started, received = now, 0
        for piece in request.body:
            deadline = started + LIMITS.body_timeout + received / LIMITS.body_min_rate
            if deadline < now + piece.gap:
                return Cut(deadline, True), events
            now += piece.gap
            received += piece.size
            events.append(now)
        # BUSY: never cut; idle again after the app's answer.
        now += request.app
        if shutdown <= now:  # closed as the answer is done (no tie: it causes the cut)
            return Cut(now, False), events
        events.append(now)
    return Cut(min(now + KEEP_ALIVE, max(shutdown, now)), False), events


async def play(schedule: Schedule) -> Cut:
    """Drive a real timer through ``schedule``; the cut it made."""
    cuts: list[Cut] = []
    terminated = trio.Event()
    async with trio.open_nursery() as nursery:
        began = trio.current_time()

        async def expire(too_slow: bool) -> None:
            cuts.append(Cut(trio.current_time() - began, too_slow))
            nursery.cancel_scope.cancel()

        timer = ConnectionTimer(KEEP_ALIVE, LIMITS, terminated, expire)

        async def shut_down(at: float) -> None:
            await trio.sleep_until(began + at)
            terminated.set()

        if schedule.shutdown is not None:
            nursery.start_soon(shut_down, schedule.shutdown)
        timer.restart(nursery)
        for request in schedule.requests:
            for i, piece in enumerate(request.head, start=1):
                await read_head(timer, piece, last=i == len(request.head), body=bool(request.body))
            for i, piece in enumerate(request.body, start=1):
                await trio.sleep(piece.gap)
                timer.arrived(piece.size)
                timer.handled(receiving_body=i < len(request.body))
            await trio.sleep(request.app)
            timer.restart(nursery)
        await trio.sleep_forever()
    (cut,) = cuts
    return cut


async def read_head(timer: ConnectionTimer, piece: Piece, *, last: bool, body: bool) -> None:
    """One piece of a head, as the read loop reports it."""
    await trio.sleep(piece.gap)
    timer.arrived(piece.size)
    if last:
        timer.stop()  # the Request event
    timer.handled(receiving_body=last and body)


@settings(max_examples=300, deadline=None)
@given(schedules)
def test_the_connection_is_cut_exactly_at_its_deadline(schedule: Schedule) -> None:
    expected, events = expected_cut(schedule)
    assume(all(abs(expected.at - t) > 1e-6 for t in events))
    assume(schedule.shutdown is None or all(abs(schedule.shutdown - t) > 1e-6 for t in events))
    cut = trio.run(play, schedule, clock=trio.testing.MockClock(autojump_threshold=0))
    assert cut.too_slow == expected.too_slow
    assert cut.at == pytest.approx(expected.at, abs=1e-6)


async def test_end_stops_the_watcher_in_every_phase(autojump_clock: trio.testing.MockClock) -> None:
    """``end`` returns the watcher at once, without cutting, whatever the phase."""
    cut: list[bool] = []

    async def expire(too_slow: bool) -> None:
        cut.append(too_slow)

    for phase in (Phase.IDLE, Phase.HEAD, Phase.BODY, Phase.BUSY):
        async with trio.open_nursery() as nursery:
            timer = ConnectionTimer(KEEP_ALIVE, LIMITS, trio.Event(), expire)
            timer.restart(nursery)
            if phase is not Phase.IDLE:
                timer.arrived(10)
            if phase in (Phase.BODY, Phase.BUSY):
                timer.stop()
                timer.handled(receiving_body=phase is Phase.BODY)
            assert timer.phase is phase
            began = trio.current_time()
            timer.end()
        assert trio.current_time() == began
        assert cut == []
        assert timer.phase is Phase.ENDED


def test_the_model_agrees_with_the_table() -> None:
    """Spot checks of ``expected_cut`` itself, against the docstring's table."""
    idle = Schedule((Request((Piece(6.0, 1),), (), 0.0),), None)
    assert expected_cut(idle)[0] == Cut(KEEP_ALIVE, False)
    slow_head = Schedule((Request((Piece(0.0, 1), Piece(11.0, 1)), (), 0.0),), None)
    assert expected_cut(slow_head)[0] == Cut(LIMITS.header_timeout, True)
    slow_body = Schedule((Request((Piece(0.0, 100),), (Piece(21.0, 1),), 0.0),), None)
    assert expected_cut(slow_body)[0] == Cut(LIMITS.body_timeout, True)
    long_app = Schedule((Request((Piece(0.0, 100),), (), 500.0),), None)
    assert expected_cut(long_app)[0] == Cut(500.0 + KEEP_ALIVE, False)

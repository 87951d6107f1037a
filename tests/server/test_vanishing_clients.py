"""Clients that vanish mid-stream while a cancel races their turn, and odd
bytes in streaming requests, seen from outside: over HTTP only.

``test_abandoned`` checks what a departing client leaves in the server
(descriptors, tasks) and that its turn commits whole. Here a second client
cancels the conversation (``POST …/cancel``) at a random moment while the
first one leaves at a random byte, in a random way, and what is checked is
what any client can see afterwards: the history (``GET …/messages``) is
valid, holds the turn whole or cut short as the cancel's count says, and
nothing twice; a client that read its whole answer was told the same; the
same request sent again (its idempotency key) is answered without a second
user message; the next turn answers 200; ``/health`` is 200; ``/metrics``
counts no 5xx; nothing was logged at ERROR; no descriptor or task is left.
A second client's turn may queue beside the first, and the model may take
long enough for heartbeats to go out mid-stream. The second property sends the
streaming routes and the cancel route requests that are wrong in one place
(a lone surrogate escaped in one field, a number in Unicode digits, nesting
past the bound, a huge header, an id that is not UTF-8): each gets a 4xx
with a JSON error (A2A: its JSON-RPC error) and stores nothing.

The first property found a retry of a cancelled turn with later turns
after it answered 500 ``turn_failed``: it is 409 ``not_resumable`` now
(``test_a_cancelled_turn_retried_after_a_later_turn_is_a_409``).

The server is ``serve_agentik`` on 127.0.0.1 in the example's own trio run,
in-memory storage, on trio's mock clock (it jumps after 2 ms of real
idleness: on loopback a sent byte is readable at once); the scripted model
takes a few (virtual) milliseconds per call, or seconds, so a cancel can
land anywhere in a turn.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from urllib.parse import quote

import attrs
import h11
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik import Message, ModelRequest, ModelResponse, Role, ToolCall
from agentik._serde import converter
from agentik.models import ScriptedModel
from agentik.server import Limits, ServerConfig, serve_agentik
from agentik.storage import in_memory_storage
from agentik.testing import assert_valid_history
from tests.server.rawconn import (
    TOOLSETS,
    TRANSPORTS,
    RawClient,
    fd_count,
    request_bytes,
    server_tasks,
)

ANSWER = "done"
CONVERSATION = "c1"
WAYS = ("close", "half-close", "reset", "stop-reading")
"""How the client goes: ``rawconn``'s three, and staying connected but never
reading again (closed only once everything is checked)."""


@attrs.define
class SlowModel:
    """Calls ``clock_now`` first, then answers ``ANSWER``; each call takes
    the drawn number of (virtual) milliseconds."""

    first_ms: int
    second_ms: int

    async def respond(self, request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role is Role.USER:
            await trio.sleep(self.first_ms / 1000)
            call = ToolCall(id=f"call-{len(request.messages)}", name="clock_now", arguments="{}")
            return ModelResponse(tool_calls=(call,))
        await trio.sleep(self.second_ms / 1000)
        return ModelResponse(text=ANSWER)


class Errors(logging.Handler):
    """Every record at ERROR or above, from any logger."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def errors_logged() -> Iterator[Errors]:
    handler = Errors()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


@attrs.frozen
class Served:
    port: int
    errors: Errors


@asynccontextmanager
async def serving(model: SlowModel) -> AsyncIterator[Served]:
    """``serve_agentik`` on 127.0.0.1 with ``model``; checks, on the way out,
    that nothing was logged at ERROR and no descriptor or task is left."""
    config = ServerConfig(port=0, toolsets=TOOLSETS, limits=Limits())
    stop = trio.Event()
    with errors_logged() as errors:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(
                lambda task_status: serve_agentik(
                    config,
                    storage=in_memory_storage(),
                    model=ScriptedModel(model.respond),
                    shutdown_trigger=stop.wait,
                    task_status=task_status,
                )
            )
            await trio.testing.wait_all_tasks_blocked()
            fds, tasks = fd_count(), server_tasks()
            yield Served(int(url.rsplit(":", 1)[1]), errors)
            with trio.fail_after(1):  # virtual: well under the keep-alive timeout
                while True:  # what the connections held is let go
                    await trio.testing.wait_all_tasks_blocked()
                    if fd_count() <= fds and server_tasks() == tasks:
                        break
                    await trio.sleep(0.01)
            stop.set()
    assert [r.getMessage() for r in errors.records] == []


@attrs.frozen
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, object]:
        data = json.loads(self.body)
        assert isinstance(data, dict), data
        return data


async def exchange(
    port: int,
    method: str,
    target: str,
    body: bytes = b"",
    headers: tuple[tuple[str, str], ...] = (),
) -> Answer:
    """One request on a new connection (closed after), its whole answer."""
    client = await RawClient.connect(port)
    fields = [("Host", "test"), ("Content-Length", str(len(body))), *headers]
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields)
    try:
        await client.send(head.encode("utf-8", "surrogateescape") + b"\r\n" + body)
        client.h11.send(h11.Request(method=method, target=b"/", headers=fields))
        client.h11.send(h11.Data(data=body))
        client.h11.send(h11.EndOfMessage())
        response = await client.read_event()
        assert isinstance(response, h11.Response), response
        data = b""
        while not isinstance(event := await client.read_event(), h11.EndOfMessage):
            assert isinstance(event, h11.Data), event
            data += event.data
        named = {k.decode(): v.decode() for k, v in response.headers}
        return Answer(response.status_code, named, data)
    finally:
        client.sock.close()


async def history(port: int) -> list[Message]:
    """The stored conversation over HTTP, checked valid; [] if there is none."""
    answer = await exchange(port, "GET", f"/agentik/conversations/{CONVERSATION}/messages")
    if answer.status == 404:
        return []
    assert answer.status == 200, answer
    messages = [converter.structure(m, Message) for m in answer.json()["messages"]]  # type: ignore[attr-defined]
    assert_valid_history(messages)
    return messages


def metrics(text: str) -> dict[str, str]:
    return dict(
        line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")
    )


async def still_serving(port: int) -> dict[str, str]:
    """``/health`` is 200; the metrics, checked to count no 5xx."""
    assert (await exchange(port, "GET", "/health")).status == 200
    counted = metrics((await exchange(port, "GET", "/metrics")).body.decode())
    assert counted['agentik_errors_total{kind="http_5xx"}'] == "0", counted
    assert counted.get('agentik_http_requests_total{status="5xx"}', "0") == "0", counted
    return counted


# --- a client that vanishes while a cancel races its turn ----------------------------


@attrs.define
class Cancel:
    """The racing ``POST …/cancel``: when it goes (virtual ms after the
    request's first byte) and what it got."""

    after_ms: int
    answer: Answer | None = None

    async def send(self, port: int) -> None:
        await trio.sleep(self.after_ms / 1000)
        self.answer = await exchange(port, "POST", f"/agentik/conversations/{CONVERSATION}/cancel")

    def count(self) -> int:
        """How many turns it says it cancelled; a 404 (the conversation had no
        message yet) cancelled none."""
        assert self.answer is not None
        if self.answer.status == 404:
            assert self.answer.json()["error"] == {  # nothing else is a 404 here
                "code": "not_found",
                "message": f"conversation {CONVERSATION!r} not found",
            }
            return 0
        assert self.answer.status == 200, self.answer
        reply = self.answer.json()
        assert reply["conversation_id"] == CONVERSATION, reply
        assert reply["cancelled"] in (0, 1, 2), reply
        return int(str(reply["cancelled"]))


async def play(client: RawClient, request: bytes, offset: int) -> None:
    """Send ``offset`` bytes of the request, or all of it and read
    ``offset - len(request)`` bytes of the answer (less if the server has
    nothing more to send for 40 virtual seconds: past two heartbeats)."""
    await client.send(request[:offset])
    wanted = offset - len(request)
    while len(client.received) < wanted:
        with trio.move_on_after(40):
            data = await client.sock.recv(wanted - len(client.received))
            if data:
                client.received += data
                continue
        break


def keyed_request(transport: str) -> tuple[bytes, bytes]:
    """``request_bytes`` with an idempotency key on the native routes (AG-UI's
    run and A2A's message carry theirs), so the same bytes sent again are a
    retry of the same turn."""
    head, body = request_bytes(transport, CONVERSATION)
    if not transport.startswith("native"):
        return head, body
    keyed = json.dumps({**json.loads(body), "idempotency_key": "k1"}).encode()
    return head.replace(
        f"Content-Length: {len(body)}".encode(), f"Content-Length: {len(keyed)}".encode()
    ), keyed


def leave(client: RawClient, way: str) -> None:
    if way == "stop-reading":
        return  # connected, reading nothing more
    client.leave(way)


def whole_answer(request_head: bytes, request_body: bytes, received: bytes) -> bytes | None:
    """The body of the answer if ``received`` holds all of it, else None."""
    client = RawClient(None)  # type: ignore[arg-type]  # parses only
    client.request_sent(request_head, request_body)
    if not received:
        return None
    client.h11.receive_data(received)
    body = b""
    while (event := client.h11.next_event()) is not h11.NEED_DATA:
        if isinstance(event, h11.EndOfMessage):
            return body
        if isinstance(event, h11.Data):
            body += event.data
    return None


CANCEL_WORDS = (b'"code":"cancelled"', b"TASK_STATE_CANCELED")
"""How each transport says its turn was cancelled (native and AG-UI say the
code; A2A's task ends CANCELED)."""

SECOND = b'{"text": "second", "idempotency_key": "k2"}'


@attrs.define
class Second:
    """Another client's turn on the conversation (native JSON), sent
    ``after_ms`` in: it reads the whole answer, or leaves once it has sent
    the request (``vanishes``: a queued turn whose client left is dropped
    unstarted, docs/agent.md)."""

    after_ms: int
    vanishes: bool
    answer: Answer | None = None

    async def send(self, port: int) -> None:
        await trio.sleep(self.after_ms / 1000)
        target = f"/agentik/conversations/{CONVERSATION}/turns"
        fields = (("Content-Type", "application/json"),)
        if not self.vanishes:
            self.answer = await exchange(port, "POST", target, SECOND, fields)
            return
        client = await RawClient.connect(port)
        head = f"POST {target} HTTP/1.1\r\nHost: test\r\nContent-Length: {len(SECOND)}\r\n"
        await client.send(head.encode() + b"Content-Type: application/json\r\n\r\n" + SECOND)
        client.sock.close()

    def told_cancelled(self) -> bool | None:
        """What its answer said, if it read one: 200 or 409 ``cancelled``."""
        if self.answer is None:
            return None
        if self.answer.status == 200:
            return False
        assert self.answer.status == 409, self.answer
        assert self.answer.json()["error"]["code"] == "cancelled", self.answer  # type: ignore[index]
        return True


MS = st.integers(min_value=0, max_value=10) | st.sampled_from([16_000, 31_000])
"""Milliseconds (virtual): a few, or past one or two SSE heartbeats (15 s)."""


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    transport=st.sampled_from(TRANSPORTS),
    way=st.sampled_from(WAYS),
    in_request=st.sampled_from([False, False, False, True]),
    at=st.integers(min_value=0, max_value=2_000),
    cancel_ms=st.none()
    | st.integers(min_value=0, max_value=25)
    | st.sampled_from([16_005, 31_005]),
    first_ms=MS,
    second_ms=MS,
    second=st.none() | st.builds(Second, after_ms=st.integers(0, 25), vanishes=st.booleans()),
    retry=st.booleans(),
)
def test_a_vanishing_client_and_a_racing_cancel_leave_a_valid_conversation(
    transport: str,
    way: str,
    in_request: bool,
    at: int,
    cancel_ms: int | None,
    first_ms: int,
    second_ms: int,
    second: Second | None,
    retry: bool,
) -> None:
    """The client leaves ``at`` bytes into its request (``in_request``) or
    into the answer, maybe with a ``second`` turn queued beside it. Each
    stored turn is whole, or cut short (every call answered) and counted by
    the cancel; a client that read its whole answer was told which. The
    same request sent again (``retry``) adds no second user message; the
    conversation takes its next turn."""
    if second is not None:
        second = attrs.evolve(second)  # a fresh one per run: it keeps its answer

    async def main() -> None:
        async with serving(SlowModel(first_ms, second_ms)) as server:
            head, body = keyed_request(transport)
            offset = at % len(head + body) if in_request else len(head + body) + at
            client = await RawClient.connect(server.port)
            cancel = None if cancel_ms is None else Cancel(cancel_ms)
            async with trio.open_nursery() as nursery:
                if cancel is not None:
                    nursery.start_soon(cancel.send, server.port)
                if second is not None:
                    nursery.start_soon(second.send, server.port)
                await play(client, head + body, offset)
                leave(client, way)
            await trio.sleep(200)  # virtual: every turn has ended
            answer = whole_answer(head, body, client.received)
            told = None if answer is None else any(word in answer for word in CANCEL_WORDS)
            check_turns(
                await history(server.port),
                0 if cancel is None else cancel.count(),
                {"hi": told} | ({} if second is None else {"second": second.told_cancelled()}),
                lost_ok=second is not None or offset <= len(head + body),
            )
            if retry:
                await retry_turn(server.port, head, body, cancel is not None)
            await next_turn(server.port, len(await history(server.port)))
            await still_serving(server.port)
            client.sock.close()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.002))


WHOLE = [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]


def check_turns(
    messages: list[Message], cancelled: int, told: dict[str, bool | None], *, lost_ok: bool
) -> None:
    """``told`` maps each turn sent (its text) to what its client was told,
    if it read its whole answer: cancelled or not. Each stored turn is whole
    or a cut-short prefix of one, each user message once; the cut ones are
    counted by the cancel, which counts nothing that then finished; a
    client told "cancelled" has no whole turn and one told the answer has
    it. Without a cancel, the first turn is stored unless it may not have
    arrived or may have been dropped while queued (``lost_ok``)."""
    turns: dict[str, list[Message]] = {}
    for message in messages:
        if message.role is Role.USER:
            assert message.content not in turns, f"{message.content!r} stored twice"
            turns[message.content] = []
        list(turns.values())[-1].append(message)
    cut = 0
    for text, turn in turns.items():
        roles = [m.role for m in turn]
        assert roles == WHOLE[: len(roles)], (text, roles)
        whole = roles == WHOLE
        assert not whole or turn[-1].content == ANSWER, turn
        cut += not whole
        if told.get(text) is not None:
            assert told[text] == (not whole), (text, roles)
    not_stored = sum(text not in turns for text in told)
    assert cut <= cancelled <= cut + not_stored, (cut, cancelled, turns)
    for text, was_told in told.items():
        if was_told is not None and text not in turns:
            assert was_told, f"{text!r} answered but not stored"
    if not cancelled and not lost_ok:
        assert "hi" in turns, "a turn that was sent whole and not cancelled is lost"


async def retry_turn(port: int, head: bytes, body: bytes, cancelled: bool) -> None:
    """The same bytes again, read whole: the turn is there once. A turn that
    finished is answered as it was; the conversation's last turn, cut short
    or never stored, runs to its answer (docs/agent.md, "Exactly once"), on
    every transport but A2A, whose cancelled task may stay cancelled; one
    cut short with a turn after it is refused."""
    client = await RawClient.connect(port)
    try:
        await client.send(head + body)
        with trio.fail_after(100):
            while (answer := whole_answer(head, body, client.received)) is None:
                data = await client.sock.recv(65536)
                assert data, client.received
                client.received += data
    finally:
        client.sock.close()
    messages = await history(port)
    users = [i for i, m in enumerate(messages) if m.role is Role.USER]
    [first] = [i for i in users if messages[i].content == "hi"]
    turn = messages[first : min([i for i in users if i > first], default=len(messages))]
    if [m.role for m in turn] != WHOLE and first != users[-1]:
        if head.startswith(b"POST /agentik/") and b"event-stream" not in head:
            assert client.received.startswith(b"HTTP/1.1 409 "), client.received
            assert b'"not_resumable"' in answer, answer
        return
    if first == users[-1] and not (cancelled and head.startswith(b"POST /a2a ")):
        assert client.received.startswith(b"HTTP/1.1 200 "), client.received
        assert [m.role for m in turn] == WHOLE, turn
        assert turn[-1].content == ANSWER
        assert not any(word in answer for word in CANCEL_WORDS), answer


async def next_turn(port: int, before: int) -> None:
    """A turn after everything: 200 with the answer, appended to a valid history."""
    answer = await exchange(
        port,
        "POST",
        f"/agentik/conversations/{CONVERSATION}/turns",
        b'{"text": "again"}',
        (("Content-Type", "application/json"),),
    )
    assert answer.status == 200, answer
    messages = await history(port)
    assert [m.role for m in messages[before:]] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
    ]
    assert [m.content for m in messages if m.role is Role.USER][-1] == "again"


# --- requests wrong in one place -----------------------------------------------------

MARK = "@@mark@@"
SURROGATES = st.one_of(
    st.integers(0xD800, 0xDFFF).map(lambda c: f"\\u{c:04x}"),  # alone
    st.just("\\udc00\\ud800"),  # a pair the wrong way round
)
BAD_VALUES = st.one_of(
    st.sampled_from(["\u0663", "\u00b2", "\uff11", "\u0661\u0662", "-\u0663"]),  # not JSON numbers
    st.integers(4_301, 6_000).map(lambda n: "9" * n),  # past the 4,300-digit bound
    st.sampled_from(["1e400", "-1e400", "NaN", "Infinity"]),
    st.integers(101, 3_000).map(lambda depth: "[" * depth + "]" * depth),
    st.integers(101, 3_000).map(lambda depth: '{"a":' * depth + "0" + "}" * depth),
)
UNKNOWN_IDS = st.sampled_from(["\u0663", "\u00b2", "\uff11", "0", "-1", "9" * 200, "c\u0661"])
BAD_PATH_IDS = st.sampled_from(["%ED%A0%80", "%ED%BF%BF", "%FF", "%C3%28", "c%80", "%F4%90%80%80"])


def strings_in(value: object, at: tuple[object, ...] = ()) -> Iterator[tuple[object, ...]]:
    """The path to every string (as a value) and every key in ``value``."""
    if isinstance(value, str):
        yield at
    elif isinstance(value, dict):
        for key, item in value.items():
            yield (*at, ("key", key))
            yield from strings_in(item, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from strings_in(item, (*at, index))


def values_in(value: object, at: tuple[object, ...] = ()) -> Iterator[tuple[object, ...]]:
    """The path to every value below the top."""
    children = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in children:
        yield (*at, key)
        yield from values_in(item, (*at, key))


def marked(body: object, at: tuple[object, ...], *, inside: bool) -> object:
    """``body`` with ``MARK`` put at ``at``: into the string or key there
    (``inside``), or in place of the value there."""
    if not at:
        return body + MARK if inside else MARK  # type: ignore[operator]
    step, rest = at[0], at[1:]
    if isinstance(step, tuple):  # ("key", key): the key itself, at the end of the path
        assert isinstance(body, dict)
        return {(k + MARK if k == step[1] else k): v for k, v in body.items()}
    if isinstance(body, dict):
        return {k: marked(v, rest, inside=inside) if k == step else v for k, v in body.items()}
    assert isinstance(body, list)
    return [marked(v, rest, inside=inside) if i == step else v for i, v in enumerate(body)]


@st.composite
def wrong_requests(draw: st.DrawFn) -> tuple[str, str, bytes, tuple[tuple[str, str], ...]]:
    """(what is wrong, target, body, headers): a streaming turn request on one
    of the three transports, or a cancel, spoiled in one place."""
    route = draw(st.sampled_from(["native-sse", "agui", "a2a", "cancel"]))
    fields: tuple[tuple[str, str], ...]
    if route == "cancel":
        target, body, fields = f"/agentik/conversations/{CONVERSATION}/cancel", b"", ()
    else:
        head, body = request_bytes(route, CONVERSATION)
        start, *lines = head.decode().strip().split("\r\n")
        target = start.split(" ")[1]
        fields = tuple(
            (k, v)
            for k, v in (line.split(": ", 1) for line in lines)
            if k not in ("Host", "Content-Length")
        )
    wrongs = ["path", "header"] if route in ("native-sse", "cancel") else ["header"]
    wrongs += ["unknown"] if route == "cancel" else ["surrogate", "value"]
    wrong = draw(st.sampled_from(wrongs))
    if wrong == "path":
        target = target.replace(CONVERSATION, draw(BAD_PATH_IDS))
    elif wrong == "unknown":  # well-formed, never seen: Unicode digits are no number here
        target = target.replace(CONVERSATION, quote(draw(UNKNOWN_IDS), safe=""))
    elif wrong == "header":
        size = draw(st.integers(16 * 1024, 48 * 1024))
        fields = (
            (*fields, ("X-Padding", "a" * size))
            if draw(st.booleans())
            else (
                *fields,
                *((f"X-{n}", "a") for n in range(101)),
            )
        )
    elif wrong == "surrogate":
        parsed = json.loads(body)
        at = draw(st.sampled_from(list(strings_in(parsed))))
        text = json.dumps(marked(parsed, at, inside=True), separators=(",", ":"))
        body = text.replace(MARK, draw(SURROGATES)).encode()
    else:
        parsed = json.loads(body)
        at = draw(st.sampled_from(list(values_in(parsed))))
        text = json.dumps(marked(parsed, at, inside=False), separators=(",", ":"))
        body = text.replace(json.dumps(MARK), draw(BAD_VALUES)).encode()
    return wrong, target, body, fields


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(request=wrong_requests())
def test_a_request_wrong_in_one_place_is_refused_and_stores_nothing(
    request: tuple[str, str, bytes, tuple[tuple[str, str], ...]],
) -> None:
    """A 4xx naming what is wrong as a JSON error (A2A: HTTP 200 with the
    JSON-RPC parse error; a head past its bounds: the engine's 431, no body,
    connection closed); nothing is stored or started and the next turn runs."""
    wrong, target, body, fields = request

    async def main() -> None:
        async with serving(SlowModel(1, 1)) as server:
            answer = await exchange(server.port, "POST", target, body, fields)
            check_refusal(wrong, target, answer)
            listed = (await exchange(server.port, "GET", "/agentik/conversations")).json()
            assert listed["conversations"] == [], listed
            counted = await still_serving(server.port)
            assert counted['agentik_turns_total{outcome="started"}'] == "0", counted
            await next_turn(server.port, 0)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.002))


def check_refusal(wrong: str, target: str, answer: Answer) -> None:
    if wrong == "header":
        assert answer.status == 431, answer
        assert answer.headers.get("connection") == "close", answer
        return
    if target == "/a2a":
        assert answer.status == 200, answer
        reply = answer.json()
        assert reply["id"] is None and reply["error"]["code"] == -32700, reply  # type: ignore[index]
        return
    assert 400 <= answer.status < 500, answer
    assert answer.headers["content-type"] == "application/json", answer
    error = answer.json()["error"]
    assert isinstance(error, dict) and set(error) == {"code", "message"}, error
    expected = {"path": "invalid_path", "unknown": "not_found"}.get(wrong, "invalid_json")
    assert error["code"] == expected, error


# --- found by the first property -----------------------------------------------------


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.002)


async def test_a_cancelled_turn_retried_after_a_later_turn_is_a_409(
    clock: trio.testing.MockClock,
) -> None:
    """A turn cancelled half-way, then another turn, then the first sent again
    with its idempotency key: it cannot be resumed (docs/agent.md, "Exactly
    once"), which is the request's conflict with the conversation, not a
    failure of the server: 409 ``not_resumable``, nothing stored, no 5xx
    counted. It was a 500 ``turn_failed``, the code of an internal failure."""
    fields = (("Content-Type", "application/json"),)
    target = f"/agentik/conversations/{CONVERSATION}/turns"
    first = b'{"text": "hi", "idempotency_key": "k1"}'
    async with serving(SlowModel(first_ms=0, second_ms=10_000)) as server:
        cancel = Cancel(after_ms=1_000)  # the tool has run; the model thinks
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel.send, server.port)
            cut = await exchange(server.port, "POST", target, first, fields)
        assert (cut.status, cancel.count()) == (409, 1), cut
        assert (await exchange(server.port, "POST", target, SECOND, fields)).status == 200
        before = await history(server.port)
        again = await exchange(server.port, "POST", target, first, fields)
        assert again.status == 409, again
        assert again.json()["error"]["code"] == "not_resumable", again  # type: ignore[index]
        assert await history(server.port) == before
        await still_serving(server.port)

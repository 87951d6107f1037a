"""HTTP fuzz over every route (issue 14, item 4, the class behind the examples
in ``test_bad_input``): whatever a client sends, the server answers with a
well-formed response and no 5xx but the documented 502/503/507, counts no
storage fault, and serves a valid turn afterwards.

Hypothesis generates, for every route and method of the app: JSON *text*
built leaf by leaf (so numbers can be what no encoder writes: 5,000-digit
integers, ``1e400``, ``-0``, ``NaN``; strings carry escaped lone surrogates;
nesting comes from a recursive strategy, and explicit 5,000-deep documents
are sent too), bodies shaped like each protocol's requests with those values
inside, raw bytes, query strings with Unicode digits and huge numbers, and
path ids with percent-encoded invalid UTF-8.

One real server (``serve_agentik`` on 127.0.0.1, a SQLite file, a scripted model that
answers every turn) serves the whole module. pytest-trio runs each async test
in its own event loop, so the server runs in a thread with its own
``trio.run``; the tests are synchronous and talk to it with ``httpx2.Client``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from functools import partial
from types import SimpleNamespace
from typing import Any, cast
from urllib.parse import quote

import attrs
import httpx2
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.routing import Route

from agentik import ModelRequest, ModelResponse, ScriptedModel
from agentik.agent import ChatAgent
from agentik.server import Limits, ServerConfig, ServerContext, build_app, serve_agentik

DOCUMENTED_5XX = frozenset({502, 503, 507})
A2A_METHODS = ["SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask"]

# (method, path template): every route of the app; test_the_route_table_is_complete
# keeps this list equal to what build_app serves.
ROUTES = [
    ("GET", "/health"),
    ("GET", "/metrics"),
    ("POST", "/agentik/conversations/{conversation_id}/turns"),
    ("GET", "/agentik/conversations"),
    ("GET", "/agentik/conversations/{conversation_id}/messages"),
    ("GET", "/agentik/conversations/{conversation_id}/memory"),
    ("POST", "/agentik/conversations/{conversation_id}/memory/archive"),
    ("GET", "/agentik/conversations/{conversation_id}/memory/archived"),
    ("GET", "/agentik/conversations/{conversation_id}/summary"),
    ("GET", "/agentik/conversations/{conversation_id}/summaries"),
    ("GET", "/agentik/conversations/{conversation_id}/toolsets"),
    ("GET", "/agentik/conversations/{conversation_id}/usage"),
    ("GET", "/agentik/conversations/{conversation_id}/export"),
    ("POST", "/agentik/conversations/{conversation_id}/cancel"),
    ("DELETE", "/agentik/conversations/{conversation_id}"),
    ("GET", "/agentik/conversations/{conversation_id}/approvals"),
    ("POST", "/agentik/conversations/{conversation_id}/approvals/{call_id:path}"),
    ("GET", "/agentik/conversations/{conversation_id}/elicitations"),
    ("POST", "/agentik/conversations/{conversation_id}/elicitations/{elicitation_id}"),
    ("GET", "/agentik/reflections"),
    ("GET", "/agentik/skills"),
    ("GET", "/agentik/skills/{name}"),
    ("PUT", "/agentik/skills/{name}"),
    ("DELETE", "/agentik/skills/{name}"),
    ("POST", "/agui"),
    ("GET", "/.well-known/agent-card.json"),
    ("POST", "/a2a"),
]
BODY_ROUTES = [(m, p) for m, p in ROUTES if m in ("POST", "PUT")]


def answer(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text=f"heard {len(request.messages)} messages")


# --- the server ----------------------------------------------------------------------


@attrs.frozen
class Server:
    url: str
    client: httpx2.Client


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    database = tmp_path_factory.mktemp("fuzz") / "agentik.db"
    config = ServerConfig(
        port=0, database=str(database), limits=Limits(graceful_timeout=1.0, max_queued_turns=64)
    )
    ready = threading.Event()
    found: dict[str, Any] = {}

    async def main() -> None:
        stop = trio.Event()
        found["stop"] = (trio.lowlevel.current_trio_token(), stop)
        async with trio.open_nursery() as nursery:
            serve = partial(
                serve_agentik, config, model=ScriptedModel(answer), shutdown_trigger=stop.wait
            )
            found["url"] = await nursery.start(serve)
            ready.set()

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as error:  # handed to the test thread
            found["error"] = error
            ready.set()

    thread = threading.Thread(target=run, name="fuzz-server")
    thread.start()
    ready.wait(60)
    if "url" not in found:
        raise RuntimeError(f"the fuzz server did not start: {found.get('error')!r}")
    try:
        with httpx2.Client(base_url=found["url"], timeout=60) as client:
            yield Server(found["url"], client)
    finally:
        token, stop = found["stop"]
        trio.from_thread.run_sync(stop.set, trio_token=token)
        thread.join(60)
    assert "error" not in found, found["error"]


def test_the_route_table_is_complete() -> None:
    """ROUTES is every (method, path) the app routes: a new route is fuzzed or fails here."""
    agent = SimpleNamespace(storage=SimpleNamespace(message_store=None), tracing=False)
    ctx = ServerContext(
        agent=cast(ChatAgent, agent),
        config=ServerConfig(),
        model_label="m",
        demo_model=False,
        storage_label="s",
    )
    app = build_app(ctx).app  # type: ignore[attr-defined]
    served = {
        (method, route.path)
        for route in app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }
    assert served == set(ROUTES)


# --- what a response must look like ----------------------------------------------------


def check_response(response: httpx2.Response) -> None:
    """No undocumented 5xx; errors are ``{"error": {"code", "message"}}``; JSON
    parses; every SSE frame is one JSON object and the stream ends properly;
    a 503 says when to retry."""
    status = response.status_code
    assert status < 500 or status in DOCUMENTED_5XX, (status, response.text[:500])
    if status == 503:
        assert response.headers.get("retry-after", "").isdigit(), response.headers
    kind = response.headers.get("content-type", "")
    if status == 204:
        assert response.content == b""
    elif 300 <= status < 400:  # Starlette's trailing-slash redirect ("/skills/" -> "/skills")
        assert response.headers["location"]
    elif status >= 400:
        error = response.json()["error"]
        assert isinstance(error["code"], str), error
        assert isinstance(error["message"], str), error
        assert error["message"], error
    elif kind.startswith("application/json"):
        body = response.json()
        if response.request.url.path == "/a2a":
            assert body["jsonrpc"] == "2.0"
            assert ("result" in body) != ("error" in body), body
            if "error" in body:
                assert isinstance(body["error"]["code"], int), body
    elif kind.startswith("text/event-stream"):
        frames = [
            json.loads(line.removeprefix("data: "))
            for line in response.text.split("\n")
            if line.startswith("data: ")
        ]
        assert frames, response.text[:500]
        last = frames[-1]
        path = response.request.url.path
        if path == "/agui":
            assert last["type"] in ("RUN_FINISHED", "RUN_ERROR"), last
        elif path == "/a2a" and "error" in last:
            # A stream refused before its first event: one ``error`` event, the
            # JSON-RPC error response (a2a/_methods.error_stream), alone.
            assert len(frames) == 1, frames
            assert isinstance(last["error"]["code"], int), last
            assert "result" not in last, last
        elif path == "/a2a":
            state = last.get("result", {}).get("statusUpdate", {}).get("status", {}).get("state")
            assert state in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED")
        else:
            assert last["type"] in ("turn_finished", "turn_failed"), last
    else:
        assert response.request.url.path in ("/metrics", "/health"), kind


def metrics(client: httpx2.Client) -> dict[str, str]:
    text = client.get("/metrics").text
    return dict(
        line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")
    )


def assert_still_serving(client: httpx2.Client) -> None:
    """After the fuzz: healthy, a valid turn runs, and nothing failed or crashed."""
    assert client.get("/health").json()["status"] == "ok"
    reply = client.post("/agentik/conversations/after-fuzz/turns", json={"text": "still there?"})
    assert reply.status_code == 200, reply.text
    assert reply.json()["text"].startswith("heard ")
    counted = metrics(client)
    assert counted['agentik_errors_total{kind="turn"}'] == "0", "a turn failed (a store_error?)"
    assert counted['agentik_errors_total{kind="http_5xx"}'] == "0"


SENT: list[int] = []
"""One entry per request sent: each fuzz checks that its examples really ran."""


def send(
    client: httpx2.Client,
    method: str,
    path: str,
    *,
    body: bytes | None = None,
    query: str = "",
    headers: dict[str, str] | None = None,
) -> None:
    url = path + (f"?{query}" if query else "")
    response = client.request(method, url, content=body, headers=headers)
    SENT.append(response.status_code)
    check_response(response)


# --- strategies ----------------------------------------------------------------------

every_character = st.characters(exclude_categories=())  # surrogates included
some_text = st.text(every_character, max_size=30) | st.sampled_from(
    ["\ud800", "a\udc00b", "\U0001f99c", "", " ", "x" * 300, "\x1f", "\x00"]
)
plain_text = st.text(
    st.characters(categories=["L", "M", "N", "P", "S", "Zs"]), min_size=1, max_size=20
).filter(lambda text: text.isprintable() and text.strip())
"""Printable text of every script, not only spaces: what ids and turns take.
(``isprintable`` is false for every space but U+0020: an id holding U+00A0
is refused, so it is not plausible.)"""
odd_numbers = st.sampled_from(
    [
        "9" * 5000,
        "-" + "9" * 4301,
        "9" * 4300,
        "1e400",
        "-1e400",
        "1e-400",
        "-0",
        "-0.0",
        "NaN",
        "Infinity",
        "-Infinity",
        "1E+308",
        "0." + "0" * 5000 + "1",
        "123456789012345678901234567890",
    ]
)


def json_string(text: str) -> str:
    """A JSON string literal; lone surrogates travel as ``\\ud800`` escapes."""
    return json.dumps(text)


json_leaves = st.one_of(
    st.sampled_from(["null", "true", "false"]),
    st.integers().map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    odd_numbers,
    some_text.map(json_string),
)


def _containers(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(children, max_size=4).map(lambda items: "[" + ",".join(items) + "]") | (
        st.lists(st.tuples(some_text.map(json_string), children), max_size=4).map(
            lambda pairs: "{" + ",".join(f"{k}:{v}" for k, v in pairs) + "}"
        )
    )


json_texts = st.recursive(json_leaves, _containers, max_leaves=20) | st.sampled_from(
    [
        "[" * 5000 + "]" * 5000,
        '{"a":' * 5000 + "1" + "}" * 5000,
        "[" * 101 + "]" * 101,
        "[" * 100 + "]" * 100,
        "[" * 5000,
    ]
)


def obj(**fields: str) -> str:
    """A JSON object from already-encoded values."""
    return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in fields.items()) + "}"


def optional(strategy: st.SearchStrategy[str]) -> st.SearchStrategy[str | None]:
    return st.none() | strategy


@st.composite
def shaped_body(draw: st.DrawFn, path: str, *, plausible: bool | None = None) -> str:
    """A request body shaped like the route's protocol. With ``plausible`` (half
    the time if not given) every value is plausible (so turns run and streams
    stream to their end), else each value is odd one time in three (so every
    field is probed)."""
    plain = plain_text.map(json_string)
    small = st.integers(-3, 120).map(str)
    if plausible if plausible is not None else draw(st.booleans()):
        value, number, anything = plain, small, st.sampled_from(["{}", "[]", '{"a":[1,"b"]}'])
    else:
        weird = json_texts | some_text.map(json_string)
        value, number, anything = plain | plain | weird, small | small | weird, json_texts
    if path.endswith("/turns"):
        fields = {"text": draw(value)}
        if draw(st.booleans()):
            fields["idempotency_key"] = draw(value)
        return obj(**fields)
    if path.startswith("/agentik/skills"):
        return obj(description=draw(value), body=draw(value))
    if "/approvals/" in path:
        fields = {"approve": draw(st.sampled_from(["true", "false"]) | anything)}
        if draw(st.booleans()):
            fields["reason"] = draw(value)
        return obj(**fields)
    if path == "/agui":
        message = obj(id=draw(value), role=json.dumps("user"), content=draw(value))
        return obj(
            threadId=draw(value),
            runId=draw(value),
            messages="[" + message + "]",
            state=draw(anything),
            tools=draw(anything),
        )
    method = draw(st.sampled_from(A2A_METHODS) | st.sampled_from(A2A_METHODS) | some_text)
    part = obj(text=draw(value))
    message = obj(
        messageId=draw(value),
        role=json.dumps("ROLE_USER"),
        parts="[" + part + "]",
        contextId=draw(value),
    )
    params = {"message": message, "id": draw(value), "contextId": draw(value)}
    for name in ("pageSize", "historyLength"):
        if draw(st.booleans()):
            params[name] = draw(number)
    if draw(st.booleans()):
        params["status"] = draw(st.sampled_from(['"TASK_STATE_COMPLETED"', '"TASK_STATE_FAILED"']))
    if draw(st.booleans()):
        params["pageToken"] = draw(value)
    fields = {"jsonrpc": json.dumps("2.0"), "method": json_string(method), "params": obj(**params)}
    if draw(st.integers(0, 3)):  # a notification one time in four
        fields["id"] = draw(value | number)
    return obj(**fields)


path_ids = st.one_of(
    some_text.map(lambda t: quote(t.encode("utf-8", "surrogatepass"), safe="")),
    st.binary(min_size=1, max_size=12).map(lambda b: quote(b, safe="")),
    st.sampled_from(["%FF", "%C3", "%ED%A0%80", "%00", "..", "%2F", "a%80b", "x" * 300]),
)
query_values = st.one_of(
    st.sampled_from(["²", "¹", "\u0663", "\uff11", "9" * 5000, "-1", "0", "1e3", " 1", "1_0"]),
    st.integers().map(str),
    some_text,
).map(lambda t: quote(t.encode("utf-8", "surrogatepass"), safe=""))
query_strings = st.lists(
    st.tuples(st.sampled_from(["limit", "after_seq", "after", "x"]), query_values), max_size=3
).map(lambda pairs: "&".join(f"{k}={v}" for k, v in pairs)) | st.sampled_from(
    ["limit=%FF", "after=%C3%28", "%FF=1"]
)
a2a_headers = st.sampled_from(
    [
        {"A2A-Version": "1.0"},
        {"A2A-Version": "1.0", "Accept": "text/event-stream"},
        {},
        {"A2A-Version": "0.3"},
    ]
)


def fill(path: str, draw_id: str) -> str:
    for name in ("{conversation_id}", "{name}", "{call_id:path}", "{elicitation_id}"):
        path = path.replace(name, draw_id)
    return path


EXAMPLES = 250
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- the fuzz ------------------------------------------------------------------------


def test_json_bodies_on_every_body_route(server: Server) -> None:
    """Random JSON texts and protocol-shaped bodies full of odd values."""

    @FUZZ
    @given(route=st.sampled_from(BODY_ROUTES), data=st.data(), headers=a2a_headers)
    def fuzz(route: tuple[str, str], data: st.DataObject, headers: dict[str, str]) -> None:
        method, path = route
        filled = fill(path, data.draw(st.sampled_from(["c1", "c2", "s1"])))
        text = data.draw(json_texts | shaped_body(path))
        send(server.client, method, filled, body=text.encode(), headers=headers)

    SENT.clear()
    fuzz()
    assert len(SENT) >= EXAMPLES, len(SENT)
    assert_still_serving(server.client)


def test_plausible_requests_run_to_their_end(server: Server) -> None:
    """Protocol-shaped bodies of any valid Unicode: turns run, SSE streams (native,
    AG-UI, A2A) end with their closing event, JSON-RPC notifications get 204."""

    @FUZZ
    @given(route=st.sampled_from(BODY_ROUTES), data=st.data(), headers=a2a_headers)
    def fuzz(route: tuple[str, str], data: st.DataObject, headers: dict[str, str]) -> None:
        method, path = route
        filled = fill(path, data.draw(plain_text.map(lambda t: quote(t, safe=""))))
        text = data.draw(shaped_body(path, plausible=True))
        send(server.client, method, filled, body=text.encode(), headers=headers)

    SENT.clear()
    fuzz()
    assert len(SENT) >= EXAMPLES, len(SENT)
    assert sum(200 <= status < 300 for status in SENT) >= EXAMPLES // 4, sorted(SENT)
    assert_still_serving(server.client)


def test_raw_bytes_on_every_body_route(server: Server) -> None:
    @FUZZ
    @given(route=st.sampled_from(BODY_ROUTES), body=st.binary(max_size=200), headers=a2a_headers)
    def fuzz(route: tuple[str, str], body: bytes, headers: dict[str, str]) -> None:
        method, path = route
        send(server.client, method, fill(path, "raw"), body=body, headers=headers)

    SENT.clear()
    fuzz()
    assert len(SENT) >= EXAMPLES, len(SENT)
    assert_still_serving(server.client)


def test_path_ids_and_queries_on_every_route(server: Server) -> None:
    """Every route, path ids with invalid UTF-8, queries with odd numbers."""

    @FUZZ
    @given(
        route=st.sampled_from([*ROUTES, ("GET", "/{conversation_id}"), ("PATCH", "/agui")]),
        path_id=path_ids,
        query=query_strings,
        body=st.sampled_from([None, b'{"text": "hi"}', b'{"description": "d", "body": "b"}']),
    )
    def fuzz(route: tuple[str, str], path_id: str, query: str, body: bytes | None) -> None:
        method, path = route
        send(server.client, method, fill(path, path_id), body=body, query=query)

    SENT.clear()
    fuzz()
    assert len(SENT) >= EXAMPLES, len(SENT)
    assert_still_serving(server.client)


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 5000 + b"]" * 5000,
        b'{"text":' * 5000 + b'"x"' + b"}" * 5000,
        b'{"a": "\\ud800"}',
        b'{"text": ' + b"9" * 5000 + b"}",
    ],
    ids=["deep-array", "deep-object", "surrogate", "long-int"],
)
def test_explicit_documents_on_every_body_route(server: Server, body: bytes) -> None:
    """The extremes, on each route, every time (not left to the search)."""
    for method, path in BODY_ROUTES:
        send(server.client, method, fill(path, "x"), body=body, headers={"A2A-Version": "1.0"})
    assert_still_serving(server.client)


def test_health_reports_nothing_failed(server: Server) -> None:
    assert_still_serving(server.client)

"""``Retry-After`` and ``retry-after-ms`` as RFC 9110 §10.2.3 writes them, and
what a turn passes on from a backend that asks for odd waits.

The parser is held to the grammar over generated headers (delay-seconds in
ASCII digits, the three HTTP-date forms, every other script's digits, odd
text); then a real Chat Completions server on 127.0.0.1 (``chat_server``)
answers 429 with such headers to the real ``OpenAICompatibleModel``, on
trio's MockClock (autojump), so a wait of days would show as virtual time.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx2
import pytest
import trio
import trio.testing
from hypothesis import example, given
from hypothesis import strategies as st

from agentik import (
    Message,
    ModelBackendError,
    ModelRequest,
    OpenAICompatibleModel,
    Role,
    TurnError,
    in_memory_storage,
    open_chat_agent,
)
from agentik.agent._failures import MAX_RETRY_AFTER
from agentik.models import RetryPolicy, read_rate_limit
from agentik.models._failures import refusal
from agentik.models._redact import Redactor
from agentik.models._retry import _requested_delay
from tests.models.chat_server import ChatServer, Json
from tests.models.conftest import RecordedSleep

NOW = datetime(2026, 12, 8, 12, 0, 0, tzinfo=UTC)
LIMITED = {"error": {"message": "slow down", "type": "rate_limit_error"}}
NON_ASCII_DIGITS = st.text(st.characters(categories=["Nd"]), min_size=1, max_size=4).filter(
    lambda text: not text.isascii()
)


def asked(**headers: str) -> float | None:
    return _requested_delay(headers, NOW)


@given(st.text(max_size=60), st.text(max_size=60))
@example("1e400", "nan")
@example("-5", "Sun, 06 Nov 1994 08:49:37 GMT")
def test_any_header_reads_as_no_wait_or_a_finite_wait_of_zero_or_more(
    millis: str, seconds: str
) -> None:
    """Whatever the backend sends, the delay read is None or finite and >= 0,
    and reading never raises."""
    for headers in ({"retry-after": seconds}, {"retry-after-ms": millis, "retry-after": seconds}):
        delay = _requested_delay(headers, NOW)
        assert delay is None or 0 <= delay < math.inf


@given(st.integers(0, 10**12), st.sampled_from(["", " ", "\t", "  "]))
def test_delay_seconds_in_ascii_digits_read_as_they_say(seconds: int, space: str) -> None:
    """``1*DIGIT``, with the field's optional whitespace around it."""
    assert asked(**{"retry-after": f"{space}{seconds}{space}"}) == seconds


@given(NON_ASCII_DIGITS)
@example("\u0661\u0662")  # Arabic-Indic 12
@example("\uff11\uff12")  # fullwidth 12
def test_other_scripts_digits_are_unreadable(digits: str) -> None:
    """``float()`` reads ``'١٢'`` as 12; RFC 9110's DIGIT is ASCII only."""
    assert asked(**{"retry-after": digits}) is None
    assert asked(**{"retry-after-ms": digits}) is None
    assert asked(**{"retry-after-ms": digits, "retry-after": "7"}) == 7


@pytest.mark.parametrize(
    "text", ["", " ", "-5", "+5", "1e3", "1_000", "0x10", "5.", ".5", "inf", "nan", "5, 5", "5 5"]
)
def test_what_is_not_delay_seconds_is_unreadable(text: str) -> None:
    """A sign, an exponent, ``_``, hex, a repeated header (joined ``5, 5``): no wait asked."""
    assert asked(**{"retry-after": text}) is None


def test_a_fraction_is_read_as_the_openai_sdk_reads_it() -> None:
    assert asked(**{"retry-after": "1.5"}) == 1.5
    assert asked(**{"retry-after-ms": "1500"}) == 1.5
    assert asked(**{"retry-after-ms": "0.5"}) == 0.0005


def test_an_unreadable_retry_after_ms_leaves_retry_after_in_charge() -> None:
    """OpenAI sends both; a proxy's odd ``retry-after-ms`` must not hide the other."""
    for millis in ("-5", "", "1e3", "nan", "\u0665"):
        assert asked(**{"retry-after-ms": millis, "retry-after": "7"}) == 7


def _asctime(when: datetime) -> str:
    return when.strftime("%a %b ") + f"{when.day:2d}" + when.strftime(" %H:%M:%S %Y")


def _rfc850(when: datetime) -> str:
    return when.strftime("%A, %d-%b-%y %H:%M:%S GMT")


@given(
    st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2068, 12, 31), timezones=st.just(UTC)
    ).map(lambda when: when.replace(microsecond=0)),
    st.sampled_from([lambda w: format_datetime(w, usegmt=True), _rfc850, _asctime]),
)
def test_http_dates_in_all_three_forms(when: datetime, form: object) -> None:
    """IMF-fixdate, RFC 850 and asctime: the seconds until then; a date in the
    past asks for no wait (0), never a negative one."""
    text = form(when)  # type: ignore[operator]
    assert asked(**{"retry-after": text}) == max(0.0, (when - NOW).total_seconds())


def test_a_repeated_header_is_unreadable() -> None:
    """httpx2 joins repeated fields with ``, ``: Retry-After is a singleton, so
    two values (even equal ones) are not one wait."""
    response = httpx2.Response(
        429,
        headers=[("Retry-After", "5"), ("Retry-After", "5")],
        request=httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions"),
    )
    error = refusal(response, "u", Redactor.for_credentials(None, {}, "u"), RetryPolicy())
    assert error.retry_after is None


@given(st.sampled_from(["-5", "Sun, 06 Nov 1994 08:49:37 GMT", "0"]))
def test_a_past_or_negative_wait_is_no_pause_of_the_scheduler(text: str) -> None:
    answer = read_rate_limit(429, {"retry-after": text}, now=NOW)
    assert answer is not None
    assert answer.retry_after in (None, 0.0)
    assert answer.pause == 1.0  # DEFAULT_PAUSE


def _model(server: ChatServer, **options: object) -> OpenAICompatibleModel:
    return OpenAICompatibleModel(server.base_url, "m", jitter=lambda: 0.0, **options)  # type: ignore[arg-type]


REQUEST = ModelRequest([Message(Role.USER, "hi")])


@pytest.mark.parametrize(
    "huge", ["1000000000000", "99999999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT"]
)
async def test_a_huge_retry_after_is_not_slept_inside_the_call(
    chat_server: ChatServer, autojump_clock: trio.testing.MockClock, huge: str
) -> None:
    """Past ``max_retry_after`` the model backs off as usual (0.5 s, then 1 s)
    and gives up within seconds, not days."""
    chat_server.script(*[Json(LIMITED, status=429, headers={"Retry-After": huge})] * 3)
    start = trio.current_time()
    async with _model(chat_server) as model:
        with pytest.raises(ModelBackendError, match="gave up after 3 attempts"):
            await model.complete(REQUEST)
    assert trio.current_time() - start == pytest.approx(1.5)


async def test_a_retry_after_past_the_timeout_fails_at_once(
    chat_server: ChatServer, autojump_clock: trio.testing.MockClock
) -> None:
    """Asked to wait 100 s by a call allowed 30: it fails now, saying why,
    rather than sleeping into its own timeout."""
    chat_server.script(Json(LIMITED, status=429, headers={"Retry-After": "100"}))
    start = trio.current_time()
    async with _model(chat_server, timeout=30.0) as model:
        with pytest.raises(ModelBackendError, match="would pass the 30 s timeout") as raised:
            await model.complete(REQUEST)
    assert trio.current_time() - start < 1
    assert raised.value.retry_after == 100


async def test_non_ascii_digits_from_a_real_server_are_not_a_wait(
    chat_server: ChatServer, sleep: RecordedSleep
) -> None:
    """``Retry-After: ١٢`` (UTF-8 on the wire) is no wait: the model backs off."""
    chat_server.script(*[Json(LIMITED, status=429, headers={"Retry-After": "\u0661\u0662"})] * 2)
    async with _model(chat_server, sleep=sleep, retry=RetryPolicy(max_retries=1)) as model:
        with pytest.raises(ModelBackendError) as raised:
            await model.complete(REQUEST)
    assert sleep.delays == [0.5]
    assert raised.value.retry_after is None


@pytest.mark.parametrize(
    ("header", "passed_on"),
    [
        ("7", 7.0),
        ("1000000000000", MAX_RETRY_AFTER),
        ("Fri, 31 Dec 9999 23:59:59 GMT", MAX_RETRY_AFTER),
        ("Sun, 06 Nov 1994 08:49:37 GMT", 0.0),
        ("-5", None),
    ],
)
async def test_the_turn_passes_on_a_wait_within_what_the_model_honours(
    chat_server: ChatServer, sleep: RecordedSleep, header: str, passed_on: float | None
) -> None:
    """``TurnError(model_unavailable).retry_after``: what the backend asked,
    never negative, and at most ``MAX_RETRY_AFTER`` (the model itself tries
    again sooner than a longer ask)."""
    chat_server.script(Json(LIMITED, status=429, headers={"Retry-After": header}))
    async with (
        _model(chat_server, sleep=sleep, retry=RetryPolicy(max_retries=0)) as model,
        open_chat_agent(model=model, storage=in_memory_storage(), builtin_tools=False) as agent,
    ):
        with pytest.raises(TurnError) as raised:
            await agent.send("c", "hello")
    assert raised.value.code == "model_unavailable"
    assert raised.value.retry_after == passed_on


def test_the_cap_is_the_models_own() -> None:
    assert RetryPolicy().max_retry_after == MAX_RETRY_AFTER
    assert timedelta(seconds=MAX_RETRY_AFTER) < timedelta(days=1)

"""``[model] timeout``, ``connect_timeout`` and ``max_retries`` over odd input,
held to the other numeric settings of their kind.

Each value goes through ``load_config`` from ``agentik.toml`` and from its
``AGENTIK_*`` variable: a bad one is a ``ConfigError`` naming the setting
(and the variable or file), a good one is read as it says, the same for every
setting of its kind (``[model]`` as ``[limits]``), and the model ``agentik
serve`` builds from it (``open_configured_model``) gets it. A real ``agentik
serve`` refuses a bad file in one line and starts nothing.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from pathlib import Path

import pytest
import trio
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentik import OpenAICompatibleModel
from agentik._errors import ConfigError
from agentik._input import MAX_NUMBER_CHARS
from agentik.server import ServerConfig, load_config
from agentik.server._config import MAX_RETENTION_DAYS
from agentik.server._config_sources import BY_NAME
from agentik.server._retention import utc_now
from agentik.server._serve import open_configured_model
from tests.serve_refusal import refused_serve

MODEL = {"AGENTIK_MODEL_BASE_URL": "http://127.0.0.1:9/v1", "AGENTIK_MODEL": "m"}

SECONDS = [
    ("model", "timeout"),
    ("model", "connect_timeout"),
    ("limits", "tool_timeout"),
    ("limits", "graceful_timeout"),
    ("limits", "header_timeout"),
    ("limits", "body_timeout"),
    ("limits", "keepalive_timeout"),
]
"""Positive seconds with no bound of their own: the same text, the same verdict."""
COUNTS = [("model", "max_retries"), ("limits", "peer_connections")]
"""Integers >= 0."""

ODD_TEXT = [
    "nan", "NaN", "inf", "-inf", "infinity", "-0.0", "0", "0.0", "-1", "1e309", "1e-400",
    "5e-324", "1e300", "99999999999999999999", "\u0661\u0662", "\uff11\uff12", " 12", "12 ",
    "\t12", "1_000", "0x10", "0o7", "", " ", "true", "false", "1.", ".5", "+5", "00012",
    "1e3", "12\n", "1,5", "½", "²",
]  # fmt: skip


def value_of(section: str, key: str, config: ServerConfig) -> object:
    if section == "model":
        assert config.model is not None
        return getattr(config.model, key)
    return getattr(config.limits, key)


def from_env(section: str, key: str, text: str) -> object:
    env = BY_NAME[(section, key)].env
    assert env is not None
    return value_of(section, key, load_config(None, env={**MODEL, env: text}))


def verdict(read: object, *args: object) -> tuple[str, object]:
    """("ok", value) or ("error", the message's setting-free tail)."""
    try:
        return "ok", read(*args)  # type: ignore[operator]
    except ConfigError as error:
        return "error", str(error)


def seconds_oracle(text: str) -> float | None:
    """What a seconds setting reads ``text`` as: an ASCII decimal, finite and > 0."""
    if len(text) > 32 or not re.fullmatch(
        r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", text
    ):
        return None
    value = float(text)
    return value if 0 < value < math.inf else None


ENV_TEXT = st.one_of(
    st.sampled_from(ODD_TEXT),
    st.floats().map(repr),
    st.integers().map(str),
    st.text(st.characters(codec="utf-8"), max_size=8),
    st.text(st.sampled_from("0123456789.-+eE_ \u0660\u0665\uff10"), max_size=8),
)


@given(ENV_TEXT)
@settings(max_examples=300, deadline=None)
def test_a_seconds_variable_reads_as_an_ascii_positive_decimal_or_names_itself(
    text: str,
) -> None:
    """Every seconds variable, ``[model]`` or ``[limits]``: the value the text
    says, or a ``ConfigError`` starting with the variable and the setting."""
    expected = seconds_oracle(text)
    for section, key in SECONDS:
        kind, got = verdict(from_env, section, key, text)
        if expected is None:
            env = BY_NAME[(section, key)].env
            assert kind == "error", (section, key, text, got)
            assert str(got).startswith(f"{env}: [{section}] {key} must be a positive number")
        else:
            assert (kind, got) == ("ok", expected)


@given(ENV_TEXT)
@settings(max_examples=300, deadline=None)
@example("0")
@example("00012")
def test_a_count_variable_reads_as_ascii_digits_or_names_itself(text: str) -> None:
    """``max_retries`` as ``[limits] peer_connections``: ASCII digits, 0 up."""
    expected = None  # ASCII digits ("-0" is 0), at most 32 characters, 0..2**63-1
    if len(text) <= 32 and re.fullmatch(r"-?[0-9]+", text) and 0 <= int(text) < 2**63:
        expected = int(text)
    for section, key in COUNTS:
        kind, got = verdict(from_env, section, key, text)
        if expected is None:
            env = BY_NAME[(section, key)].env
            assert kind == "error", (section, key, text, got)
            assert str(got).startswith(f"{env}: [{section}] {key} must be an integer >= 0")
        else:
            assert (kind, got) == ("ok", expected)


def toml_literal(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


TOML_VALUES = st.one_of(
    st.floats(),
    st.integers(),
    st.integers(min_value=2**63 - 2, max_value=2**70),
    st.integers(min_value=10**308, max_value=10**309),
    st.booleans(),
    st.sampled_from(["12", "", "\u0661\u0662", "off"]),
)


def from_file(tmp: Path, section: str, key: str, literal: str) -> object:
    path = tmp / f"{section}-{key}.toml"
    lines = ['[model]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n']
    lines.append(
        f"{key} = {literal}\n" if section == "model" else f"[{section}]\n{key} = {literal}\n"
    )
    path.write_text("".join(lines), encoding="utf-8")
    return value_of(section, key, load_config(path, env={}))


@given(TOML_VALUES)
@settings(max_examples=200, deadline=None)
@example(True)
@example(-0.0)
@example(99999999999999999999)
@example(10**31)  # 32 digits: the longest the environment reads
@example(10**32)
@example(10**309)
def test_a_seconds_setting_in_the_file_is_a_positive_finite_number(
    tmp_path_factory: pytest.TempPathFactory, value: object
) -> None:
    """``true`` is an int in Python, not a number of seconds; an integer of any
    size is read as the environment reads its digits; the same for all."""
    tmp = tmp_path_factory.mktemp("toml")
    expected: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        expected = number if 0 < number < math.inf else None
    for section, key in SECONDS:
        kind, got = verdict(from_file, tmp, section, key, toml_literal(value))
        if expected is None:
            assert kind == "error", (section, key, value, got)
            assert f"[{section}] {key} must be a positive number" in str(got)
        else:
            assert (kind, got) == ("ok", expected)
        # the environment's text is at most MAX_NUMBER_CHARS characters long
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and value > 0
            and len(str(value)) <= MAX_NUMBER_CHARS
        ):
            assert (kind, got) == verdict(from_env, section, key, str(value))


@given(TOML_VALUES)
@settings(max_examples=100, deadline=None)
@example(True)
@example(False)
def test_a_count_in_the_file_is_an_integer_not_a_boolean(
    tmp_path_factory: pytest.TempPathFactory, value: object
) -> None:
    tmp = tmp_path_factory.mktemp("toml")
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2**63 - 1
    for section, key in COUNTS:
        kind, got = verdict(from_file, tmp, section, key, toml_literal(value))
        assert (kind, got) == ("ok", value) if ok else kind == "error"
        if not ok:
            assert f"[{section}] {key} must be an integer >= 0" in str(got)


def test_the_environment_overrides_the_file_both_ways(tmp_path: Path) -> None:
    """A good variable wins over the file; a bad one is an error, not the
    file's value; an empty one is an error too, not unset."""
    path = tmp_path / "agentik.toml"
    path.write_text(
        '[model]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
        "timeout = 5\nconnect_timeout = 2.5\nmax_retries = 1\n",
        encoding="utf-8",
    )
    model = load_config(path, env={}).model
    assert model is not None
    assert (model.timeout, model.connect_timeout, model.max_retries) == (5.0, 2.5, 1)
    env = {
        "AGENTIK_MODEL_TIMEOUT": "7",
        "AGENTIK_MODEL_CONNECT_TIMEOUT": "0.25",
        "AGENTIK_MODEL_MAX_RETRIES": "0",
    }
    model = load_config(path, env=env).model
    assert model is not None
    assert (model.timeout, model.connect_timeout, model.max_retries) == (7.0, 0.25, 0)
    for variable in env:
        for bad in ("", "-1", "\u0661"):
            with pytest.raises(ConfigError, match=rf"^{variable}: \[model\] "):
                load_config(path, env={variable: bad})


async def _built(config: ServerConfig) -> OpenAICompatibleModel:
    async with open_configured_model(config) as (model, _):
        assert isinstance(model, OpenAICompatibleModel)
        return model


@given(
    st.floats(min_value=1e-3, max_value=1e12),
    st.floats(min_value=1e-3, max_value=1e12),
    st.integers(0, 2**63 - 1),
    st.booleans(),
)
@settings(max_examples=25, deadline=None)
def test_good_values_reach_the_model_agentik_serve_builds(
    timeout: float, connect: float, retries: int, through_env: bool
) -> None:
    """The ``OpenAICompatibleModel`` built has the call deadline, the connect
    timeout of every one of its clients and the retry count read."""
    env = {
        "AGENTIK_MODEL_TIMEOUT": repr(timeout),
        "AGENTIK_MODEL_CONNECT_TIMEOUT": repr(connect),
        "AGENTIK_MODEL_MAX_RETRIES": str(retries),
    }
    config = load_config(None, env={**MODEL, **env} if through_env else MODEL)
    if not through_env:  # as a program would build it
        assert config.model is not None
        config = ServerConfig(
            model=type(config.model)(
                base_url=config.model.base_url,
                model="m",
                timeout=timeout,
                connect_timeout=connect,
                max_retries=retries,
            )
        )
    model = trio.run(_built, config)
    assert model._timeout == timeout
    assert model._retry.max_retries == retries
    assert {client.timeout.connect for client in model._clients} == {connect}


def test_unset_values_leave_the_models_defaults() -> None:
    model = trio.run(_built, load_config(None, env=MODEL))
    assert (model._timeout, model._retry.max_retries) == (600.0, 2)
    assert {client.timeout.connect for client in model._clients} == {None}


@given(st.floats(min_value=0, max_value=1e309, exclude_min=True))
@example(MAX_RETENTION_DAYS)
@example(1e6)
def test_retention_days_accepted_is_a_cutoff_the_server_can_compute(days: float) -> None:
    """``[storage] retention_days = 1e6`` was accepted and stopped the server
    when its retention task first ran (``OverflowError``): any value accepted
    now gives a cutoff, and a larger one names the setting."""
    env = {"AGENTIK_RETENTION_DAYS": repr(days)}
    if days > MAX_RETENTION_DAYS:
        with pytest.raises(ConfigError, match=r"\[storage\] retention_days must be"):
            load_config(None, env=env)
        return
    config = load_config(None, env=env)
    assert config.retention_days == days
    assert utc_now() - timedelta(days=days) < utc_now()


@pytest.mark.parametrize(
    ("toml", "line"),
    [
        ("max_retries = true", "[model] max_retries must be an integer >= 0, got True"),
        ("timeout = nan", "[model] timeout must be a positive number, got nan"),
        ("connect_timeout = -0.0", "[model] connect_timeout must be a positive number, got -0.0"),
        ("timeout = 1e309", "[model] timeout must be a positive number, got inf"),
    ],
)
async def test_serve_refuses_a_bad_file_in_one_line(tmp_path: Path, toml: str, line: str) -> None:
    """``agentik serve`` (a real process) exits 2 before it binds anything."""
    (tmp_path / "agentik.toml").write_text(
        f'[model]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n{toml}\n', encoding="utf-8"
    )
    lines = await refused_serve(tmp_path, {"AGENTIK_BIND": "127.0.0.1:0"})
    path = tmp_path / "agentik.toml"
    assert lines in (
        [f"agentik serve: agentik.toml: {line}"],
        [f"agentik serve: {path}: {line}"],
    )

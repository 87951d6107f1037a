"""``ModelSettings`` and ``Limits`` built directly are checked as
``agentik.toml``, the environment and the command line are: the same values
accepted (stored the same), the same refused, with an error naming the field.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentik.models import ModelLimits
from agentik.server import ConfigError, Limits, ModelSettings, load_config
from agentik.server._config_sources import SETTINGS

NUMERIC_KINDS = ("int", "count", "float")
MODEL_FIELDS = ("max_connections", "timeout", "connect_timeout", "max_retries")
LIMITS_FIELDS = tuple(attrs.fields_dict(Limits))
BASE = {"base_url": "http://x/v1", "model": "m"}

VALUES = st.one_of(
    st.integers(min_value=-3, max_value=3),
    st.integers(),
    st.sampled_from([2**63 - 1, 2**63, -(2**63), 10**400]),
    st.floats(),
    st.sampled_from([0.0, -0.0, math.nan, math.inf, -math.inf, 5e-324, 1.7e308]),
    st.booleans(),
    st.text(max_size=4),
    st.sampled_from(["5", "off", b"5", [5], 5j]),
)


@pytest.fixture(scope="module")
def empty_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory with no ``agentik.toml`` for ``load_config(None)`` to read."""
    return tmp_path_factory.mktemp("no-toml")


@contextlib.contextmanager
def _outcome() -> Iterator[list[object]]:
    """Collects ("accepted", value) or ("refused", message)."""
    result: list[object] = []
    try:
        yield result
    except ConfigError as error:
        result[:] = ["refused", str(error)]


def _agree(loaded: list[object], built: list[object]) -> None:
    assert loaded[0] == built[0], (loaded, built)
    if loaded[0] == "accepted":
        assert type(loaded[1]) is type(built[1])
        assert loaded[1] == built[1]


def _through_config(section: str, key: str, value: object) -> list[object]:
    overrides: dict[tuple[str, str], object] = {(section, key): value}
    if section == "model":
        overrides |= {("model", k): v for k, v in BASE.items()}
    with _outcome() as result:
        config = load_config(None, env={}, overrides=overrides)
        held = config.model if section == "model" else config.limits
        result[:] = ["accepted", getattr(held, key)]
    if result[0] == "refused":
        # by the command line's own check (check_kind), never by the value
        # object: a constructor stricter than the config would refuse both ways
        assert str(result[1]).startswith(f"command line: [{section}] {key} must be "), result
    return result


def test_the_fields_checked_here_are_every_numeric_setting() -> None:
    numeric = {
        (s.section, s.key)
        for s in SETTINGS
        if s.kind in NUMERIC_KINDS and s.section in ("model", "limits")
    }
    model_limits = {("model", f.name) for f in attrs.fields(ModelLimits)}
    context = {("model", "context_tokens")}  # a ServerConfig field
    assert numeric - model_limits - context == {("model", k) for k in MODEL_FIELDS} | {
        ("limits", k) for k in LIMITS_FIELDS
    }


EDGES = (0, 1, -1, 0.0, -0.0, 1.5, True, False, None, math.nan, math.inf, 2**63 - 1, 2**63, 10**400)


def edge_cases(test: Callable[..., None]) -> Callable[..., None]:
    """Every value at an edge of some rule, tried for every field, then random ones."""
    for value in EDGES:
        test = example(value=value)(test)
    return settings(max_examples=60)(given(value=VALUES)(test))


@pytest.mark.parametrize("key", MODEL_FIELDS)
@edge_cases
def test_model_settings_accept_what_the_config_accepts(
    empty_dir: Path, key: str, value: object
) -> None:
    if value is None:
        return  # unset: the constructor's default, no value of the config's
    with contextlib.chdir(empty_dir):
        loaded = _through_config("model", key, value)
    with _outcome() as built:
        built[:] = ["accepted", getattr(ModelSettings(**BASE, **{key: value}), key)]  # type: ignore[arg-type]
    _agree(loaded, built)


@pytest.mark.parametrize("key", LIMITS_FIELDS)
@edge_cases
def test_limits_accept_what_the_config_accepts(empty_dir: Path, key: str, value: object) -> None:
    with contextlib.chdir(empty_dir):
        loaded = _through_config("limits", key, value)
    with _outcome() as built:
        built[:] = ["accepted", getattr(Limits(**{key: value}), key)]  # type: ignore[arg-type]
    _agree(loaded, built)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("max_retries", True, "ModelSettings.max_retries must be an integer >= 0, got True"),
        ("max_retries", -1, "ModelSettings.max_retries must be an integer >= 0, got -1"),
        ("timeout", math.nan, "ModelSettings.timeout must be a positive number, got nan"),
        ("connect_timeout", 0, "ModelSettings.connect_timeout must be a positive number, got 0"),
        ("max_connections", 0, "ModelSettings.max_connections must be a positive integer, got 0"),
        ("max_connections", 2.0, "ModelSettings.max_connections must be a positive integer"),
    ],
)
def test_model_settings_refusals_name_the_field(key: str, value: object, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ModelSettings(**BASE, **{key: value})  # type: ignore[arg-type]
    assert str(caught.value).startswith(expected)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("max_body_bytes", -1, "Limits.max_body_bytes must be a positive integer, got -1"),
        ("max_queued_turns", True, "Limits.max_queued_turns must be a positive integer, got True"),
        ("max_note", 2**63, "Limits.max_note must be a positive integer, got 9223372036854775808"),
        ("tool_timeout", math.inf, "Limits.tool_timeout must be a positive number, got inf"),
        ("body_min_rate", math.nan, "Limits.body_min_rate must be a positive number, got nan"),
        ("graceful_timeout", -1.0, "Limits.graceful_timeout must be a positive number, got -1.0"),
        ("peer_connections", -1, "Limits.peer_connections must be an integer >= 0, got -1"),
    ],
)
def test_limits_refusals_name_the_field(key: str, value: object, expected: str) -> None:
    with pytest.raises(ConfigError, match="^" + expected.replace(".", r"\.") + "$"):
        Limits(**{key: value})  # type: ignore[arg-type]


def test_unset_model_settings_stay_none_and_whole_seconds_become_floats() -> None:
    unset = ModelSettings(**BASE)
    assert (unset.max_connections, unset.timeout, unset.connect_timeout, unset.max_retries) == (
        None,
        None,
        None,
        None,
    )
    timed = ModelSettings(**BASE, timeout=30, max_retries=0)
    assert type(timed.timeout) is float and timed.timeout == 30.0
    assert Limits(tool_timeout=5).tool_timeout.is_integer()
    assert type(Limits(tool_timeout=5).tool_timeout) is float
    assert Limits(peer_connections=0).peer_connections == 0
    assert Limits(max_connections=4000).peer_connections == 1000

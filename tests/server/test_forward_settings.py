"""``[cluster] forward`` and ``[cluster] takeover_wait``: defaults, the file
and the environment, and every other value refused with an error naming the
setting (docs/server.md, "Configuration")."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentik._errors import ConfigError
from agentik.server import ServerConfig
from agentik.server._config import MAX_TAKEOVER_WAIT, load_config


def test_defaults_follow_the_lease() -> None:
    config = load_config(None, env={})
    assert config.forward is True
    assert config.takeover_wait is None
    assert config.takeover_seconds == config.lease_seconds + 5
    longer = load_config(None, env={"AGENTIK_LEASE_SECONDS": "60"})
    assert longer.takeover_seconds == 65.0
    assert ServerConfig(lease_seconds=7.0).takeover_seconds == 12.0


def test_the_file_and_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "agentik.toml"
    path.write_text("[cluster]\nforward = false\ntakeover_wait = 12\n")
    config = load_config(path, env={})
    assert (config.forward, config.takeover_seconds) == (False, 12.0)
    config = load_config(path, env={"AGENTIK_FORWARD": "TRUE", "AGENTIK_TAKEOVER_WAIT": "2.5"})
    assert (config.forward, config.takeover_seconds) == (True, 2.5)
    for off in ("0", "off", "0.0"):
        assert load_config(path, env={"AGENTIK_TAKEOVER_WAIT": off}).takeover_seconds == 0.0
    path.write_text('[cluster]\ntakeover_wait = "off"\n')
    assert load_config(path, env={}).takeover_seconds == 0.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("forward = 'yes'", r"\[cluster\] forward must be true or false, got 'yes'"),
        ("forward = 1", r"\[cluster\] forward must be true or false, got 1"),
        ("takeover_wait = -1", r"\[cluster\] takeover_wait must be a number of seconds >= 0"),
        ("takeover_wait = nan", r"\[cluster\] takeover_wait must be a number of seconds >= 0"),
        ("takeover_wait = inf", r"\[cluster\] takeover_wait must be a number of seconds >= 0"),
        ("takeover_wait = true", r"\[cluster\] takeover_wait must be a number of seconds >= 0"),
        ("takeover_wait = 3601", r"^\[cluster\] takeover_wait must be 0 or 'off' \(no wait\)"),
        ("takeovr_wait = 3", r"unknown setting \[cluster\] takeovr_wait"),
    ],
)
def test_nonsense_in_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "agentik.toml"
    path.write_text(f"[cluster]\n{text}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(path, env={})


odd_texts = st.one_of(
    st.text(max_size=20),
    st.text(st.sampled_from("0123456789-+._eE ²١１"), max_size=30),
    st.floats().map(repr),
    st.sampled_from(["9" * 5000, "nan", "inf", "1e400", "-0", "off", "OFF", "1_0", "yes", "no"]),
)


@given(odd_texts)
def test_any_takeover_wait_in_the_environment_is_a_bounded_wait_or_a_clear_error(
    text: str,
) -> None:
    refusal = None
    try:
        config = load_config(None, env={"AGENTIK_TAKEOVER_WAIT": text})
    except ConfigError as error:
        refusal = str(error)
    if refusal is not None:
        assert "[cluster] takeover_wait must be" in refusal
        return
    assert 0 <= config.takeover_seconds <= MAX_TAKEOVER_WAIT
    assert math.isfinite(config.takeover_seconds)


@given(odd_texts)
def test_any_forward_in_the_environment_is_a_boolean_or_a_clear_error(text: str) -> None:
    refusal = None
    try:
        config = load_config(None, env={"AGENTIK_FORWARD": text})
    except ConfigError as error:
        refusal = str(error)
    if refusal is not None:
        assert "[cluster] forward must be true or false" in refusal
        assert text.lower() not in ("1", "0", "true", "false")
        return
    assert config.forward is (text.lower() in ("1", "true"))

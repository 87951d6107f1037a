"""``[model]`` settings of the backend's connections, time and retries: read from
the file and the environment, checked, and passed on to the model."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik.server import ConfigError, ModelSettings, load_config
from agentik.server._serve import model_timeouts

MODEL = '[model]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
BASE = {"AGENTIK_MODEL_BASE_URL": "http://127.0.0.1:9/v1", "AGENTIK_MODEL": "m"}


def test_read_from_the_file_and_the_environment(tmp_path: Path) -> None:
    """The file sets it, the environment overrides it, absent means the model's default."""
    path = tmp_path / "agentik.toml"
    path.write_text(MODEL + "max_connections = 64\n")
    settings = load_config(path, env={}).model
    assert settings is not None and settings.max_connections == 64
    settings = load_config(path, env={"AGENTIK_MODEL_MAX_CONNECTIONS": "500"}).model
    assert settings is not None and settings.max_connections == 500
    path.write_text(MODEL)
    settings = load_config(path, env={}).model
    assert settings is not None and settings.max_connections is None


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "many"])
def test_nonsense_is_a_config_error(tmp_path: Path, value: str) -> None:
    """Anything but an integer >= 1 is refused, naming the setting."""
    path = tmp_path / "agentik.toml"
    path.write_text(MODEL)
    with pytest.raises(ConfigError, match=r"max_connections|AGENTIK_MODEL_MAX_CONNECTIONS"):
        load_config(path, env={"AGENTIK_MODEL_MAX_CONNECTIONS": value})


class TestTimeoutsAndRetries:
    """``timeout``, ``connect_timeout`` and ``max_retries`` (issue 30, item 4)."""

    def test_read_from_the_file_and_overridden_by_the_environment(self, tmp_path: Path) -> None:
        path = tmp_path / "agentik.toml"
        path.write_text(MODEL + "timeout = 45\nconnect_timeout = 2.5\nmax_retries = 0\n")
        model = load_config(path, env={}).model
        assert model is not None
        assert (model.timeout, model.connect_timeout, model.max_retries) == (45.0, 2.5, 0)
        env = {
            "AGENTIK_MODEL_TIMEOUT": "120",
            "AGENTIK_MODEL_CONNECT_TIMEOUT": "1e1",
            "AGENTIK_MODEL_MAX_RETRIES": "5",
        }
        model = load_config(path, env=env).model
        assert model is not None
        assert (model.timeout, model.connect_timeout, model.max_retries) == (120.0, 10.0, 5)

    def test_absent_means_the_models_defaults(self) -> None:
        model = load_config(None, env=BASE).model
        assert model is not None
        assert (model.timeout, model.connect_timeout, model.max_retries) == (None, None, None)
        assert model_timeouts(model) == {}

    def test_each_set_one_reaches_the_models_keywords(self) -> None:
        env = BASE | {"AGENTIK_MODEL_MAX_RETRIES": "0", "AGENTIK_MODEL_TIMEOUT": "30"}
        model = load_config(None, env=env).model
        assert model is not None
        given = model_timeouts(model)
        assert given["timeout"] == 30.0
        assert given["retry"].max_retries == 0
        assert "connect_timeout" not in given

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("timeout = 0", r"\[model\] timeout must be a positive number, got 0\.0$"),
            ("timeout = -5", r"\[model\] timeout must be a positive number, got -5\.0$"),
            ("timeout = nan", r"\[model\] timeout must be a positive number, got nan$"),
            ("timeout = inf", r"\[model\] timeout must be a positive number, got inf$"),
            ("timeout = '30'", r"\[model\] timeout must be a positive number, got '30'$"),
            ("timeout = true", r"\[model\] timeout must be a positive number, got True$"),
            # float(-10**400) raised OverflowError: a traceback, not this line
            ("timeout = -" + "9" * 400, r"timeout must be a positive number, got -9{39}…$"),
            ("connect_timeout = -inf", r"\[model\] connect_timeout must be a positive number"),
            ("max_retries = -1", r"\[model\] max_retries must be an integer >= 0, got -1$"),
            ("max_retries = 1.5", r"\[model\] max_retries must be an integer >= 0, got 1\.5$"),
            ("max_retries = " + "9" * 60, r"max_retries must be an integer >= 0, got 9{40}…$"),
        ],
    )
    def test_nonsense_in_the_file(self, tmp_path: Path, text: str, message: str) -> None:
        path = tmp_path / "agentik.toml"
        path.write_text(MODEL + text + "\n")
        with pytest.raises(ConfigError, match=message):
            load_config(path, env={})


FLOAT_TEXT = re.compile(r"(?=.{1,32}$)-?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?", re.DOTALL)
"""What an environment variable may say for a number (written apart from agentik)."""
INT_TEXT = re.compile(r"-?[0-9]{1,31}")

odd_texts = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=20),
    st.text(st.sampled_from("0123456789-+._eE ²¹٣١１"), max_size=40),
    st.integers().map(str),
    st.floats().map(repr),
    st.sampled_from(["9" * 5000, "nan", "inf", "-inf", "1e400", "-0", "0", "1_0", "\u0663"]),
)
"""Unicode digits, signs, NaN, infinities, huge and tiny numbers, and any text."""

SECONDS = {"AGENTIK_MODEL_TIMEOUT": "timeout", "AGENTIK_MODEL_CONNECT_TIMEOUT": "connect_timeout"}


@settings(max_examples=300)
@given(variable=st.sampled_from(sorted(SECONDS)), text=odd_texts)
def test_seconds_are_a_positive_finite_number_or_one_clear_error(variable: str, text: str) -> None:
    key = SECONDS[variable]
    readable = bool(FLOAT_TEXT.fullmatch(text)) and 0 < float(text) < math.inf
    if not readable:
        with pytest.raises(ConfigError, match=rf"^{variable}: \[model\] {key} must be a positive"):
            load_config(None, env=BASE | {variable: text})
        return
    model = load_config(None, env=BASE | {variable: text}).model
    assert model is not None
    assert getattr(model, key) == float(text)


@settings(max_examples=300)
@given(text=odd_texts | st.integers(0, 2**64).map(str))
def test_max_retries_is_a_count_or_one_clear_error(text: str) -> None:
    env = BASE | {"AGENTIK_MODEL_MAX_RETRIES": text}
    readable = bool(INT_TEXT.fullmatch(text)) and 0 <= int(text) <= 2**63 - 1
    if not readable:
        with pytest.raises(
            ConfigError,
            match=r"^AGENTIK_MODEL_MAX_RETRIES: \[model\] max_retries must be an integer >= 0",
        ):
            load_config(None, env=env)
        return
    model = load_config(None, env=env).model
    assert model is not None and model.max_retries == int(text)
    assert model_timeouts(model)["retry"].max_retries == int(text)


toml_values = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.booleans(),
    st.text(max_size=10),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=300)
@given(
    key=st.sampled_from(["timeout", "connect_timeout", "max_retries"]),
    value=toml_values,
)
def test_any_typed_value_is_taken_or_refused_by_name(key: str, value: object) -> None:
    """What a TOML file (or a program's overrides) can hold: a value of the
    setting's kind in range is taken; anything else is a ConfigError naming it."""
    overrides = {("model", "base_url"): "http://127.0.0.1:9/v1", ("model", "model"): "m"}
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if key == "max_retries":
        taken = isinstance(value, int) and number and 0 <= value <= 2**63 - 1
    else:
        # an integer of any size is read as seconds, as the environment's
        # digits are, while it is a finite float (up to about 1.8e308)
        bound = sys.float_info.max if isinstance(value, int) else math.inf
        taken = number and 0 < value < math.inf and value <= bound  # type: ignore[operator]
    if not taken:
        with pytest.raises(ConfigError, match=rf"^command line: \[model\] {key} must be "):
            load_config(None, env={}, overrides=overrides | {("model", key): value})  # type: ignore[dict-item]
        return
    model = load_config(None, env={}, overrides=overrides | {("model", key): value}).model  # type: ignore[dict-item]
    assert model is not None
    # seconds are floats: an integer past 2**53 is taken as the nearest one
    assert getattr(model, key) == (value if key == "max_retries" else float(value))  # type: ignore[arg-type]


def test_settings_are_kept_on_a_value_object() -> None:
    """``ModelSettings`` carries them; absent ones are None."""
    settings = ModelSettings(base_url="http://x/v1", model="m", timeout=5.0)
    assert (settings.timeout, settings.connect_timeout, settings.max_retries) == (5.0, None, None)


class TestStructuredOutput:
    """``[model] structured_output``: how a typed turn asks this backend."""

    def test_read_checked_and_passed_on(self, tmp_path: Path) -> None:
        path = tmp_path / "agentik.toml"
        path.write_text(MODEL + 'structured_output = "tool"\n')
        model = load_config(path, env={}).model
        assert model is not None and model.structured_output == "tool"
        assert model_timeouts(model)["structured_output"] == "tool"
        env = {"AGENTIK_MODEL_STRUCTURED_OUTPUT": "response_format"}
        model = load_config(path, env=env).model
        assert model is not None and model.structured_output == "response_format"
        path.write_text(MODEL)
        model = load_config(path, env={}).model
        assert model is not None and model.structured_output is None
        assert "structured_output" not in model_timeouts(model)

    @pytest.mark.parametrize("value", ["json", "", "Tool"])
    def test_nonsense_is_a_config_error(self, tmp_path: Path, value: str) -> None:
        path = tmp_path / "agentik.toml"
        path.write_text(MODEL)
        with pytest.raises(ConfigError, match=r"structured_output must be 'response_format' or"):
            load_config(path, env={"AGENTIK_MODEL_STRUCTURED_OUTPUT": value})

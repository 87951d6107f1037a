"""``[model] max_connections`` and ``AGENTIK_MODEL_MAX_CONNECTIONS``: read, checked, passed on."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentik._config import ConfigError, load_config

MODEL = '[model]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'


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

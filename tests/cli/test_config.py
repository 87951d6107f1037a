"""Configuration: file < environment < flags, and precise errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik.server import ConfigError, Limits, ModelSettings, load_config
from agentik.server._clients import ClientConfigError, parse_clients_table
from agentik.server._config import parse_bind


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentik.toml"
    path.write_text(text, encoding="utf-8")
    return path


class TestLoadConfig:
    def test_defaults(self) -> None:
        """With nothing configured: loopback 8080, ./agentik.db, the demo model."""
        config = load_config(None, env={})
        assert (config.host, config.port, config.database) == ("127.0.0.1", 8080, "./agentik.db")
        assert config.model is None
        assert config.limits == Limits()

    def test_precedence(self, tmp_path: Path) -> None:
        """The environment beats the file; flags beat both."""
        path = write(
            tmp_path,
            '[server]\nbind = "127.0.0.1:1"\n[storage]\ndatabase = "a.db"\n'
            "[limits]\nmax_queued_turns = 3\n",
        )
        env = {"AGENTIK_DATABASE": "b.db", "AGENTIK_BIND": "127.0.0.1:2"}
        config = load_config(path, env=env, overrides={("server", "bind"): "127.0.0.1:3"})
        assert (config.port, config.database, config.limits.max_queued_turns) == (3, "b.db", 3)

    def test_max_conversations(self, tmp_path: Path) -> None:
        """The live-conversation bound comes from the file or, winning, the environment."""
        path = write(tmp_path, "[limits]\nmax_conversations = 50\n")
        assert load_config(path, env={}).limits.max_conversations == 50
        env = {"AGENTIK_MAX_CONVERSATIONS": "7"}
        assert load_config(path, env=env).limits.max_conversations == 7

    def test_content_limits(self, tmp_path: Path) -> None:
        """Skill and note sizes and their prompt shares: the file, or the environment."""
        path = write(
            tmp_path,
            "[limits]\nmax_skill_description = 80\nmax_note = 300\nskills_prompt_tokens = 100\n",
        )
        limits = load_config(path, env={}).limits
        assert (limits.max_skill_description, limits.max_note, limits.skills_prompt_tokens) == (
            80,
            300,
            100,
        )
        assert (limits.max_skill_name, limits.max_skill_body) == (64, 32_000)
        env = {"AGENTIK_MAX_SKILL_BODY": "9", "AGENTIK_NOTES_PROMPT_TOKENS": "50"}
        limits = load_config(path, env=env).limits
        assert (limits.max_skill_body, limits.notes_prompt_tokens) == (9, 50)
        with pytest.raises(ConfigError, match=r"max_skill_name must be a positive integer"):
            load_config(path, env={"AGENTIK_MAX_SKILL_NAME": "0"})

    def test_model_and_key_from_environment(self, tmp_path: Path) -> None:
        """The API key is read from the variable the file names and hidden from repr."""
        path = write(
            tmp_path,
            '[model]\nbase_url = "http://x/v1"\nmodel = "m"\napi_key_env = "MY_KEY"\n',
        )
        config = load_config(path, env={"MY_KEY": "sekrit"})
        assert config.model == ModelSettings(base_url="http://x/v1", model="m", api_key="sekrit")
        assert "sekrit" not in repr(config)

    def test_gc_freeze(self, tmp_path: Path) -> None:
        """A boolean from the file, overridden by the environment."""
        path = write(tmp_path, "[server]\ngc_freeze = true\n")
        assert load_config(path, env={}).gc_freeze is True
        assert load_config(path, env={"AGENTIK_GC_FREEZE": "false"}).gc_freeze is False
        with pytest.raises(ConfigError, match=r"gc_freeze must be true or false, got 'yes'$"):
            load_config(path, env={"AGENTIK_GC_FREEZE": "yes"})

    def test_toolsets_from_environment(self) -> None:
        config = load_config(None, env={"AGENTIK_TOOLSETS": "a.b:c, d:e"})
        assert config.toolsets == ("a.b:c", "d:e")

    def test_core_tools_from_file_and_environment(self, tmp_path: Path) -> None:
        path = write(tmp_path, '[agent]\ntools = ["a.b:c"]\n')
        assert load_config(path, env={}).tools == ("a.b:c",)
        assert load_config(path, env={"AGENTIK_TOOLS": "d:e, f:g"}).tools == ("d:e", "f:g")
        assert load_config(None, env={}).tools == ()


class TestConfigErrors:
    @pytest.mark.parametrize(
        ("text", "message"),
        [
            (
                "[limits]\nmax_queued_turns = 'x'\n",
                r"\[limits\] max_queued_turns must be a positive integer, got 'x'$",
            ),
            ("[limits]\nmax_queued_turns = 0\n", r"max_queued_turns must be a positive integer"),
            ("[limits]\ntool_timeout = true\n", r"\[limits\] tool_timeout must be a positive"),
            ("[server]\nport = 1\n", r"unknown setting \[server\] port$"),
            ("[server]\nbind = 8080\n", r"\[server\] bind must be a string, got 8080$"),
            ('[server]\nbind = "nope"\n', r"\[server\] bind must be 'host:port', got 'nope'$"),
            ("server = 1\n", r"\[server\] must be a table"),
            ("[server\n", r"is not valid TOML"),
            ('[model]\nmodel = "m"\n', r"^\[model\] base_url is required"),
            ('[agent]\ntoolsets = ["nocolon"]\n', r"'nocolon' must be 'module:attribute'$"),
            (
                '[agent]\ntools = ["x:"]\n',
                r"^\[agent\] tools entry 'x:' must be 'module:attribute'$",
            ),
        ],
    )
    def test_bad_file(self, tmp_path: Path, text: str, message: str) -> None:
        """Each bad file names the setting and the expectation."""
        with pytest.raises(ConfigError, match=message):
            load_config(write(tmp_path, text), env={})

    def test_bad_environment_value(self) -> None:
        with pytest.raises(ConfigError, match=r"^AGENTIK_MAX_QUEUED_TURNS: \[limits\] max_queued"):
            load_config(None, env={"AGENTIK_MAX_QUEUED_TURNS": "-2"})

    def test_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match=r"^cannot read config file"):
            load_config(tmp_path / "absent.toml", env={})

    def test_public_bind_requires_token(self) -> None:
        """Binding beyond loopback without a token is refused; with one it is fine."""
        with pytest.raises(ConfigError, match=r"auth_token is required .* '0\.0\.0\.0'"):
            load_config(None, env={"AGENTIK_BIND": "0.0.0.0:80"})
        token = "a-token-of-16-chars"
        config = load_config(None, env={"AGENTIK_BIND": "0.0.0.0:80", "AGENTIK_AUTH_TOKEN": token})
        assert config.auth_token == token
        assert not config.is_loopback

    @pytest.mark.parametrize("where", ["file", "environment"])
    def test_short_auth_token_is_refused(self, tmp_path: Path, where: str) -> None:
        """``auth_token`` follows the rule of ``[[server.clients]]`` tokens (16 or
        more b64token characters); the error never shows the value."""
        if where == "file":
            path: Path | None = write(tmp_path, '[server]\nauth_token = "s3cr3t"\n')
            env: dict[str, str] = {}
        else:
            path, env = None, {"AGENTIK_AUTH_TOKEN": "s3cr3t"}
        with pytest.raises(ConfigError, match=r"\[server\] auth_token must be 16 or more") as err:
            load_config(path, env=env)
        assert "s3cr3t" not in str(err.value)

    @settings(max_examples=200, deadline=None)
    @given(token=st.text(min_size=1, max_size=40))
    def test_auth_token_rule_is_the_clients_rule(self, token: str) -> None:
        """Any text is accepted as ``auth_token`` exactly when it is accepted as
        a ``[[server.clients]]`` token."""
        try:
            parse_clients_table([{"owner": "alice", "token": token}], {})
            as_client = True
        except ClientConfigError:
            as_client = False
        try:
            accepted = load_config(None, env={}, overrides={("server", "auth_token"): token})
            as_auth_token = accepted.auth_token == token
        except ConfigError:
            as_auth_token = False
        assert as_auth_token is as_client


def test_parse_bind_ipv6() -> None:
    assert parse_bind("[::1]:9000") == ("::1", 9000)


class TestNumbersFromText:
    """Issue 14, item 4: numbers in the environment and the file are ASCII
    decimals of bounded length; anything else is a ConfigError naming the
    setting, never a bare ValueError (nor a value ``int()``/``float()`` happen to
    take, such as '٣', '1_0', 'nan' or 'inf')."""

    @pytest.mark.parametrize(
        ("variable", "value", "message"),
        [
            # "²".isdigit() is true and int("²") raised ValueError.
            ("AGENTIK_MAX_QUEUED_TURNS", "²", r"max_queued_turns must be a positive integer"),
            ("AGENTIK_MAX_QUEUED_TURNS", "9" * 5000, r"max_queued_turns must be a positive"),
            # int() took these as 3 and 10.
            ("AGENTIK_MAX_QUEUED_TURNS", "\u0663", r"max_queued_turns must be a positive"),
            ("AGENTIK_MAX_BODY_BYTES", " 10 ", r"max_body_bytes must be a positive integer"),
            # float() took these: nan even passed the "positive" check.
            ("AGENTIK_TOOL_TIMEOUT", "nan", r"tool_timeout must be a positive number"),
            ("AGENTIK_TOOL_TIMEOUT", "inf", r"tool_timeout must be a positive number"),
            ("AGENTIK_TOOL_TIMEOUT", "1e400", r"tool_timeout must be a positive number"),
            ("AGENTIK_TOOL_TIMEOUT", "\u0661", r"tool_timeout must be a positive number"),
            ("AGENTIK_GRACEFUL_TIMEOUT", "1_0", r"graceful_timeout must be a positive number"),
            # The port: "²" passed isdigit() and int() raised ValueError.
            ("AGENTIK_BIND", "127.0.0.1:²", r"\[server\] bind must be 'host:port'"),
            ("AGENTIK_BIND", "127.0.0.1:" + "9" * 5000, r"\[server\] bind must be 'host:port'"),
        ],
    )
    def test_environment(self, variable: str, value: str, message: str) -> None:
        with pytest.raises(ConfigError, match=message):
            load_config(None, env={variable: value})

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("[limits]\ntool_timeout = nan\n", r"\[limits\] tool_timeout must be a positive"),
            ("[limits]\ntool_timeout = inf\n", r"\[limits\] tool_timeout must be a positive"),
            # tomllib raised a bare ValueError (the int digit limit).
            ("[limits]\nmax_body_bytes = " + "9" * 5000 + "\n", r"is not valid TOML"),
            ("[limits]\nmax_body_bytes = " + "9" * 30 + "\n", r"max_body_bytes must be a positive"),
            # tomllib recursed until RecursionError.
            ("[limits]\nmax_body_bytes = " + "[" * 5000 + "]" * 5000 + "\n", r"is not valid"),
        ],
    )
    def test_file(self, tmp_path: Path, text: str, message: str) -> None:
        with pytest.raises(ConfigError, match=message):
            load_config(write(tmp_path, text), env={})

    def test_good_numbers_still_read(self) -> None:
        env = {
            "AGENTIK_MAX_QUEUED_TURNS": "12",
            "AGENTIK_TOOL_TIMEOUT": "2.5",
            "AGENTIK_GRACEFUL_TIMEOUT": "1e1",
            "AGENTIK_BIND": "127.0.0.1:0080",
        }
        config = load_config(None, env=env)
        assert config.limits.max_queued_turns == 12
        assert (config.limits.tool_timeout, config.limits.graceful_timeout) == (2.5, 10.0)
        assert config.port == 80


class TestContextTokens:
    def test_read_from_the_file_and_the_environment(self, tmp_path: Path) -> None:
        path = tmp_path / "agentik.toml"
        path.write_text("[model]\ncontext_tokens = 8000\n")
        assert load_config(path, env={}).context_tokens == 8000
        env = {"AGENTIK_CONTEXT_TOKENS": "16000"}
        assert load_config(path, env=env).context_tokens == 16000
        assert load_config(None, env={}).context_tokens is None

    @pytest.mark.parametrize("value", ["12", "²", "-5", "1e4"])
    def test_nonsense_is_a_config_error(self, value: str) -> None:
        with pytest.raises(ConfigError, match=r"context_tokens|AGENTIK_CONTEXT_TOKENS"):
            load_config(None, env={"AGENTIK_CONTEXT_TOKENS": value})


class TestModelLimits:
    def test_read_from_the_file_and_the_environment(self, tmp_path: Path) -> None:
        """``[model]`` limits, with or without a model configured; the
        environment wins; none set is no limits at all."""
        from agentik import ModelLimits

        path = write(
            tmp_path,
            "[model]\nrequests_per_minute = 500\ntokens_per_minute = 90000\n"
            "max_concurrent = 20\nmax_queue_wait = 12.5\n",
        )
        assert load_config(path, env={}).model_limits == ModelLimits(
            requests_per_minute=500,
            tokens_per_minute=90_000,
            max_concurrent=20,
            max_queue_wait=12.5,
        )
        env = {
            "AGENTIK_MODEL_REQUESTS_PER_MINUTE": "60",
            "AGENTIK_MODEL_TOKENS_PER_MINUTE": "1000",
            "AGENTIK_MODEL_MAX_CONCURRENT": "2",
            "AGENTIK_MODEL_MAX_QUEUE_WAIT": "3",
        }
        assert load_config(path, env=env).model_limits == ModelLimits(
            requests_per_minute=60, tokens_per_minute=1000, max_concurrent=2, max_queue_wait=3.0
        )
        assert load_config(None, env={}).model_limits is None

    @pytest.mark.parametrize(
        ("variable", "value", "message"),
        [
            ("AGENTIK_MODEL_REQUESTS_PER_MINUTE", "0", r"requests_per_minute must be a positive"),
            ("AGENTIK_MODEL_TOKENS_PER_MINUTE", "1.5", r"tokens_per_minute must be a positive"),
            ("AGENTIK_MODEL_MAX_CONCURRENT", "-1", r"max_concurrent must be a positive"),
            ("AGENTIK_MODEL_MAX_QUEUE_WAIT", "inf", r"max_queue_wait must be a positive"),
            ("AGENTIK_MODEL_MAX_QUEUE_WAIT", "0", r"max_queue_wait must be a positive"),
        ],
    )
    def test_nonsense_is_a_config_error(self, variable: str, value: str, message: str) -> None:
        with pytest.raises(ConfigError, match=message):
            load_config(None, env={variable: value})


class TestKeepaliveTimeoutAndReaders:
    """Issue 33, item 7: ``[limits] keepalive_timeout`` and ``[storage] readers``
    are settings like the others (file, environment, refused when nonsense)."""

    def test_defaults_are_the_servers_and_the_backends(self) -> None:
        from agentik.server.http import HttpSettings

        config = load_config(None, env={})
        assert config.limits.keepalive_timeout == HttpSettings().keep_alive_timeout == 5.0
        assert config.readers == 4

    def test_read_from_the_file_and_the_environment(self, tmp_path: Path) -> None:
        path = write(tmp_path, "[limits]\nkeepalive_timeout = 75\n[storage]\nreaders = 2\n")
        config = load_config(path, env={})
        assert (config.limits.keepalive_timeout, config.readers) == (75.0, 2)
        env = {"AGENTIK_KEEPALIVE_TIMEOUT": "0.5", "AGENTIK_STORAGE_READERS": "16"}
        config = load_config(path, env=env)
        assert (config.limits.keepalive_timeout, config.readers) == (0.5, 16)

    @given(
        seconds=st.floats(min_value=1e-3, max_value=1e6, allow_nan=False),
        readers=st.integers(min_value=1, max_value=64),
    )
    @settings(max_examples=50, deadline=None)
    def test_any_valid_value_reads_back(self, seconds: float, readers: int) -> None:
        env = {"AGENTIK_KEEPALIVE_TIMEOUT": repr(seconds), "AGENTIK_STORAGE_READERS": str(readers)}
        config = load_config(None, env=env)
        assert (config.limits.keepalive_timeout, config.readers) == (seconds, readers)

    @pytest.mark.parametrize(
        ("variable", "value", "message"),
        [
            ("AGENTIK_KEEPALIVE_TIMEOUT", "0", r"keepalive_timeout must be a positive number"),
            ("AGENTIK_KEEPALIVE_TIMEOUT", "-1", r"keepalive_timeout must be a positive number"),
            ("AGENTIK_KEEPALIVE_TIMEOUT", "off", r"keepalive_timeout must be a positive number"),
            ("AGENTIK_KEEPALIVE_TIMEOUT", "inf", r"keepalive_timeout must be a positive number"),
            ("AGENTIK_STORAGE_READERS", "0", r"\[storage\] readers must be a positive integer"),
            ("AGENTIK_STORAGE_READERS", "2.5", r"\[storage\] readers must be a positive integer"),
            ("AGENTIK_STORAGE_READERS", "x", r"\[storage\] readers must be a positive integer"),
            ("AGENTIK_STORAGE_READERS", "65", r"^\[storage\] readers must be between 1 and 64"),
        ],
    )
    def test_nonsense_in_the_environment(self, variable: str, value: str, message: str) -> None:
        with pytest.raises(ConfigError, match=message):
            load_config(None, env={variable: value})

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("[limits]\nkeepalive_timeout = 0\n", r"\[limits\] keepalive_timeout must be a pos"),
            ('[limits]\nkeepalive_timeout = "5"\n', r"\[limits\] keepalive_timeout must be a pos"),
            ("[storage]\nreaders = true\n", r"\[storage\] readers must be a positive integer"),
            (
                "[storage]\nreaders = 1000\n",
                r"^\[storage\] readers must be between 1 and 64, got 1000$",
            ),
        ],
    )
    def test_nonsense_in_the_file(self, tmp_path: Path, text: str, message: str) -> None:
        with pytest.raises(ConfigError, match=message):
            load_config(write(tmp_path, text), env={})

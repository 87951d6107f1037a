"""Parsing ``[[mcp.servers]]`` tables: values, defaults, and errors that name the key."""

from __future__ import annotations

import pathlib
import tomllib

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik.mcp import (
    HttpServer,
    McpConfigError,
    McpServerConfig,
    OAuthSettings,
    StdioServer,
    parse_mcp_servers,
)

TOML = """
[[mcp.servers]]
name = "time"
command = "mcp-server-time"
args = ["--local-timezone", "UTC"]
env = { TZ = "UTC", A = "1" }
cwd = "/tmp"
lazy = true
call_timeout = 5

[[mcp.servers]]
url = "http://127.0.0.1:8000/mcp"
headers = { Authorization = "Bearer x" }
description = "Remote tools."
protocol = "legacy"
connect_timeout = 2.5
"""


class TestParse:
    def test_a_stdio_and_an_http_server_parse_into_configs(self) -> None:
        """Every key lands in its field; mappings become sorted pairs."""
        time, remote = parse_mcp_servers(tomllib.loads(TOML)["mcp"]["servers"])
        assert time == McpServerConfig(
            transport=StdioServer(
                command="mcp-server-time",
                args=("--local-timezone", "UTC"),
                env=(("A", "1"), ("TZ", "UTC")),
                cwd="/tmp",
            ),
            name="time",
            lazy=True,
            call_timeout=5.0,
        )
        assert remote == McpServerConfig(
            transport=HttpServer(
                url="http://127.0.0.1:8000/mcp", headers={"Authorization": "Bearer x"}
            ),
            description="Remote tools.",
            protocol="legacy",
            connect_timeout=2.5,
        )

    def test_defaults(self) -> None:
        """Unset keys take the documented defaults."""
        (config,) = parse_mcp_servers([{"command": "srv"}])
        assert (config.name, config.description, config.lazy, config.protocol) == (
            None,
            None,
            False,
            "auto",
        )
        assert (config.call_timeout, config.connect_timeout) == (60.0, 30.0)
        assert (config.backoff, config.backoff_max) == (0.5, 30.0)


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        (
            {"command": "x"},
            r"mcp.servers must be an array of tables, got {'command': 'x'} \(a dict\)",
        ),
        (["x"], r"mcp.servers\[0\] must be a table, got 'x' \(a str\)"),
        ([{}], r"mcp.servers\[0\] needs exactly one of 'command' \(stdio\) or 'url' \(http\)"),
        (
            [{"command": "x", "url": "http://h"}],
            r"mcp.servers\[0\] needs exactly one of 'command' \(stdio\) or 'url' \(http\)",
        ),
        (
            [{"command": "x"}, {"command": "y", "headers": {}}],
            r"mcp.servers\[1\].headers is not a known key; expected one of \[.*'args'.*\]",
        ),
        (
            [{"command": ""}],
            r"mcp.servers\[0\].command must be a non-empty string, got '' \(a str\)",
        ),
        (
            [{"command": "x", "args": "a b"}],
            r"mcp.servers\[0\].args must be an array of strings, .*",
        ),
        (
            [{"command": "x", "args": ["a", 1]}],
            r"mcp.servers\[0\].args\[1\] must be a string, got 1 \(a int\)",
        ),
        (
            [{"command": "x", "env": {"A": 1}}],
            r"mcp.servers\[0\].env.A must be a string, got 1 \(a int\)",
        ),
        (
            [{"url": "ftp://h"}],
            r"mcp.servers\[0\].url must start with http:// or https://, got 'ftp://h'",
        ),
        (
            [{"command": "x", "lazy": "yes"}],
            r"mcp.servers\[0\].lazy must be true or false, got 'yes' \(a str\)",
        ),
        (
            [{"command": "x", "protocol": "new"}],
            r"mcp.servers\[0\].protocol must be 'auto' or 'legacy', got 'new'",
        ),
        (
            [{"command": "x", "call_timeout": 0}],
            r"mcp.servers\[0\].call_timeout must be > 0 seconds, got 0",
        ),
        (
            [{"command": "x", "backoff": True}],
            r"mcp.servers\[0\].backoff must be a number of seconds, got True \(a bool\)",
        ),
        (
            [{"command": "x", "name": "my_tools"}],
            r"mcp.servers\[0\].name 'my_tools' is invalid; "
            r"expected 1-32 letters, digits or '-' \(no '_'\)",
        ),
        (
            [{"command": "x", "name": "a"}, {"url": "http://h", "name": "a"}],
            r"mcp.servers\[0\].name 'a' is used by two servers",
        ),
    ],
)
def test_errors_name_the_key_and_the_expectation(servers: object, message: str) -> None:
    """Each mistake raises McpConfigError whose message names the exact key."""
    with pytest.raises(McpConfigError, match=rf"^{message}$"):
        parse_mcp_servers(servers)


def test_the_python_api_validates_too() -> None:
    """Configs built in Python obey the same rules as parsed ones."""
    with pytest.raises(
        McpConfigError, match=r"^mcp server call_timeout must be > 0 seconds, got -1$"
    ):
        McpServerConfig(transport=StdioServer(command="x"), call_timeout=-1)


OAUTH = """
[[mcp.servers]]
name = "crm"
url = "https://crm.example/mcp"
[mcp.servers.oauth]
grant = "client_credentials"
client_id = "agentik-prod"
client_secret_env = "CRM_SECRET"
scope = "tools:read"
issuer = "https://auth.crm.example"
"""


class TestOAuth:
    def test_the_oauth_table_parses_with_the_secret_from_the_environment(self) -> None:
        """The secret is read from the variable named, and kept out of repr."""
        table = tomllib.loads(OAUTH)["mcp"]["servers"]
        (config,) = parse_mcp_servers(table, env={"CRM_SECRET": "s3cr3t-value"})
        assert isinstance(config.transport, HttpServer)
        assert config.transport.oauth == OAuthSettings(
            grant="client_credentials",
            client_id="agentik-prod",
            client_secret="s3cr3t-value",
            scope="tools:read",
            issuer="https://auth.crm.example",
        )
        assert "s3cr3t-value" not in repr(config)

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            (
                {"client_secret_env": "NOPE"},
                r"^mcp.servers\[0\].oauth.client_secret_env names 'NOPE', which is not set$",
            ),
            (
                {"grant": "password"},
                r"^mcp.servers\[0\].oauth.grant must be 'authorization_code', "
                r"'client_credentials' or 'identity_assertion', got 'password'$",
            ),
            ({"colour": "red"}, r"^mcp.servers\[0\].oauth.colour is not a known key"),
            (
                {"client_metadata_url": "http://x/y"},
                r"^mcp.servers\[0\].oauth.client_metadata_url must start with https://",
            ),
            ({"redirect_port": 70000}, r"^mcp.servers\[0\].oauth.redirect_port must be a port"),
        ],
    )
    def test_a_bad_oauth_table_names_the_key(self, change: dict[str, object], message: str) -> None:
        table = tomllib.loads(OAUTH)["mcp"]["servers"]
        table[0]["oauth"].update(change)
        with pytest.raises(McpConfigError, match=message):
            parse_mcp_servers(table, env={"CRM_SECRET": "x"})

    def test_oauth_needs_a_name(self) -> None:
        """Tokens are stored under the name, and `agentik mcp login NAME` names it."""
        table = tomllib.loads(OAUTH)["mcp"]["servers"]
        del table[0]["name"]
        with pytest.raises(McpConfigError, match=r"^mcp.servers\[0\].name is required with oauth"):
            parse_mcp_servers(table, env={"CRM_SECRET": "x"})

    @settings(max_examples=50, deadline=None)
    @given(secret=st.text(alphabet="ABCDEFGHJKMNPQRSTUVWXYZ23456789-_", min_size=12, max_size=40))
    def test_no_error_or_repr_shows_the_secret(self, secret: str) -> None:
        """Whatever else is wrong with the table, the secret's value is never in the message."""
        table = tomllib.loads(OAUTH)["mcp"]["servers"]
        (config,) = parse_mcp_servers(table, env={"CRM_SECRET": secret})
        assert secret not in repr(config)
        for change in ({"grant": 1}, {"scope": 3}, {"redirect_port": "x"}, {"extra": secret[::-1]}):
            bad = tomllib.loads(OAUTH)["mcp"]["servers"]
            bad[0]["oauth"].update(change)
            with pytest.raises(McpConfigError) as error:
                parse_mcp_servers(bad, env={"CRM_SECRET": secret})
            assert secret not in str(error.value)


def _pem(kind: str) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    if kind == "public":
        return key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _jwt_table(key_file: pathlib.Path, **more: object) -> list[dict[str, object]]:
    table = tomllib.loads(OAUTH)["mcp"]["servers"]
    del table[0]["oauth"]["client_secret_env"]
    table[0]["oauth"].update(private_key_file=str(key_file), **more)
    return table  # type: ignore[no-any-return]


class TestPrivateKeyJwt:
    def test_a_key_file_parses_with_its_kid_and_algorithm(self, tmp_path: pathlib.Path) -> None:
        """The path is kept, not the key: it is read when a token is requested."""
        key_file = tmp_path / "client.pem"
        pem = _pem("private")
        key_file.write_bytes(pem)
        table = _jwt_table(key_file, key_id="k1", signing_alg="ES256")
        (config,) = parse_mcp_servers(table, env={})
        assert isinstance(config.transport, HttpServer)
        settings = config.transport.oauth
        assert settings is not None
        assert (settings.private_key_file, settings.key_id, settings.signing_alg) == (
            str(key_file),
            "k1",
            "ES256",
        )
        assert settings.client_secret is None
        assert pem.decode().splitlines()[1] not in repr(config)

    @pytest.mark.parametrize(
        ("kind", "change", "message"),
        [
            ("missing", {}, r"oauth.private_key_file: cannot read '.*nope.pem': No such file"),
            ("public", {}, r"oauth.private_key_file: '.*' does not hold a private key usable for"),
            ("private", {"signing_alg": "RS256"}, r"does not hold a private key usable for RS256$"),
            ("private", {"signing_alg": "none"}, r"oauth.signing_alg must be one of"),
            ("private", {"client_secret_env": "CRM_SECRET"}, r"oauth.private_key_file is for"),
            ("private", {"grant": "authorization_code"}, r"oauth.private_key_file is for"),
        ],
    )
    def test_a_bad_key_setting_names_the_key_and_never_the_pem(
        self, tmp_path: pathlib.Path, kind: str, change: dict[str, object], message: str
    ) -> None:
        key_file = tmp_path / ("nope.pem" if kind == "missing" else "client.pem")
        pem = b"" if kind == "missing" else _pem(kind)
        if pem:
            key_file.write_bytes(pem)
        with pytest.raises(McpConfigError, match=message) as error:
            parse_mcp_servers(_jwt_table(key_file, **change), env={"CRM_SECRET": "x"})
        for line in pem.decode().splitlines()[1:-1]:
            assert line not in str(error.value)

    def test_key_id_without_a_key_file_is_an_error(self) -> None:
        table = tomllib.loads(OAUTH)["mcp"]["servers"]
        table[0]["oauth"]["key_id"] = "k1"
        with pytest.raises(McpConfigError, match=r"key_id and signing_alg need private_key_file"):
            parse_mcp_servers(table, env={"CRM_SECRET": "x"})


XAA = """
[[mcp.servers]]
name = "wiki"
url = "https://wiki.example/mcp"
[mcp.servers.oauth]
grant = "identity_assertion"
client_id = "agentik-wiki"
client_secret_env = "WIKI_SECRET"
issuer = "https://auth.wiki.example"
idp_token_endpoint = "https://idp.example/oauth2/token"
idp_client_id = "agentik"
idp_client_secret_env = "IDP_SECRET"
id_token_file = "/run/agentik/id_token"
"""


class TestIdentityAssertion:
    def test_the_table_parses_with_both_secrets_from_the_environment(self) -> None:
        table = tomllib.loads(XAA)["mcp"]["servers"]
        env = {"WIKI_SECRET": "wiki-s3cret", "IDP_SECRET": "idp-s3cret"}
        (config,) = parse_mcp_servers(table, env=env)
        assert isinstance(config.transport, HttpServer)
        assert config.transport.oauth == OAuthSettings(
            grant="identity_assertion",
            client_id="agentik-wiki",
            client_secret="wiki-s3cret",
            issuer="https://auth.wiki.example",
            idp_token_endpoint="https://idp.example/oauth2/token",
            idp_client_id="agentik",
            idp_client_secret="idp-s3cret",
            id_token_file="/run/agentik/id_token",
        )
        assert "wiki-s3cret" not in repr(config)
        assert "idp-s3cret" not in repr(config)

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            ({"issuer": None}, r"grant 'identity_assertion' needs issuer$"),
            (
                {"client_secret_env": None, "id_token_file": None},
                r"grant 'identity_assertion' needs client_secret_env, id_token_file$",
            ),
            ({"idp_token_endpoint": "idp.example"}, r"idp_token_endpoint must start with"),
            ({"token_endpoint_auth": "none"}, r"'client_secret_post' with grant 'identity_as"),
            ({"grant": "client_credentials"}, r"are for grant 'identity_assertion'$"),
            ({"idp_client_secret_env": "NOPE"}, r"idp_client_secret_env names 'NOPE', which is"),
        ],
    )
    def test_a_bad_table_names_what_is_wrong(self, change: dict[str, object], message: str) -> None:
        table = tomllib.loads(XAA)["mcp"]["servers"]
        for key, value in change.items():
            if value is None:
                del table[0]["oauth"][key]
            else:
                table[0]["oauth"][key] = value
        with pytest.raises(McpConfigError, match=message):
            parse_mcp_servers(table, env={"WIKI_SECRET": "x", "IDP_SECRET": "y"})

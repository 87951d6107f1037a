"""MCP server configuration: attrs values, and their parsing from a TOML table.

One ``McpServerConfig`` per server. ``parse_mcp_servers`` turns the
``[[mcp.servers]]`` array of ``agentik.toml`` (already parsed by ``tomllib``)
into configs; every problem raises ``McpConfigError`` naming the exact key
(``mcp.servers[1].args[0]``) and what was expected. Unknown keys are errors
too, so a typo never silently drops a setting.

Invariants: a config is either stdio (``command``) or Streamable HTTP
(``url``), never both; a configured toolset name already obeys the toolset
name rule (derived names are made to fit later, at connection time); every
timeout and backoff is a positive number of seconds.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from typing import Literal

import attrs

from agentik._errors import AgentikError

TOOLSET_NAME_PATTERN = re.compile(r"[A-Za-z0-9-]+")
"""The toolset-name rule (DESIGN.md): no ``_``, which separates a tool's verb."""

MAX_TOOLSET_NAME = 32
"""Toolset names stay short so ``<toolset>_<tool>`` leaves room for the tool's own name."""


class McpConfigError(AgentikError):
    """The MCP server configuration is invalid; the message names the key."""


def _strs(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _pairs(value: Mapping[str, str] | Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((str(k), str(v)) for k, v in items))


@attrs.frozen(kw_only=True)
class StdioServer:
    """A server launched as a subprocess, speaking MCP over its stdin and stdout."""

    command: str
    """The executable; looked up on ``PATH`` like a shell would."""
    args: tuple[str, ...] = attrs.field(default=(), converter=_strs)
    env: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)
    """Variables added over the SDK's safe default environment (``PATH``, ``HOME``…)."""
    cwd: str | None = None


Grant = Literal["authorization_code", "client_credentials", "identity_assertion"]
TokenEndpointAuth = Literal["client_secret_basic", "client_secret_post", "none"]


@attrs.frozen(kw_only=True)
class OAuthSettings:
    """How agentik gets an access token for an HTTP server (MCP authorization, OAuth 2.1).

    Discovery (protected-resource and authorization-server metadata), PKCE,
    registration, scope selection and step-up, and refresh are the mcp SDK's;
    these settings only choose the grant and the client. The client secret
    comes from the environment, never from the file, and is not in ``repr``.
    """

    grant: Grant = "authorization_code"
    """``authorization_code``: a person logs in once (``agentik mcp login NAME``);
    ``client_credentials``: machine to machine, no person; ``identity_assertion``:
    enterprise-managed (SEP-990), the identity provider's ID token is exchanged
    for an identity assertion grant (ID-JAG) that the server's authorization
    server turns into an access token, no person."""
    client_id: str | None = None
    """A pre-registered client; without it the client registers itself (dynamic
    registration) or uses ``client_metadata_url``."""
    client_secret: str | None = attrs.field(default=None, repr=False)
    token_endpoint_auth: TokenEndpointAuth | None = None
    """How the client authenticates at the token endpoint; default: basic with a
    secret, none without."""
    scope: str | None = None
    """Space-separated scopes; default: the server's challenge or metadata."""
    issuer: str | None = None
    """The authorization server that issued ``client_id`` (client credentials)."""
    client_metadata_url: str | None = None
    """An HTTPS URL serving this client's metadata document (used as client id
    when the authorization server supports it)."""
    private_key_file: str | None = None
    """Client credentials with ``private_key_jwt`` (RFC 7523): the PEM private key
    that signs the client assertion, instead of a client secret. Read when a token
    is requested (so a rotated key is picked up); never logged."""
    key_id: str | None = None
    """The ``kid`` header of the client assertion, naming the key to the server."""
    signing_alg: str = "RS256"
    """The assertion's signature algorithm (``RS256``, ``ES256``, ``EdDSA``...)."""
    idp_token_endpoint: str | None = None
    """``identity_assertion``: the enterprise identity provider's token endpoint, where
    the ID token is exchanged (RFC 8693) for an ID-JAG."""
    idp_client_id: str | None = None
    """``identity_assertion``: agentik's client at the identity provider."""
    idp_client_secret: str | None = attrs.field(default=None, repr=False)
    id_token_file: str | None = None
    """``identity_assertion``: a file holding the person's or workload's ID token from
    the identity provider, read for each exchange (whatever renews it writes it
    there); never logged."""
    redirect_port: int = 0
    """The 127.0.0.1 port ``agentik mcp login`` receives the redirect on (0: any
    free port; a pre-registered client needs its registered one)."""


@attrs.frozen(kw_only=True)
class HttpServer:
    """A server reached over Streamable HTTP at ``url``."""

    url: str
    headers: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)
    """Sent with every request (for instance ``Authorization``)."""
    oauth: OAuthSettings | None = None
    """Get a token by OAuth; tokens are kept in the storage bundle, encrypted."""


_NAME_RULE = f"1-{MAX_TOOLSET_NAME} letters, digits or '-' (no '_')"


def _valid_name(name: str) -> bool:
    return TOOLSET_NAME_PATTERN.fullmatch(name) is not None and len(name) <= MAX_TOOLSET_NAME


def _check_name(
    instance: object, attribute: attrs.Attribute[str | None], value: str | None
) -> None:
    if value is not None and not _valid_name(value):
        raise McpConfigError(f"mcp server name {value!r} is invalid; expected {_NAME_RULE}")


def _check_positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0 or math.isnan(value):
        raise McpConfigError(f"mcp server {attribute.name} must be > 0 seconds, got {value!r}")


@attrs.frozen(kw_only=True)
class McpServerConfig:
    """One MCP server, exposed to the model as one toolset."""

    transport: StdioServer | HttpServer
    name: str | None = attrs.field(default=None, validator=_check_name)
    """The toolset name; default: the server's own name, made to fit the toolset rule."""
    description: str | None = None
    """The catalog row; default: the server's instructions or description, on one line."""
    lazy: bool = False
    """List the tools once at start, then launch the server only when one is first called."""
    protocol: Literal["auto", "legacy"] = "auto"
    """``auto`` negotiates 2026-07-28 when the server offers it; ``legacy`` forces the handshake."""
    call_timeout: float = attrs.field(default=60.0, validator=_check_positive)
    connect_timeout: float = attrs.field(default=30.0, validator=_check_positive)
    """Bounds launching, initializing and listing tools; past it the attempt has failed."""
    backoff: float = attrs.field(default=0.5, validator=_check_positive)
    """The first restart delay; it doubles per failed attempt up to ``backoff_max``."""
    backoff_max: float = attrs.field(default=30.0, validator=_check_positive)
    elicitation_timeout: float = attrs.field(default=120.0, validator=_check_positive)
    """How long a question the server asks mid-call waits for a person; then it is
    declined. The call's timeouts stand still meanwhile."""


_COMMON_KEYS = frozenset(
    {
        "name",
        "description",
        "lazy",
        "protocol",
        "call_timeout",
        "connect_timeout",
        "backoff",
        "backoff_max",
        "elicitation_timeout",
    }
)
_STDIO_KEYS = _COMMON_KEYS | {"command", "args", "env", "cwd"}
_HTTP_KEYS = _COMMON_KEYS | {"url", "headers", "oauth"}
_OAUTH_KEYS = frozenset(
    {
        "grant",
        "client_id",
        "client_secret_env",
        "token_endpoint_auth",
        "scope",
        "issuer",
        "client_metadata_url",
        "redirect_port",
        "private_key_file",
        "key_id",
        "signing_alg",
        "idp_token_endpoint",
        "idp_client_id",
        "idp_client_secret_env",
        "id_token_file",
    }
)
_IDP_KEYS = ("idp_token_endpoint", "idp_client_id", "idp_client_secret_env", "id_token_file")
_SIGNING_ALGS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)


def parse_mcp_servers(
    value: object, *, where: str = "mcp.servers", env: Mapping[str, str] | None = None
) -> tuple[McpServerConfig, ...]:
    """Build configs from the ``[[mcp.servers]]`` array of a parsed TOML document.

    ``env`` (default ``os.environ``) holds the secrets ``client_secret_env`` names.

    Raises:
        McpConfigError: naming the offending key, for instance ``mcp.servers[0].command``.
    """
    if not isinstance(value, list):
        raise McpConfigError(f"{where} must be an array of tables, got {_kind(value)}")
    configs = tuple(
        parse_mcp_server(item, where=f"{where}[{i}]", env=env) for i, item in enumerate(value)
    )
    names = [c.name for c in configs if c.name is not None]
    for i, config in enumerate(configs):
        if config.name is not None and names.count(config.name) > 1:
            raise McpConfigError(f"{where}[{i}].name {config.name!r} is used by two servers")
    return configs


def parse_mcp_server(
    table: object, *, where: str, env: Mapping[str, str] | None = None
) -> McpServerConfig:
    """Build one config from one ``[[mcp.servers]]`` table."""
    if not isinstance(table, dict):
        raise McpConfigError(f"{where} must be a table, got {_kind(table)}")
    if ("command" in table) == ("url" in table):
        raise McpConfigError(f"{where} needs exactly one of 'command' (stdio) or 'url' (http)")
    allowed = _STDIO_KEYS if "command" in table else _HTTP_KEYS
    for key in table:
        if key not in allowed:
            raise McpConfigError(
                f"{where}.{key} is not a known key; expected one of {sorted(allowed)}"
            )
    transport: StdioServer | HttpServer
    if "command" in table:
        transport = StdioServer(
            command=_string(table, "command", where),
            args=_strings(table.get("args", []), f"{where}.args"),
            env=_string_table(table.get("env", {}), f"{where}.env"),
            cwd=_optional_string(table, "cwd", where),
        )
    else:
        url = _string(table, "url", where)
        if not url.startswith(("http://", "https://")):
            raise McpConfigError(f"{where}.url must start with http:// or https://, got {url!r}")
        oauth = None
        if "oauth" in table:
            if "name" not in table:
                raise McpConfigError(
                    f"{where}.name is required with oauth: tokens are stored under it "
                    "and `agentik mcp login NAME` names it"
                )
            oauth = _oauth(table["oauth"], f"{where}.oauth", os.environ if env is None else env)
        transport = HttpServer(
            url=url,
            headers=_string_table(table.get("headers", {}), f"{where}.headers"),
            oauth=oauth,
        )
    protocol = table.get("protocol", "auto")
    if protocol not in ("auto", "legacy"):
        raise McpConfigError(f"{where}.protocol must be 'auto' or 'legacy', got {protocol!r}")
    lazy = table.get("lazy", False)
    if not isinstance(lazy, bool):
        raise McpConfigError(f"{where}.lazy must be true or false, got {_kind(lazy)}")
    name = _optional_string(table, "name", where)
    if name is not None and not _valid_name(name):
        raise McpConfigError(f"{where}.name {name!r} is invalid; expected {_NAME_RULE}")
    return McpServerConfig(
        transport=transport,
        name=name,
        description=_optional_string(table, "description", where),
        lazy=lazy,
        protocol=protocol,
        **{key: _seconds(table[key], f"{where}.{key}") for key in _TIMES if key in table},
    )


_TIMES = ("call_timeout", "connect_timeout", "backoff", "backoff_max", "elicitation_timeout")
_AUTH_METHODS = ("client_secret_basic", "client_secret_post", "none")


def _oauth(table: object, where: str, env: Mapping[str, str]) -> OAuthSettings:
    if not isinstance(table, dict):
        raise McpConfigError(f"{where} must be a table, got {_kind(table)}")
    for key in table:
        if key not in _OAUTH_KEYS:
            raise McpConfigError(
                f"{where}.{key} is not a known key; expected one of {sorted(_OAUTH_KEYS)}"
            )
    grant = table.get("grant", "authorization_code")
    if grant not in ("authorization_code", "client_credentials", "identity_assertion"):
        raise McpConfigError(
            f"{where}.grant must be 'authorization_code', 'client_credentials' or "
            f"'identity_assertion', got {grant!r}"
        )
    method = table.get("token_endpoint_auth")
    if method is not None and method not in _AUTH_METHODS:
        raise McpConfigError(
            f"{where}.token_endpoint_auth must be one of {list(_AUTH_METHODS)}, got {method!r}"
        )
    secret = _secret(table, "client_secret_env", where, env)
    client_id = _optional_string(table, "client_id", where)
    key_file = _optional_string(table, "private_key_file", where)
    alg = _optional_string(table, "signing_alg", where) or "RS256"
    if key_file is not None:
        if grant != "client_credentials" or secret is not None or method is not None:
            raise McpConfigError(
                f"{where}.private_key_file is for grant 'client_credentials' "
                "instead of client_secret_env and token_endpoint_auth"
            )
        if alg not in _SIGNING_ALGS:
            raise McpConfigError(
                f"{where}.signing_alg must be one of {list(_SIGNING_ALGS)}, got {alg!r}"
            )
        _check_private_key(key_file, alg, f"{where}.private_key_file")
    elif "key_id" in table or "signing_alg" in table:
        raise McpConfigError(f"{where}: key_id and signing_alg need private_key_file")
    if grant == "identity_assertion":
        _check_identity_assertion(table, where, client_id, secret)
    elif any(key in table for key in _IDP_KEYS):
        raise McpConfigError(f"{where}: {', '.join(_IDP_KEYS)} are for grant 'identity_assertion'")
    one_credential = (secret is None) != (key_file is None)
    if grant == "client_credentials" and (client_id is None or not one_credential):
        raise McpConfigError(
            f"{where}: grant 'client_credentials' needs client_id and one of "
            "client_secret_env or private_key_file"
        )
    metadata_url = _optional_string(table, "client_metadata_url", where)
    if metadata_url is not None and not metadata_url.startswith("https://"):
        raise McpConfigError(
            f"{where}.client_metadata_url must start with https://, got {metadata_url!r}"
        )
    port = table.get("redirect_port", 0)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise McpConfigError(f"{where}.redirect_port must be a port 0-65535, got {_kind(port)}")
    return OAuthSettings(
        grant=grant,
        client_id=client_id,
        client_secret=secret,
        token_endpoint_auth=method,
        scope=_optional_string(table, "scope", where),
        issuer=_optional_string(table, "issuer", where),
        client_metadata_url=metadata_url,
        redirect_port=port,
        private_key_file=key_file,
        key_id=_optional_string(table, "key_id", where),
        signing_alg=alg,
        idp_token_endpoint=_optional_string(table, "idp_token_endpoint", where),
        idp_client_id=_optional_string(table, "idp_client_id", where),
        idp_client_secret=_secret(table, "idp_client_secret_env", where, env),
        id_token_file=_optional_string(table, "id_token_file", where),
    )


def _secret(
    table: Mapping[str, object], key: str, where: str, env: Mapping[str, str]
) -> str | None:
    """The value of the variable ``key`` names; errors name the variable, never a value."""
    if key not in table:
        return None
    variable = _string(table, key, where)
    secret = env.get(variable)
    if not secret:
        raise McpConfigError(f"{where}.{key} names {variable!r}, which is not set")
    return secret


def _check_identity_assertion(
    table: Mapping[str, object], where: str, client_id: str | None, secret: str | None
) -> None:
    """SEP-990 needs a confidential client at a configured authorization server, and
    where to get the ID-JAG from."""
    missing = [
        key
        for key, present in (
            ("client_id", client_id is not None),
            ("client_secret_env", secret is not None),
            ("issuer", "issuer" in table),
            ("idp_token_endpoint", "idp_token_endpoint" in table),
            ("id_token_file", "id_token_file" in table),
        )
        if not present
    ]
    if missing:
        raise McpConfigError(f"{where}: grant 'identity_assertion' needs {', '.join(missing)}")
    endpoint = _string(table, "idp_token_endpoint", where)
    if not endpoint.startswith(("https://", "http://")):
        raise McpConfigError(
            f"{where}.idp_token_endpoint must start with https:// or http://, got {endpoint!r}"
        )
    method = table.get("token_endpoint_auth")
    if method not in (None, "client_secret_basic", "client_secret_post"):
        raise McpConfigError(
            f"{where}.token_endpoint_auth must be 'client_secret_basic' or "
            f"'client_secret_post' with grant 'identity_assertion', got {method!r}"
        )


def _check_private_key(path: str, alg: str, where: str) -> None:
    """The file holds a private key that can sign ``alg``; errors never quote the file."""
    from jwt.algorithms import get_default_algorithms

    try:
        with open(path, "rb") as file:
            pem = file.read()
    except OSError as error:
        raise McpConfigError(f"{where}: cannot read {path!r}: {error.strerror}") from None
    try:
        get_default_algorithms()[alg].prepare_key(pem)
        usable = b"PRIVATE KEY" in pem
    # Any library error: its message could quote the key.
    except Exception:
        usable = False
    if not usable:
        raise McpConfigError(f"{where}: {path!r} does not hold a private key usable for {alg}")


def _kind(value: object) -> str:
    return f"{value!r} (a {type(value).__name__})"


def _string(table: Mapping[str, object], key: str, where: str) -> str:
    value = table[key]
    if not isinstance(value, str) or not value:
        raise McpConfigError(f"{where}.{key} must be a non-empty string, got {_kind(value)}")
    return value


def _optional_string(table: Mapping[str, object], key: str, where: str) -> str | None:
    return _string(table, key, where) if key in table else None


def _strings(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise McpConfigError(f"{where} must be an array of strings, got {_kind(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise McpConfigError(f"{where}[{i}] must be a string, got {_kind(item)}")
    return tuple(value)


def _string_table(value: object, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise McpConfigError(f"{where} must be a table of strings, got {_kind(value)}")
    for key, item in value.items():
        if not isinstance(item, str):
            raise McpConfigError(f"{where}.{key} must be a string, got {_kind(item)}")
    return _pairs(value)


def _seconds(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise McpConfigError(f"{where} must be a number of seconds, got {_kind(value)}")
    if not value > 0:
        raise McpConfigError(f"{where} must be > 0 seconds, got {value!r}")
    return float(value)

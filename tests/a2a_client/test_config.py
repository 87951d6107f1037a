"""``[[a2a.agents]]`` and ``A2AAgentConfig``: every good table parses to what it
says, every bad one is refused with an error naming the key, and a token is
never shown (properties over names, urls and token_env)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentik import A2AAgentConfig
from agentik.a2a_client import A2AConfigError, parse_a2a_agents
from agentik.server import ConfigError, load_config
from agentik.toolsets import NamedTool, ToolsetContribution

NAME = re.compile(r"[A-Za-z0-9-]{1,32}")
names = st.from_regex(NAME, fullmatch=True)
hosts = st.sampled_from(["127.0.0.1", "localhost", "agents.example.com", "[::1]"])
urls = st.builds(
    lambda scheme, host, port, path: f"{scheme}://{host}{port}{path}",
    st.sampled_from(["http", "https"]),
    hosts,
    st.sampled_from(["", ":8080", ":1"]),
    st.sampled_from(["", "/", "/agents/a", "/.well-known/agent-card.json"]),
)
TOKEN = "s3cret-token-value-7f2a9c"


async def _never(arguments: object) -> str:
    raise AssertionError("not called")


@given(names, urls)
def test_a_good_table_parses_to_what_it_says(name: str, url: str) -> None:
    (config,) = parse_a2a_agents([{"name": name, "url": url}], env={})
    assert (config.name, config.url, config.token) == (name, url, None)
    assert config.card_url.endswith("/.well-known/agent-card.json")
    # the toolset and its one tool are valid names
    ToolsetContribution(name, "d", (NamedTool(f"{name}_send", "d", {"type": "object"}, _never),))


@given(st.text(max_size=40).filter(lambda n: not NAME.fullmatch(n)))
def test_a_bad_name_is_refused_naming_the_key(name: str) -> None:
    with pytest.raises(A2AConfigError, match=r"^a2a\.agents\[0\]\.name must be"):
        parse_a2a_agents([{"name": name, "url": "http://127.0.0.1:1"}], env={})
    with pytest.raises(A2AConfigError, match=r"^a2a agent name must be"):
        A2AAgentConfig(name=name, url="http://127.0.0.1:1")


@given(
    st.one_of(
        st.text(max_size=40),
        st.sampled_from(["ftp://h/x", "http://", "http:///x", "//h/x", "http://u:p@h/", "h:80"]),
    ).filter(lambda u: not re.fullmatch(r"https?://[^\s/@:]+(:\d+)?(/\S*)?", u))
)
def test_a_bad_url_is_refused_naming_the_key(url: str) -> None:
    with pytest.raises(A2AConfigError, match=r"^a2a\.agents\[0\]\.url must"):
        parse_a2a_agents([{"name": "a", "url": url}], env={})


@given(names, st.from_regex(r"[A-Z][A-Z0-9_]{0,20}", fullmatch=True))
def test_token_env_reads_the_variable_and_never_shows_it(name: str, variable: str) -> None:
    table = {"name": name, "url": "http://127.0.0.1:1", "token_env": variable}
    (config,) = parse_a2a_agents([table], env={variable: TOKEN})
    assert config.token == TOKEN
    assert TOKEN not in repr(config)
    with pytest.raises(A2AConfigError, match=rf"token_env names '{variable}', which is not set"):
        parse_a2a_agents([table], env={})


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"name": "a", "url": "http://h", "tokn": "x"},
            r"a2a\.agents\[0\]\.tokn is not a known key",
        ),
        ({"url": "http://h"}, r"a2a\.agents\[0\]\.name is missing"),
        ({"name": "a"}, r"a2a\.agents\[0\]\.url is missing"),
        ({"name": "a", "url": "http://h", "token_env": ""}, r"token_env must be the name"),
        ({"name": "a", "url": "http://h", "streaming": "yes"}, r"streaming must be true or false"),
        ({"name": "a", "url": "http://h", "connect_timeout": 0}, r"connect_timeout must be a pos"),
        ({"name": "a", "url": "http://h", "elicitation_timeout": True}, r"elicitation_timeout"),
        ({"name": "a", "url": "http://h", "description": " "}, r"description must be a non-empty"),
        ("x", r"a2a\.agents\[0\] must be a table"),
    ],
)
def test_a_bad_table_is_refused(table: object, message: str) -> None:
    with pytest.raises(A2AConfigError, match=message):
        parse_a2a_agents([table], env={})


def test_two_agents_may_not_share_a_name() -> None:
    tables = [{"name": "a", "url": "http://h"}, {"name": "a", "url": "http://i"}]
    with pytest.raises(A2AConfigError, match=r"a2a\.agents\[1\]\.name 'a' is used by two"):
        parse_a2a_agents(tables, env={})


def test_agentik_toml_holds_the_agents(tmp_path: Path) -> None:
    """``[[a2a.agents]]`` in agentik.toml reach ``ServerConfig.a2a_agents``; a bad
    one is a ``ConfigError`` naming the file and the key."""
    path = tmp_path / "agentik.toml"
    path.write_text(
        '[[a2a.agents]]\nname = "billing"\nurl = "http://127.0.0.1:9000"\n'
        'token_env = "BILLING_TOKEN"\n'
    )
    config = load_config(path, env={"BILLING_TOKEN": TOKEN})
    (agent,) = config.a2a_agents
    assert (agent.name, agent.url, agent.token) == ("billing", "http://127.0.0.1:9000", TOKEN)
    path.write_text('[[a2a.agents]]\nname = "bad_name"\nurl = "http://127.0.0.1:9000"\n')
    with pytest.raises(ConfigError, match=r"agentik\.toml: a2a\.agents\[0\]\.name must be"):
        load_config(path, env={})
    path.write_text("[a2a]\nagent = 1\n")
    with pytest.raises(ConfigError, match=r"\[a2a\] may only hold the \[\[a2a\.agents\]\] array"):
        load_config(path, env={})

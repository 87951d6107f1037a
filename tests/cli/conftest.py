"""CLI tests reuse the in-process server fixtures of the server tests."""

from tests.server.conftest import server as server

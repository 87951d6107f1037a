"""Connection strings and their secrets: parsing, display, scrubbing.

A DSN carries a credential in any form libpq accepts: a URL's user-info
(``postgresql://user:pw@host``, any byte percent-encoded), a ``password=``
query parameter (repeated: the last one counts), a key=value string
(``password='it\\'s'``), and the other secret options (``sslpassword``,
``oauth_client_secret``, the SCRAM keys). libpq says itself which options are
secret (``PQconndefaults``: display character ``*`` for a password, ``D`` for
a debug option not shown by default), so that list is read from the libpq
psycopg runs rather than kept here. A ``passfile`` is a path, shown; agentik
never opens it (libpq does, when the server asks for a password).

Invariants:
- parsing is libpq's (``psycopg.conninfo.conninfo_to_dict``); agentik never
  splits a DSN itself;
- nothing agentik shows (``/health``, logs, error messages) holds a secret
  option's value: ``describe`` shows ``***`` instead;
- a string libpq refuses is reported with libpq's reason, but libpq quotes
  the part it could not read, which may be the password: each quoted part
  that is not the name of an option becomes ``…``, and a reason this module
  does not know is not quoted at all.
"""

from __future__ import annotations

import functools
import re

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from agentik._errors import StoreError

MASK = "***"
_MIN_SECRET = 4
"""Shorter values are not scrubbed from error text: masking one or two
letters would garble every message, and libpq never quotes a password anyway
(scrubbing is the second line of defence, after ``describe``). The same
bound as the model backend's redactor."""

# libpq's reasons for refusing a connection string (fe-connect.c), with each
# quoted part it fills in as a group. Greedy groups anchored at both ends: a
# quote inside the quoted value cannot end it early.
_REASONS = tuple(
    re.compile(pattern)
    for pattern in (
        r'^missing "=" after "(.*)" in connection info string$',
        r"^unterminated quoted string in connection info string$",
        r'^invalid connection option "(.*)"$',
        r'^invalid URI propagated to internal parser routine: "(.*)"$',
        r'^end of string reached when looking for matching "\]" in IPv6 host address'
        r' in URI: "(.*)"$',
        r'^IPv6 host address may not be empty in URI: "(.*)"$',
        r'^unexpected character "(.*)" at position \d+ in URI'
        r' \(expected ":" or "/"\): "(.*)"$',
        r'^extra key/value separator "=" in URI query parameter: "(.*)"$',
        r'^missing key/value separator "=" in URI query parameter: "(.*)"$',
        r'^invalid URI query parameter: "(.*)"$',
        r'^invalid percent-encoded token: "(.*)"$',
        r'^forbidden value %00 in percent-encoded value: "(.*)"$',
        r'^unexpected spaces found in "(.*)", use percent-encoded spaces \(%20\) instead$',
    )
)


@functools.cache
def keywords() -> frozenset[str]:
    """Every option name this libpq knows."""
    return frozenset(o.keyword.decode() for o in pq.Conninfo.get_defaults())


@functools.cache
def secret_keywords() -> frozenset[str]:
    """The options libpq itself never shows: passwords and keys."""
    known = {"password", "sslpassword", "oauth_client_secret"}  # in case a libpq omits a mark
    marked = {o.keyword.decode() for o in pq.Conninfo.get_defaults() if o.dispchar in (b"*", b"D")}
    return frozenset(known | marked)


def _safe_reason(message: str) -> str:
    """libpq's reason for refusing a string, with what it quotes from the
    string replaced by ``…`` unless it is an option name."""
    names = {name.lower() for name in keywords()}
    for reason in _REASONS:
        match = reason.match(message)
        if match is None:
            continue
        shown = message
        # Replace from the last group back, so earlier offsets stay valid.
        for index in range(len(match.groups()), 0, -1):
            part = match.group(index)
            if part.lower() in names:
                continue
            shown = shown[: match.start(index)] + "…" + shown[match.end(index) :]
        return shown
    return "libpq cannot read it"


def parse(dsn: str) -> dict[str, str]:
    """``dsn``'s options as libpq reads them; ``StoreError`` (naming no part of
    ``dsn`` that may be a secret) if libpq cannot read it."""
    if _ambiguous_user_info(dsn):
        raise StoreError(
            "the PostgreSQL URL has more than one '@' before its host: percent-encode"
            " '@' in the user name or password as %40"
        )
    # The reason is raised outside the ``except``: libpq's own message (which
    # may quote the password) must not ride along as ``__context__``.
    reason = None
    try:
        options = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as error:
        reason = _safe_reason(str(error).strip())
    except UnicodeDecodeError:
        reason = "a value is not UTF-8 once percent-decoded"
    if reason is not None:
        raise StoreError(f"the PostgreSQL connection string is not valid: {reason}")
    return {name: str(value) for name, value in options.items()}


def _ambiguous_user_info(dsn: str) -> bool:
    """Whether a URL's authority holds more than one ``@``: libpq ends the
    user-info at the first one, so the rest of an unencoded password would
    become the host name, shown everywhere a host is."""
    if not dsn.startswith(("postgresql://", "postgres://")):
        return False
    authority = re.split(r"[/?]", dsn.partition("://")[2], maxsplit=1)[0]
    return authority.count("@") > 1


def shown(options: dict[str, str]) -> str:
    """``options`` as a libpq key=value string, each secret as ``***``."""
    secret = secret_keywords()
    return make_conninfo(
        "", **{name: MASK if name in secret else value for name, value in options.items()}
    )


def describe(dsn: str) -> str:
    """``dsn`` for people: its options without their secrets, or a note that
    it cannot be read (never the string itself)."""
    try:
        return shown(parse(dsn))
    except StoreError:
        return "(a connection string libpq cannot read)"


def scrub(text: str, options: dict[str, str]) -> str:
    """``text`` with the value of each secret option in ``options`` masked."""
    secret = secret_keywords()
    values = sorted(
        {v for k, v in options.items() if k in secret and len(v) >= _MIN_SECRET},
        key=len,
        reverse=True,  # the longest first: one secret may contain another
    )
    for value in values:
        text = text.replace(value, MASK)
    return text

"""The exception tree. Every error agentik raises on purpose derives from one root.

Each class imports from ``agentik``, or, where a bracket names a package, from
that package (``from agentik.storage import StoreClosedError``). Catch a
branch to catch every error under it.

    AgentikError
    ├── StoreError                 a storage operation failed; nothing of it was applied
    │   ├── CommitInDoubt          [storage] a write's COMMIT failed on the way: it
    │   │                          may have been applied (unknown until read back)
    │   ├── StoreClosedError       [storage] the bundle is closed or its writer died
    │   ├── DuplicateKeyError      [storage] an idempotency key was already used
    │   ├── LeaseLapsedError       [storage] this node's lease lapsed: it owns no
    │   │                          conversation until it joins again
    │   └── SchemaVersionError     [storage] the database is newer than this code,
    │                              or SQLite too old
    ├── NotOwnedError              [storage] another node owns the conversation
    │                              (PostgreSQL, several nodes)
    ├── ArchiveFormatError         [storage] a conversation archive cannot be read
    ├── ToolError                  a tool definition or call is invalid
    ├── ModelBackendError          the model backend failed or answered garbage
    ├── TurnError                  a turn could not finish (step limit, model failure)
    ├── ApprovalError              a decision about a call that is not waiting, or
    │                              that contradicts one already taken
    ├── OverloadedError            too many turns queued; retry later
    ├── TooLargeError              [agent] a skill or note is larger than its limit
    │                              (also a ValueError)
    ├── ElicitationError           [agent] an answer to a tool's question the agent
    │                              cannot take
    ├── ConfigError                [server] the configuration is invalid
    ├── ProtocolViolation          [server] a client sent something the wire protocol
    │   │                          forbids
    │   └── HttpError              [server.http] a request refused with its HTTP status
    │       ├── Redirect           [server.http] 307 to the node that owns the
    │       │                      conversation
    │       └── NotHere            [server.http] 503: no node can take the
    │                              conversation right now; nothing ran
    ├── McpConfigError             [mcp] an ``[[mcp.servers]]`` entry is invalid
    ├── LoginRequired              [mcp] an MCP server needs a person to authorize agentik
    ├── LoginError                 [mcp] the interactive authorization did not complete
    ├── A2AConfigError             [a2a_client] an ``[[a2a.agents]]`` entry is invalid
    ├── ServerCheckError           [benchmark] the server at a URL cannot be used
    └── UnexpectedModelRequest     [testing] a request the ``Script`` does not cover
                                   (also an AssertionError)

Classes that are not public (an A2A error, a database already in use) derive
from one of these and are caught with it.
Lower-layer errors (apsw, psycopg, httpx2, the MCP SDK) are mapped at the
boundary with ``raise … from``; ``tests/api/test_error_tree.py`` keeps this
tree and the public classes in step.
"""

from __future__ import annotations

from collections.abc import Mapping


class AgentikError(Exception):
    """Root of every error agentik raises on purpose."""


class StoreError(AgentikError):
    """A storage operation failed; nothing of it was applied (but for a
    ``CommitInDoubt``)."""


class CommitInDoubt(StoreError):
    """A write's COMMIT failed on the way (the connection lost during COMMIT;
    SQLite: its log written, its sync failed): the write may have been
    applied, whole, or not at all. Reading it back, or a restart, tells which."""


class StoreClosedError(StoreError):
    """The storage bundle is closed, or its writer task died."""


class DuplicateKeyError(StoreError):
    """An idempotency key was already used in this conversation."""


class SchemaVersionError(StoreError):
    """The database was written by a newer agentik, or SQLite is too old."""


class ToolError(AgentikError):
    """A tool definition or a tool call is invalid."""


class ModelBackendError(AgentikError):
    """The model backend failed, timed out, or answered something malformed.

    ``status`` is the HTTP status of the backend's last answer when it gave
    one (429 or 503 say it is rate limited or overloaded); ``retry_after`` the
    seconds its ``Retry-After`` (or ``retry-after-ms``) asked for, if it did;
    ``headers`` that answer's headers, names in lowercase (the
    ``x-ratelimit-*`` headers say how much of its budget is left). A model
    backend of your own may set them too: the model-limits scheduler reads
    them (docs/models.md, "Rate limits and fairness")."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.headers: Mapping[str, str] = {k.lower(): v for k, v in (headers or {}).items()}


class TurnError(AgentikError):
    """A turn could not finish; history stays valid.

    ``code`` says why, for machines: ``step_limit``, ``model_error``,
    ``model_unavailable`` (the backend answered 429 or 503 past its retries:
    rate limited or overloaded; ``retry_after`` is the seconds it asked to
    wait, or None), ``store_error``, ``cancelled``, ``internal_error``,
    ``not_resumable`` (a retried key's turn that did not finish, with later
    turns after it), ``turn_failed``.
    """

    def __init__(
        self, message: str, *, code: str = "turn_failed", retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.retry_after = retry_after
        """Seconds the model backend asked to wait (``model_unavailable``), or None."""


class ApprovalError(AgentikError):
    """A decision about a tool call the agent cannot take.

    ``code``: ``not_waiting`` (no such call waits for a decision),
    ``already_decided`` (it was decided the other way), ``unsupported`` (the
    storage keeps no approvals).
    """

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


class OverloadedError(AgentikError):
    """Too many turns are queued for a conversation or the agent, or the model's
    limits would keep a new turn waiting longer than ``max_queue_wait``; retry
    in ``retry_after`` seconds. Nothing of the refused turn was stored."""

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TooLargeError(AgentikError, ValueError):
    """A skill or a note is larger than its configured limit (``ContentLimits``);
    nothing was stored. A ``ValueError`` too: it is bad input."""


class NotOwnedError(AgentikError):
    """Another live node owns the conversation: its turns run there. The HTTP
    server forwards the request to ``owner_url`` (``[cluster] forward``), or
    answers 307 there (docs/scale-out.md)."""

    def __init__(self, message: str, *, owner_url: str) -> None:
        super().__init__(message)
        self.owner_url = owner_url
        """The base URL the owner advertises (``http://host:port``)."""


class ConfigError(AgentikError):
    """The server's configuration is invalid; the message names the setting.
    Defined here, with the tree, so the CLI can catch it without loading the
    server (``agentik.server`` exports it)."""


class ProtocolViolation(AgentikError):
    """A client sent something the wire protocol does not allow."""

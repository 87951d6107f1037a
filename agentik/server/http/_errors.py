"""HTTP-facing errors: a refusal with its status, raised before any state is touched.

``HttpError`` is a ``ProtocolViolation``: the client sent something the wire
protocol does not allow. The app turns it into a JSON body
``{"error": {"code", "message"}}`` with the status and headers it carries.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentik._errors import ProtocolViolation


class HttpError(ProtocolViolation):
    """A request refused with an HTTP status; ``message`` names the field or limit."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str = "bad_request",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = dict(headers or {})


class Redirect(HttpError):
    """307 to the node that owns the conversation (several nodes on one
    database): the client repeats the same request, method and body, there.
    The app makes ``Location`` from the owner's base URL and this request's
    path and query; with ``[cluster] forward`` it sends the request there
    itself instead (docs/scale-out.md)."""

    def __init__(self, message: str, *, base_url: str) -> None:
        super().__init__(307, message, code="owned_elsewhere")
        self.base_url = base_url.rstrip("/")


class NotHere(HttpError):
    """503: no node can take the conversation's turns right now (its shard is
    being handed off, or this node's lease lapsed) and nothing ran; retry.
    With ``[cluster] forward`` the node waits and asks again itself instead,
    as for an owner that does not answer (docs/scale-out.md)."""

    def __init__(self, message: str, *, code: str = "unavailable") -> None:
        super().__init__(503, message, code=code, headers={"Retry-After": "1"})

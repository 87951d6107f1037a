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

"""Keeping a model backend's credentials out of everything its answers reach.

A backend (or a proxy in front of it) may echo the request's headers back: in
an error body, in a 200 body that is not JSON, even in the model's text. So
the credentials a model sends (the API key, secret-looking headers, a
password in the URL) are replaced by ``***`` in every body and stream line
read from the backend, *before* anything is parsed, clipped or quoted: no
error message, log line, stored message or HTTP answer can then carry them,
not even cut in half. Error messages leaving the model are scrubbed once
more (they quote URLs and transport errors too).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import httpx

from agentik._errors import ModelBackendError

SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "api-key", "x-api-key", "cookie"}
)
MASK = "***"
_MIN_SECRET = 4
"""Shorter values are not credentials worth masking, and masking them would garble text."""


@attrs.frozen
class Redactor:
    """Masks a fixed set of secret strings, longest first."""

    secrets: tuple[str, ...] = attrs.field(repr=False)

    @classmethod
    def for_credentials(cls, api_key: str | None, headers: Mapping[str, str], url: str) -> Redactor:
        found = {api_key or ""}
        for name, value in headers.items():
            if name.lower() in SECRET_HEADERS:
                scheme, _, credentials = value.strip().partition(" ")
                found.add(credentials or scheme)  # "Bearer k" shows as "Bearer ***"
        userinfo = httpx.URL(url).userinfo.decode(errors="replace")
        found |= {userinfo, userinfo.partition(":")[2]}
        found |= {s.strip() for s in found}  # a key read with its newline is quoted without it
        ordered = sorted((s for s in found if len(s) >= _MIN_SECRET), key=len, reverse=True)
        return cls(tuple(ordered))

    def text(self, value: str) -> str:
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, MASK)
        return value

    def data(self, value: bytes) -> bytes:
        for secret in self.secrets:
            raw = secret.encode()
            if raw in value:
                value = value.replace(raw, MASK.encode())
        return value

    def error(self, exc: ModelBackendError) -> ModelBackendError:
        """``exc`` itself when it shows no secret, else a masked copy (without the
        chained causes, whose messages may show it too)."""
        message = str(exc)
        masked = self.text(message)
        return exc if masked == message else ModelBackendError(masked)

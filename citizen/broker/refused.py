"""A request the broker answers itself, in the Messages API's error shape."""

from __future__ import annotations

from citizen.errors import CitizenError


class Refused(CitizenError):
    """Refused with an HTTP status and an API error type (`permission_error`, …)."""

    def __init__(self, status: int, kind: str, message: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.headers = status, kind, headers or {}

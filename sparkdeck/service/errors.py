"""The service's typed errors, apart from its client so the CLI names them without httpx."""

from __future__ import annotations


class ServiceError(Exception):
    """The service answered with an error (its message), or cannot be reached."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class ServiceVersionMismatch(ServiceError):
    """The service and this front end are different sparkdeck versions."""

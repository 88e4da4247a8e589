"""The sparkdeck service: one long-running process per user that owns sparkdeck's engine.

It launches, stops and adopts the engine, runs the memory watchdog for as long as a sparkdeck
engine runs (whoever launched it), samples the machine and the engine, and serves a local
HTTP + JSON API with an event stream over a Unix socket that only its user can open. Front
ends (the CLI, the TUI) are its clients when it runs. See docs/service.md.

The service's typed errors live here, apart from its client, so that the CLI names them
without importing httpx.
"""

from __future__ import annotations


class ServiceError(Exception):
    """The service answered with an error (its message), or cannot be reached."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class ServiceVersionMismatch(ServiceError):
    """The service and this front end are different sparkdeck versions."""

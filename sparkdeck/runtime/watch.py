"""Docker's own event stream for sparkdeck's containers: a change is known when it happens.

The service's guard follower waits on this instead of asking Docker twice a second (that
polling alone cost ~0.4 % of a core on an idle box). The stream has no read timeout: it is
quiet for as long as nothing changes. It ends when the daemon goes away; the caller then
falls back to polling and reconnects.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from sparkdeck.runtime.errors import DockerRuntimeError
from sparkdeck.runtime.state import MANAGED, SCOPE

if TYPE_CHECKING:
    from sparkdeck.runtime.client import DockerRuntime


class EngineEvents:
    """Iterate for one item per Docker event on sparkdeck's containers in this scope
    (create, start, die, destroy, ...): the action's name. `close()` ends the iteration from
    another thread."""

    def __init__(self, runtime: DockerRuntime) -> None:
        try:
            self._stream = runtime.client.events(
                decode=True,
                filters={
                    "type": "container",
                    "label": [f"{MANAGED}=true", f"{SCOPE}={runtime.scope}"],
                },
            )
        except Exception as exc:  # noqa: BLE001 - any SDK failure: no stream, poll instead
            raise DockerRuntimeError(f"cannot follow Docker's events: {exc}") from None

    def __iter__(self) -> Iterator[str]:
        try:
            for event in self._stream:
                yield str(event.get("Action") or event.get("status") or "")
        except Exception:  # noqa: BLE001 - the daemon went away mid-stream: the end
            return

    def close(self) -> None:
        try:
            self._stream.close()
        except Exception:  # noqa: BLE001 - already closed
            pass

"""The flight recorder in the service: every telemetry sample, with the engine's state and
tok/s, kept whether or not a window is open (sparkdeck.recorder holds the how and why).

Opening the recording tells whether the previous service ended uncleanly (a freeze, a power
cut, a kill -9); its post-mortem is published to the clients and kept for /v2/status. A
recording that cannot be opened (a second recorder, a broken file) costs the service nothing
else: the guard runs on, and the reason is published and printed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sparkdeck.service.hub import EventHub

if TYPE_CHECKING:
    from sparkdeck.config.settings import Settings
    from sparkdeck.recorder.store import FlightRecorder
    from sparkdeck.service.engine_metrics import EngineMetricsLoop
    from sparkdeck.service.owner import EngineOwner
    from sparkdeck.telemetry.sampler import TelemetrySnapshot


log = logging.getLogger("sparkdeck.service")


class ServiceRecording:
    def __init__(
        self, recorder: FlightRecorder, owner: EngineOwner, metrics: EngineMetricsLoop
    ) -> None:
        self.recorder = recorder
        self.owner = owner
        self.metrics = metrics
        self.failed = False

    @classmethod
    def open(
        cls, hub: EventHub, owner: EngineOwner, metrics: EngineMetricsLoop, settings: Settings
    ) -> ServiceRecording | None:
        from sparkdeck.recorder.store import FlightRecorder, RecorderError, RecorderLimits

        try:
            recorder, postmortem = FlightRecorder.open(
                limits=RecorderLimits.from_settings(settings.recorder), guard=settings.guard
            )
        except (RecorderError, OSError) as exc:
            log.warning("the flight recorder is off: %s", exc)
            hub.publish("note", text=f"the flight recorder is off: {exc}")
            return None
        if postmortem is not None:
            owner.postmortem = postmortem.to_dict()
            hub.publish("postmortem", **owner.postmortem)
            log.warning("%s", postmortem.text())
        return cls(recorder, owner, metrics)

    def __call__(self, sample: TelemetrySnapshot) -> None:
        latest = self.metrics.latest
        tok_s = latest.generation_tps if latest is not None and latest.ok else None
        try:
            self.recorder.record(sample, self.owner.engine_text(), tok_s)
        except Exception as exc:  # noqa: BLE001 - a full disk must not stop the sampling
            if not self.failed:
                self.failed = True
                self.owner.hub.publish("note", text=f"the flight recorder failed: {exc}")

    def close(self) -> None:
        self.recorder.close()  # the clean-stop mark: the next start writes no post-mortem

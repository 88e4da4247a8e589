"""The flight recorder: 1 Hz telemetry kept in SQLite so it survives a freeze, and the
post-mortem written after an unclean end (store.py, postmortem.py; reading in query.py)."""

from sparkdeck.recorder.postmortem import PostMortem
from sparkdeck.recorder.store import FlightRecorder, RecorderBusy, RecorderError, RecorderLimits

__all__ = ["FlightRecorder", "PostMortem", "RecorderBusy", "RecorderError", "RecorderLimits"]

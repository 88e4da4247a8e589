"""The H200 clock-event recording (tests/fixtures/nvml/h200_clock_events.json, RECORDED on a
lent H200) and FAKE copies of it with one sample's mask, utilisation or clock changed.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"
EVENTS = FIXTURES / "h200_clock_events.json"
RECORDING: dict[str, Any] = json.loads(EVENTS.read_text())
REASONS_CALL = "nvmlDeviceGetCurrentClocksEventReasons(gpu0)"


def phase_indices(recording: dict[str, Any], phase: str) -> list[int]:
    return [i for i, s in enumerate(recording["samples"]) if s["phase"] == phase]


def doctored(
    base: dict[str, Any],
    index: int,
    *,
    mask: int | str | None = None,
    util: int | None = None,
    sm: int | None = None,
) -> dict[str, Any]:
    """FAKE: a copy of a recording whose sample `index` answers a different clock-event mask
    ("unsupported" for NOT_SUPPORTED), utilisation or SM clock."""
    data = copy.deepcopy(base)
    calls = data["samples"][index]["calls"]
    if mask == "unsupported":
        calls[REASONS_CALL] = {
            "__error__": "NVML_ERROR_NOT_SUPPORTED",
            "code": 3,
            "message": "Not Supported",
        }
    elif mask is not None:
        calls[REASONS_CALL] = mask
    if util is not None:
        calls["nvmlDeviceGetUtilizationRates(gpu0)"]["gpu"] = util
    if sm is not None:
        calls["nvmlDeviceGetClockInfo(gpu0, 1)"] = sm
    data["_note"] = "FAKE: " + data.get("_note", "")
    return data


LOAD = phase_indices(RECORDING, "load")[0]

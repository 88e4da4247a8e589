"""The engine card: the one engine's state (stopped / pulling / starting / ready / crashed /
stopping), a pull progress bar, its address and uptime.

The state comes from two sources: Docker's reading (polled) and, while a launch or stop runs,
the launch flow's own events, which say more (a pull is invisible to Docker's container list).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from textual.content import Content
from textual.reactive import reactive

from sparkdeck.launch.stop_countdown import DEFAULT_GRACE_S, grace_text
from sparkdeck.runtime.state import docker_time
from sparkdeck.telemetry.view import Bar, Row
from sparkdeck.ui.machine.live import LiveText, bar_content, rows_content
from sparkdeck.ui.readers import EngineReading

if TYPE_CHECKING:
    from sparkdeck.runtime.state import EngineState

LOG_LINES_SHOWN = 3
# no telemetry sample drawn for this long (they come every second): the card ticks by itself
SAMPLES_LATE_S = 1.5


@dataclass(frozen=True)
class EngineReport:
    """What the card shows: the latest Docker reading and the running launch step, if any."""

    reading: EngineReading | None = None  # None until Docker has answered once
    docker_error: str | None = None
    docker_not_answering: bool = False  # the daemon took the call and never replied
    last_seen: str = ""  # the engine Docker last reported, while Docker cannot be asked
    phase: str | None = None  # launching, pulling, stopping, starting: set by the launch flow
    detail: str = ""  # what the phase is doing, e.g. the image being pulled
    pull_fraction: float | None = None
    guard_stop: str | None = None  # the running watchdog stopped the engine: why (until a launch)
    # During a launch or stop the card names both engines of a switch, each with its own
    # numbers: the one being stopped (`previous`) and the preset being launched.
    previous: EngineState | None = None
    launching: str = ""
    # A stop's SIGTERM went out: SIGKILL at this wall-clock time (the card counts down to it)
    stop_deadline: float | None = None
    stop_grace: float = DEFAULT_GRACE_S


@dataclass(frozen=True)
class DockerFailure:
    """The Docker daemon could not be reached; `error` says why and what to do.
    `not_answering`: it took the call but sent no reply in time (stopped or hung)."""

    error: str
    not_answering: bool = False


def failed_report(report: EngineReport, error: str, not_answering: bool) -> EngineReport:
    """The card after Docker failed to answer an engine read (`not_answering`: it took the
    call and never replied): a launch's own phase keeps its place; otherwise what Docker said
    last is kept only as "last seen", never as a state or an uptime."""
    engine = report.reading.engine if report.reading else None
    last = (
        f"{engine.preset_id or engine.name}  {engine.kind}  {engine.base_url}"
        if engine is not None
        else report.last_seen
    )
    if report.phase is not None:
        return replace(report, docker_error=error, docker_not_answering=not_answering)
    return EngineReport(
        docker_error=error,
        docker_not_answering=not_answering,
        last_seen=last,
        guard_stop=report.guard_stop,
    )


def launch_report(report: EngineReport, preset_id: str) -> EngineReport:
    """The card as a launch of `preset_id` begins: the running engine (if any) is the one a
    switch will stop; the `reading` slot waits for the new container."""
    engine = report.reading.engine if report.reading else None
    return EngineReport(
        phase="launching",
        detail="checking the plan",
        launching=preset_id,
        previous=engine if engine is not None and engine.alive else None,
    )


def stop_report(report: EngineReport, now: float) -> EngineReport:
    """The card as a stop begins: the engine is named as the one being stopped, and the
    grace period counts down from `now` (the service's, and the default, grace; a stop run
    here corrects it with its SIGTERM's own time)."""
    engine = report.reading.engine if report.reading else None
    alive = engine is not None and engine.alive
    return EngineReport(
        phase="stopping",
        detail="asking Docker to stop it",
        previous=engine if alive else None,
        stop_deadline=now + DEFAULT_GRACE_S if alive else None,
    )


def uptime_text(seconds: float) -> str:
    """Whole minutes, as `docker ps` and k9s give an age: a ready engine's card then changes
    once a minute, not every second. Its seconds were a repaint a second of the card and of
    the presets beside it (the frame's box around the rows that changed spanned both
    columns) for a figure nobody reads to the second: docs/performance.md, 2026-12-05."""
    minutes = max(0, int(seconds)) // 60
    if not minutes:
        return "under a minute"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m"


def card_state(report: EngineReport) -> tuple[str, str]:
    """The state word and its level: the launch flow's phase wins over Docker's reading."""
    if report.phase is not None:
        return report.phase, "warning"
    reading = report.reading
    if reading is None or reading.engine is None:
        return "stopped", "muted"
    status = reading.status
    if status == "ready":
        return status, "success"
    if reading.engine.crashed:
        return status, "error"
    return status, "warning"


def docker_content(report: EngineReport) -> Content:
    """The card while Docker cannot be asked: no state, uptime or "ready" it cannot know."""
    if not report.docker_not_answering:
        return Content.assemble(
            ("Docker unreachable", "bold $error"), ": no engine can be read (see environment)"
        )
    rows = [Row("state", "unknown: Docker does not reply", "warning")]
    if report.last_seen:
        rows.append(Row("last", f"seen: {report.last_seen}", "muted"))
    rows.append(
        Row(
            "guard",
            "keeps watching memory; it kills the engine's processes directly if it must",
            "muted",
        )
    )
    return Content("\n").join(
        [Content.styled("Docker is not answering", "bold $error"), rows_content(rows)]
    )


def _previous_rows(report: EngineReport) -> list[Row]:
    """The engine a launch or stop is taking down: its own preset and address, no uptime
    (a number that is about to stop meaning anything)."""
    engine = report.previous
    if engine is None:
        return []
    label = "stopping" if report.phase == "stopping" else "running"
    return [
        Row(label, f"{engine.preset_id or engine.name}  {engine.kind}"),
        Row("address", engine.base_url, "muted"),
    ]


def engine_content(report: EngineReport, now: float) -> Content:
    """The card's text at wall-clock time `now` (epoch seconds)."""
    if report.docker_error is not None and report.phase is None:
        return docker_content(report)
    if report.reading is None and report.phase is None:
        return Content.styled("checking…", "$text-muted")
    state, level = card_state(report)
    rows = [Row("state", state, level)]
    parts = [rows_content(rows)]
    if report.phase == "pulling":
        fraction = report.pull_fraction
        text = "waiting for sizes" if fraction is None else f"{fraction * 100:.0f} %"
        parts.append(bar_content(Bar("pull", fraction or 0.0, text)))
    if report.detail:
        parts.append(rows_content([Row("step", report.detail, "muted")]))
    if report.phase is not None and report.stop_deadline is not None:
        elapsed = now - (report.stop_deadline - report.stop_grace)
        parts.append(
            rows_content([Row("grace", grace_text(report.stop_grace, elapsed), "warning")])
        )
    if report.guard_stop:
        parts.append(rows_content([Row("guard", report.guard_stop, "error")]))
    if report.phase is not None:
        rows = _previous_rows(report)
        if report.launching and report.reading is None:
            rows.append(Row("next", report.launching))
        if rows:
            parts.append(rows_content(rows))
    engine = report.reading.engine if report.reading else None
    if engine is not None:
        info = [
            Row("preset", f"{engine.preset_id or '(unlabelled)'}  {engine.kind}"),
            Row("address", engine.base_url),
        ]
        if engine.on_lan:  # lan = true: the 127.0.0.1 address alone would hide that
            info.append(
                Row(
                    "LAN",
                    f"also on {engine.published_on}: anyone on the network can use it",
                    "warning",
                )
            )
        started = docker_time(engine.started_at)
        if engine.alive and started is not None:
            info.append(Row("uptime", uptime_text(now - started)))
        if engine.model:
            info.append(Row("model", engine.model, "muted"))
        parts.append(rows_content(info))
        if engine.crashed and engine.log_tail:
            parts.append(rows_content([Row("last log", "")]))
            parts += [
                Content.styled(f"  {line}", "$text-muted")
                for line in engine.log_tail[-LOG_LINES_SHOWN:]
            ]
    return Content("\n").join(parts)


def failure_content(failure: str, log: tuple[str, ...] = ()) -> Content:
    """The last failed launch (last-launch-failure.json), shown until the user dismisses it,
    with the engine's last log lines (already cleaned): the reason is usually in them."""
    parts = [rows_content([Row("failed", failure, "error")])]
    if log:
        parts.append(rows_content([Row("last log", "")]))
        parts += [Content(f"  {line}") for line in log]
    parts.append(
        Content.styled(
            "  x dismisses this (or `sparkdeck dismiss`); "
            "`sparkdeck logs --last-failure` has every kept line",
            "$text-muted",
        )
    )
    return Content("\n").join(parts)


class EngineCard(LiveText):
    """Renders an EngineReport; ticks once a second only while an uptime (or a stop's grace)
    is shown. A tick repaints only the text that changed (a new minute of uptime, a second of
    grace) and nothing when none did, and lays out only when the card's height changes
    (LiveText).

    The tick rides on the telemetry samples (`sampled`, once a second, twice while an engine
    starts or a launch runs), so the uptime moves in the frame that draws the sample: a frame
    of its own each second, half a second off the sample's, was the biggest part of a ready
    engine's idle CPU (benchmarks/tui_idle.py). Its own timer runs only when no sample has
    come for SAMPLES_LATE_S (before the side tabs are mounted, or a stalled sampler), and
    sleeps while samples come: a timer that ticked every second woke the window each second
    only to find that a sample had moved the uptime (the benchmark's CPU figure did not
    show the wake-up: docs/performance.md, 2026-12-05). Each sample pushes the check for
    late samples back; cancelling that check wakes nothing."""

    report: reactive[EngineReport] = reactive(EngineReport())
    failure: reactive[str | None] = reactive(None)  # a failed launch, until dismissed
    failure_log: reactive[tuple[str, ...]] = reactive(())  # its engine's last lines

    def __init__(self, wall_clock: Callable[[], float] = time.time, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._wall_clock = wall_clock
        self._ticking = False  # an uptime or a grace is shown: it moves every second
        self._sampled_at = -SAMPLES_LATE_S  # monotonic time of the last sample drawn
        # the card's next own second, or the check for late samples after one came
        self._next: asyncio.TimerHandle | None = None

    def on_mount(self) -> None:
        self.border_title = "engine"

    def on_unmount(self) -> None:
        self._own_clock(None)

    def sampled(self) -> None:
        """A telemetry sample is being drawn now: the uptime moves in the same frame."""
        self._sampled_at = time.monotonic()
        if self._ticking:
            self._tick()
        self._own_clock(SAMPLES_LATE_S)

    def _own_second(self) -> None:
        """No sample for SAMPLES_LATE_S, or a second after the last own tick."""
        self._next = None
        if self._ticking and time.monotonic() - self._sampled_at >= SAMPLES_LATE_S:
            self._tick()
            self._own_clock(1.0)

    def _own_clock(self, after: float | None) -> None:
        """The card's own second `after` seconds from now (None: none). Pushing it back
        each sample, or cancelling it, wakes nothing: a timer that ticked every second
        did, even when a sample had moved the uptime."""
        if self._next is not None:
            self._next.cancel()
        self._next = (
            None
            if after is None
            else asyncio.get_running_loop().call_later(after, self._own_second)
        )

    def _tick(self) -> None:
        content = engine_content(self.report, self._wall_clock())
        if self.failure:
            content = Content("\n").join([content, failure_content(self.failure, self.failure_log)])
        self.set_text(content)

    def watch_failure(self, failure: str | None) -> None:
        self._tick()

    def watch_failure_log(self, log: tuple[str, ...]) -> None:
        self._tick()

    def watch_report(self, report: EngineReport) -> None:
        self._tick()
        engine = report.reading.engine if report.reading else None
        # an uptime, or a stop's grace counting down
        self._ticking = (engine is not None and engine.alive) or report.stop_deadline is not None
        if not self._ticking:
            self._own_clock(None)
        elif self._next is None:  # until samples come (none yet, or they stalled)
            self._own_clock(1.0)

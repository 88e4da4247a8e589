"""The engine metrics panel alone, inside a tiny host app, driven through Pilot.

The host app is wired the way the real app is asked to be: an async worker running
`sample_forever` posts `MetricsTab.TrailSampled`, the handler stores the trail in a reactive, and
the panel is data-bound to it. The engine is a real HTTP server on loopback whose counters
advance as a real engine's would.
"""

from __future__ import annotations

import time

import pytest
from textual.app import App, ComposeResult
from textual.reactive import reactive
from textual.widgets import Sparkline, Static

from sparkdeck.engines import get_kind
from sparkdeck.metrics.reader import MetricsReader
from sparkdeck.metrics.sampler import MetricsSampler
from sparkdeck.metrics.snapshot import EngineMetrics
from sparkdeck.ui import STYLESHEET
from sparkdeck.ui.metrics.panel import EngineMetricsPanel, Trail
from sparkdeck.ui.metrics.tab import MetricsTab, sample_forever
from tests.support.metrics_loopback import serving

CSS = STYLESHEET


class Host(App):
    CSS_PATH = CSS
    trail: reactive[Trail] = reactive((), always_update=True)

    def __init__(self, sampler: MetricsSampler | None = None) -> None:
        super().__init__()
        self.sampler = sampler

    def compose(self) -> ComposeResult:
        yield EngineMetricsPanel(id="engine-metrics").data_bind(trail=Host.trail)

    def on_mount(self) -> None:
        if self.sampler is not None:
            self.run_worker(
                sample_forever(self.sampler, self.post_message),
                name="engine metrics",
                group="metrics",
                exclusive=True,
                exit_on_error=False,
            )

    def on_metrics_tab_trail_sampled(self, message: MetricsTab.TrailSampled) -> None:
        self.trail = message.trail


def words(app: App, selector: str) -> str:
    return str(app.query_one(selector, Static).render())


def ok(t: float, tps: float | None, running: float, waiting: float, **more) -> EngineMetrics:
    return EngineMetrics(
        "vllm",
        "ok",
        1_800_000_000 + t,
        generation_tps=tps,
        running=running,
        waiting=waiting,
        **more,
    )


async def wait_until(pilot, predicate, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.05)


@pytest.mark.anyio
async def test_panel_renders_numbers_sparklines_and_ceiling():
    app = Host()
    async with app.run_test(size=(100, 30)) as pilot:
        app.trail = (
            ok(0, None, 0, 0),
            ok(1, 120.0, 2, 1),
            ok(
                2,
                480.0,
                4,
                3,
                generation_tps_avg=300.0,
                stream_tps=40.0,
                kv_usage=0.35,
                prefix_hit_rate=0.8,
                ttft_p50_s=0.12,
                ttft_p90_s=1.5,
                ceiling_tps=59.3,
                ceiling_share=40.0 / 59.3,
                spec_acceptance=0.7,
            ),
        )
        await pilot.pause()
        rates = words(app, "#metrics-rates")
        assert "480" in rates and "1 min 300" in rates and "per stream 40.0" in rates
        assert "4 running · 3 waiting" in words(app, "#metrics-queue")
        details = words(app, "#metrics-details")
        for expected in (
            "35%",
            "prefix hits 80%",
            "p50 120 ms",
            "p90 1.50 s",
            "67%",
            "of 59.3 tok/s",
            "spec accept 70%",
        ):
            assert expected in details, (expected, details)
        # The first reading had no rate yet: a gap, not a zero.
        assert list(app.query_one("#tps-sparkline", Sparkline).data) == [120.0, 480.0]
        assert list(app.query_one("#queue-sparkline", Sparkline).data) == [0.0, 3.0, 7.0]


@pytest.mark.anyio
async def test_metrics_off_shows_how_to_switch_them_on():
    app = Host()
    hint = "llama-server serves /metrics only with --metrics: add it"
    async with app.run_test(size=(100, 30)) as pilot:
        app.trail = (EngineMetrics("llamacpp", "metrics-off", 1.0, reason=hint),)
        await pilot.pause()
        assert "metrics are off" in words(app, "#metrics-rates")
        assert hint in words(app, "#metrics-rates")
        assert words(app, "#metrics-details") == ""
        assert not app.query_one("#tps-sparkline").display  # no fake zeros drawn


def _llama_page(served: list[int]) -> tuple[int, bytes]:
    """A llama-server-shaped /metrics whose token counter grows 500 per request."""
    served.append(1)
    return 200, (
        "# TYPE llamacpp:tokens_predicted_total counter\n"
        f"llamacpp:tokens_predicted_total {500 * len(served)}\n"
        "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n"
        "# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 2\n"
    ).encode()


@pytest.fixture
def engine_url():
    served: list[int] = []
    with serving(lambda path: _llama_page(served)) as url:
        yield url


@pytest.mark.anyio
async def test_worker_samples_a_real_http_engine_into_the_panel(engine_url):
    reader = MetricsReader()
    sampler = MetricsSampler(get_kind("llamacpp").metrics_plan(engine_url, "/metrics"), reader)
    app = Host(sampler)
    async with app.run_test(size=(100, 30)) as pilot:
        sparkline = app.query_one("#tps-sparkline", Sparkline)
        await wait_until(pilot, lambda: len(list(sparkline.data or [])) >= 2)
        assert all(value > 0 for value in sparkline.data)
        assert "1 running · 2 waiting" in words(app, "#metrics-queue")
        assert app.trail[-1].kind == "llamacpp" and app.trail[-1].ok
    await reader.aclose()


class TabHost(App):
    CSS_PATH = CSS

    def compose(self) -> ComposeResult:
        yield MetricsTab(id="metrics-body")


@pytest.mark.anyio
async def test_a_target_replaced_before_its_sampler_starts_leaves_no_coroutine_unawaited():
    """Two engines in one handler: the first's worker is cancelled before it runs. Handing
    run_worker a coroutine left that coroutine unawaited (a RuntimeWarning at collection)."""
    import gc
    import warnings

    from sparkdeck.endpoints import Endpoint
    from sparkdeck.ui.readers import ChatTarget

    def engine(port: int) -> ChatTarget:
        url = f"http://127.0.0.1:{port}"
        return ChatTarget(Endpoint("e", url, "llamacpp", "/health", "/metrics", "attached"))

    app = TabHost()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        async with app.run_test() as pilot:
            tab = app.query_one(MetricsTab)
            tab.target = engine(9)  # closed ports: the sampler reads "unreachable", harmless
            tab.target = engine(10)
            await pilot.pause(0.2)
            tab.target = ChatTarget(None)
            await pilot.pause()
        gc.collect()
    unawaited = [w for w in seen if "never awaited" in str(w.message)]
    assert not unawaited, [str(w.message) for w in unawaited]

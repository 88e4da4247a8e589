"""Generated malformed and hostile /metrics bodies never raise out of the reader.

Every body either becomes a valid sample whose normalised numbers are all finite (or None),
or is marked invalid with a reason. A few hundred of them also go through a real HTTP
server on loopback and the real async reader.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkdeck.engines import get_kind
from sparkdeck.metrics.history import MetricsHistory
from sparkdeck.metrics.reader import (
    InvalidSample,
    MetricsReader,
    MetricsTarget,
    RawSample,
    decode_response,
)
from sparkdeck.metrics.snapshot import normalise
from tests.support.metrics_loopback import serving

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"
REAL_LINES = [line for f in sorted(FIXTURES.glob("*.prom")) for line in f.read_text().splitlines()]
NAMES = sorted(
    {
        name
        for kind in ("vllm", "sglang", "llamacpp", "trtllm")
        for name in get_kind(kind).metrics_map.all_names()
    }
)
TARGET = MetricsTarget("http://127.0.0.1:1/metrics", "vllm")

numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            "NaN",
            "+Inf",
            "-Inf",
            "1e308",
            "-1e308",
            "1e999",
            "0x10",
            "",
            "1,5",
            "9" * 400,
            "-0",
            "1_000",
        ]
    ),
    st.integers(min_value=-(10**30), max_value=10**30),
)
label_sets = st.dictionaries(
    st.text("abcdefghijklmnopqrstuvwxyz_le", min_size=1, max_size=6),
    st.one_of(st.text(max_size=8), st.sampled_from(["+Inf", "0.1", "NaN", "abc", '"', "\\"])),
    max_size=40,
)


@st.composite
def lines(draw) -> str:
    choice = draw(st.integers(0, 6))
    name = draw(st.sampled_from([*NAMES, "x", "1bad", "a b", "ünï", ""]))
    if choice == 0:
        return draw(st.sampled_from(REAL_LINES))
    if choice == 1:  # a real line cut short
        line = draw(st.sampled_from(REAL_LINES))
        return line[: draw(st.integers(0, max(len(line) - 1, 0)))]
    if choice == 2:
        labels = draw(label_sets)
        inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
        return f"{name}{{{inner}}} {draw(numbers)}"
    if choice == 3:
        kind = draw(
            st.sampled_from(["counter", "gauge", "histogram", "summary", "untyped", "bogus", ""])
        )
        return f"# TYPE {name.removesuffix('_total').removesuffix('_bucket')} {kind}"
    if choice == 4:
        return f"{name} {draw(numbers)}"
    if choice == 5:
        return draw(st.text(max_size=60))
    return f"# HELP {name} {draw(st.text(max_size=20))}"


bodies = st.one_of(
    st.lists(lines(), max_size=40).map(lambda ls: "\n".join(ls).encode("utf-8", "replace")),
    st.binary(max_size=400),
    st.lists(lines(), max_size=20).map(lambda ls: ("\n".join(ls) * 2).encode()),  # duplicates
)


def check(result: object) -> None:
    if isinstance(result, InvalidSample):
        assert result.reason and isinstance(result.reason, str)
        return
    assert isinstance(result, RawSample)
    for kind in ("vllm", "sglang", "llamacpp", "trtllm"):
        history = MetricsHistory()
        history.add(result)
        history.add(RawSample(result.families, result.wall + 1, result.monotonic + 1))
        m = normalise(history, get_kind(kind).metrics_map, kind, bytes_per_token=1e9)
        for key, value in m.to_dict().items():
            if isinstance(value, float):
                assert math.isfinite(value), (kind, key, value)
        for key in ("kv_usage", "prefix_hit_rate", "spec_acceptance"):
            value = getattr(m, key)
            assert value is None or 0.0 <= value <= 1.0


@settings(max_examples=1200, deadline=None, suppress_health_check=list(HealthCheck))
@given(bodies)
def test_generated_bodies_never_raise(body: bytes) -> None:
    check(decode_response(TARGET, 200, body, 1.0, 1.0))


def test_specific_hostile_bodies_are_invalid_with_a_reason():
    cases = {
        b"\xff\xfe\x00junk": "not UTF-8",
        b"# TYPE a_total counter\na_total -5\n": "below 0",
        b"a_total NaN\n": "finite",
        b"# TYPE b_count counter\nb_count +Inf\n": "finite",
        b"x 1\nx 2\n": "twice",
        b'# TYPE h histogram\nh_bucket{le="abc"} 1\n': "bucket bound",
        b'a{b="c" 1\n': "not Prometheus text",
        b"a 1\x00": "NUL",
    }
    for body, reason in cases.items():
        result = decode_response(TARGET, 200, body, 1.0, 1.0)
        assert isinstance(result, InvalidSample), body
        assert reason in result.reason, (body, result.reason)


@pytest.mark.anyio
async def test_hostile_bodies_through_real_http():
    examples = _examples(150)
    current: list[bytes] = [b""]

    async def scrape_all(target: MetricsTarget) -> list[object]:
        reader = MetricsReader()
        try:
            results = []
            for body in examples:
                current[0] = body
                results.append(await reader.scrape(target))
            return results
        finally:
            await reader.aclose()

    with serving(lambda path: (200, current[0])) as url:
        results = await scrape_all(MetricsTarget(url + "/metrics", "vllm"))
    assert len(results) == len(examples)
    for result in results:
        check(result)
    assert any(isinstance(r, RawSample) for r in results)
    assert any(isinstance(r, InvalidSample) for r in results)


def _examples(count: int) -> list[bytes]:
    found: list[bytes] = []

    @settings(
        max_examples=count, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(bodies)
    def collect(body: bytes) -> None:
        found.append(body)

    collect()
    return found

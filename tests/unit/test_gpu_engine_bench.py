"""The CPU-side parts of benchmarks/gpu_engine.py (the GPU run is by hand: docs/performance.md):
argument handling, llama-bench's JSON, nvidia-smi's CSV, matching readings to the samples of
the same moment, metrics windows, the server log's launch-to-clock gaps, ratios and the table."""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import datetime
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_engine", REPO / "benchmarks" / "gpu_engine.py")
ge = importlib.util.module_from_spec(_spec)
sys.modules["gpu_engine"] = ge  # dataclasses look their module up while the class is made
_spec.loader.exec_module(ge)


def test_args_defaults_and_validation(tmp_path):
    sdist = tmp_path / "s.tar.gz"
    sdist.write_bytes(b"x")
    args = ge.parse_args(["--sdist", str(sdist), "--work", str(tmp_path / "w")])
    assert args.concurrency == (1, 2, 4, 8)
    assert (args.prompt_tokens, args.output_tokens) == (512, 128)
    assert args.out == tmp_path / "w" / "out"
    assert ge.parse_args(
        ["--sdist", str(sdist), "--work", str(tmp_path), "--concurrency", "1,16"]
    ).concurrency == (1, 16)
    for bad in (
        ["--concurrency", "0,2"],
        ["--concurrency", "1,1"],
        ["--concurrency", "a"],
        ["--prompt-tokens", "0"],
        ["--idle-seconds", "nan"],
        ["--port", "70000"],
    ):
        with pytest.raises(SystemExit):
            ge.parse_args(["--sdist", str(sdist), "--work", str(tmp_path), *bad])
    with pytest.raises(SystemExit):  # no build yet and no sdist
        ge.parse_args(["--work", str(tmp_path / "empty")])
    (tmp_path / "built" / "bin").mkdir(parents=True)
    (tmp_path / "built" / "bin" / "llama-server").write_text("")
    assert ge.parse_args(["--work", str(tmp_path / "built")]).sdist is None


def test_llama_bench_json():
    text = json.dumps(
        [
            {"n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 11133.9, "stddev_ts": 942.5},
            {"n_prompt": 0, "n_gen": 128, "n_depth": 0, "avg_ts": 240.5, "stddev_ts": 1.0},
            {"n_prompt": 0, "n_gen": 128, "n_depth": 512, "avg_ts": 237.6, "stddev_ts": 0.8},
            {"n_prompt": 512, "n_gen": 128, "n_depth": 0, "avg_ts": 999.0},
        ]
    )  # pg: left out
    assert ge.parse_llama_bench(text) == {
        ("pp", 0): (11133.9, 942.5),
        ("tg", 0): (240.5, 1.0),
        ("tg", 512): (237.6, 0.8),
    }


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


def test_smi_csv_and_reasons():
    t = 1_796_300_000.25
    text = (
        f"{_stamp(t)}, 1980, 3201, 337.49, 44, 0x0000000000000000\n"
        f"{_stamp(t + 0.5)}, 345, 3201, 78.36, 36, 0x0000000000000001\n"
        "garbage line\n"
        f"{_stamp(t + 1)}, [N/A], 3201, 80.0, 36, 0x0000000000000204\n"
    )
    s = ge.parse_smi_csv(text)
    assert len(s) == 3
    assert abs(s[0].t - t) < 0.002 and s[0].sm_mhz == 1980 and s[0].power_w == 337.49
    assert s[0].reasons == () and s[1].reasons == ("idle",)
    assert s[2].sm_mhz is None
    assert s[2].reasons == ("SW power cap", "board limit")


def _smi(t, sm=1980, power=300.0, temp=45, reasons=()):
    return ge.SmiSample(t, sm, 3201, power, temp, reasons)


def _reading(t, sm=1980, power=300.0, temp=45, reasons=()):
    return ge.Reading(t, sm, 3201, power, temp, reasons)


def test_compare_uses_the_samples_around_the_same_moment():
    smi = [_smi(10.0, power=300.0), _smi(10.5, power=340.0, sm=1965), _smi(11.0, power=360.0)]
    tallies = ge.compare_readings([_reading(10.2, power=320.0)], smi)
    assert tallies["power_w"].agreed == 1 and tallies["power_w"].verdict == "ok"
    assert tallies["sm_mhz"].agreed == 1  # 1980 within [1965, 1980]
    # outside the bracket by more than a step: a disagreement, measured
    tallies = ge.compare_readings(
        [_reading(10.2, power=345.0, sm=1935, temp=40, reasons=("idle",))], smi
    )
    assert tallies["power_w"].verdict == "DIFFERS" and tallies["power_w"].worst == 5.0
    assert tallies["sm_mhz"].verdict == "DIFFERS"  # 30 MHz below 1965: two steps
    assert tallies["temp_c"].verdict == "DIFFERS"
    assert tallies["reasons"].verdict == "DIFFERS"
    # a reading with no sample within a second is not compared at all
    assert ge.compare_readings([_reading(20.0)], smi)["power_w"].compared == 0
    # one step of slack, not more
    assert ge.compare_readings([_reading(10.2, sm=1950)], smi)["sm_mhz"].verdict == "ok"


def test_reading_conversions():
    line = {
        "gpu": {
            "taken_at": 100.0,
            "gpus": [
                {
                    "sm_clock_mhz": 1980,
                    "mem_clock_mhz": 3201,
                    "power_w": 337.5,
                    "temperature_c": 46,
                    "clock_event_reasons": ["SW power cap"],
                }
            ],
        }
    }
    r = ge.reading_from_telemetry(line, 1000.0)
    assert r.t == 1100.0 and r.reasons == ("SW power cap",) and r.power_w == 337.5
    assert ge.reading_from_telemetry({"gpu": {"taken_at": 1, "gpus": []}}, 0) is None
    row = ge.reading_from_recorder(
        {
            "t": 5.0,
            "gpu_sm_mhz": 345,
            "gpu_mem_mhz": 3201,
            "gpu_power_w": 78.0,
            "gpu_temp_c": 36,
            "gpu_reasons": "idle,SW power cap",
        }
    )
    assert row.reasons == ("idle", "SW power cap")
    assert ge.reading_from_recorder({"t": 5.0, "gpu_reasons": ""}).reasons == ()
    assert ge.reading_from_recorder({"t": 5.0, "gpu_reasons": None}).reasons is None


def test_metrics_window_and_weighted_mean():
    scrapes = [(0.0, {"c": 0.0}), (1.0, {"c": 100.0}), (2.0, {"c": 100.0}), (3.1, {"c": 400.0})]
    assert ge.window_rate(scrapes, 1.05, 3.0, "c") == pytest.approx(300 / 2.1)
    assert ge.window_rate(scrapes, 3.0, 1.0, "c") is None
    assert ge.window_rate(scrapes, 0.0, 3.0, "missing") is None
    samples = [
        {"wall": 0.0, "r": 999.0},
        {"wall": 1.0, "r": 100.0},
        {"wall": 4.0, "r": 200.0},
        {"wall": 5.0, "r": None},
    ]
    assert ge.time_weighted_mean(samples, "r") == pytest.approx((100 * 1 + 200 * 3) / 4)
    assert ge.time_weighted_mean(samples[:1], "r") is None
    prom = (
        "# HELP x\nllamacpp:tokens_predicted_total 1234\n"
        'llamacpp:requests_processing{model="m"} 4\nbad line here\n'
    )
    assert ge.parse_prometheus(prom) == {
        "llamacpp:tokens_predicted_total": 1234.0,
        "llamacpp:requests_processing": 4.0,
    }


def test_server_log_gaps():
    log = """0.26.706.178 I slot get_availabl: id  5 | task -1 | selected slot by LRU
0.26.706.297 I slot launch_slot_: id  5 | task 278 | processing task, is_child = 0
0.27.420.259 I slot print_timing: id  5 | task 278 |       total time =     650.03 ms /   640 tokens
0.27.420.358 I slot      release: id  5 | task 278 | stop processing: n_tokens = 639
1.02.000.000 I slot launch_slot_: id  1 | task 9 | processing task
1.03.000.500 I slot print_timing: id  1 | task 9 |       total time =     1000.00 ms /   1 tokens
1.03.000.500 I slot      release: id  1 | task 9 | stop processing
"""
    gaps = ge.server_setup_gaps(log)
    assert gaps == [pytest.approx(714.061 - 650.03), pytest.approx(0.5)]


def test_ratios_verdicts_and_table():
    assert ge.ratio(97.0, 100.0) == pytest.approx(0.97)
    assert ge.ratio(1.0, 0.0) is None and ge.ratio(None, 1.0) is None
    assert ge.within_pct(97.0, 100.0, 3) == "ok"
    assert ge.within_pct(96.9, 100.0, 3) == "MISSES"
    assert ge.within_pct(103.5, 100.0, 3) == "MISSES"
    assert ge.within_abs(0.054, 0.049, 0.005) == "ok"
    assert ge.within_abs(0.0551, 0.049, 0.005) == "MISSES"
    assert ge.within_pct(None, 1.0, 3) == "n/a"
    run = {
        "config": {"output_tokens": 128},
        "points": [
            {
                "concurrency": 2,
                "ttft_s": 0.2,
                "decode_tps": 190.0,
                "prefill_tps": 2400.0,
                "summary": {},
            },
            {
                "concurrency": 1,
                "ttft_s": 0.116,
                "decode_tps": 213.0,
                "prefill_tps": 4419.0,
                "summary": {
                    "server_decode_tps": {"median": 213.0},
                    "server_prefill_tps": {"median": 10443.0},
                    "prompt_tokens": {"median": 512.0},
                },
            },
        ],
    }
    lb = {("pp", 0): (11134.0, 900.0), ("tg", 0): (240.5, 1.0), ("tg", 512): (237.6, 0.8)}
    rows = ge.bench_rows(run, lb, 512)
    by = {r.figure: r for r in rows}
    decode = by["c=1 decode tok/s (per request)"]  # the first: against llama-bench
    assert rows[0].reference == 237.6 and rows[0].verdict == "MISSES"  # depth 512 preferred
    assert "depth 512" in rows[0].source
    assert by["c=1 TTFT ms"].reference == pytest.approx(512 / 10443.0 * 1000)
    assert by["c=1 TTFT ms"].verdict == "MISSES"
    assert by["c=2 TTFT ms"].verdict == ""  # targets are for c=1 only
    assert decode.ratio is not None
    table = ge.render_table(rows)
    lines = table.splitlines()
    assert lines[0].startswith("| figure | sparkdeck | reference | ratio")
    assert len(lines) == 2 + len(rows)
    assert "| 0.896 |" in table  # 213 / 237.6
    assert "| n/a |" in table  # c=2 has no server figures
    assert ge.cpu_percent(100, 148, 16.0) == pytest.approx(3.0)
    with pytest.raises(ValueError):
        ge.cpu_percent(0, 1, 0.0)

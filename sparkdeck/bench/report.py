"""Stored benchmark results for people and programs: one run's table and the history list
for the terminal, and CSV (one row per run and concurrency level) or JSON (everything)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import IO, Any

from sparkdeck.bench.store import StoredPoint, StoredRun
from sparkdeck.host.meminfo import gib
from sparkdeck.text_safety import excerpt


def _num(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def _spread(summary: dict[str, Any], name: str, scale: float = 1.0) -> str:
    figure = summary.get(name) or {}
    stdev = figure.get("stdev")
    return "" if stdev is None else f" ±{stdev * scale:.1f}"


def point_row(p: StoredPoint) -> list[str]:
    return [
        str(p.concurrency),
        _num(p.ttft_s, 1000.0) + _spread(p.summary, "ttft_s", 1000.0),
        _num(p.prefill_tps, digits=0) + _spread(p.summary, "prefill_tps"),
        _num(p.decode_tps) + _spread(p.summary, "decode_tps"),
        _num(p.total_output_tps),
        _num(p.total_decode_tps),
        f"{p.errors}/{p.requests}",
    ]


HEADERS = [
    "conc",
    "TTFT ms",
    "prefill tok/s",
    "decode tok/s/req",
    "total out tok/s",
    "total decode tok/s",
    "errors",
]


def _table(rows: Sequence[Sequence[str]], out: IO[str], left: tuple[int, ...] = ()) -> None:
    """Columns padded to their widest cell; numbers to the right, `left` columns (text)
    to the left, header cells aligned like their column so each heads its values."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [
            cell.ljust(w) if i in left else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=False))
        ]
        print("  ".join(cells).rstrip(), file=out)


def print_run(run: StoredRun, out: IO[str]) -> None:
    fp, cfg, plan = run.fingerprint, run.config, run.prompt_plan or {}
    version = f" ({fp.engine_version})" if fp.engine_version else ""
    print(
        f"run {run.id}: {fp.label} {fp.kind}{version}, model {fp.model}: {run.status}"
        + (f" ({run.reason})" if run.reason else ""),
        file=out,
    )
    cache = "on" if cfg.get("prefix_cache") else "off"
    depth = (
        f", depth {cfg['depth_tokens']} (prefix cache {cache})" if cfg.get("depth_tokens") else ""
    )
    print(
        f"prompt {plan.get('total_tokens', cfg['prompt_tokens'])} tokens (counted by "
        f"{plan.get('counted_by', '?')}), output {cfg['output_tokens']} tokens, "
        f"{cfg['runs']} run(s) per level{depth}",
        file=out,
    )
    if run.points:
        _table([HEADERS, *(point_row(p) for p in run.points)], out)
        for line in error_lines(run.points):
            print(line, file=out)
        print_server_figures(run.points, out)
    peaks = run.peaks or {}
    if peaks.get("samples"):
        used, low = peaks.get("peak_used_bytes"), peaks.get("min_available_bytes")
        print(
            "memory: peak used "
            + (gib(used) if used is not None else "n/a")
            + ", lowest MemAvailable "
            + (gib(low) if low is not None else "n/a")
            + f", PSI some avg10 max {_num(peaks.get('max_some_avg10'))}, full avg10 max "
            f"{_num(peaks.get('max_full_avg10'))}, full stall rate max "
            f"{_num(peaks.get('max_full_rate_pct'))} % ({peaks['samples']} samples)",
            file=out,
        )
    if peaks.get("throttled_samples"):
        print(
            f"GPU throttled during the run ({', '.join(peaks.get('throttle') or ())}) in "
            f"{peaks['throttled_samples']} of {peaks.get('gpu_samples')} samples: these "
            "figures are below what the GPU gives at full clocks",
            file=out,
        )
    for problem in peaks.get("problems") or ():
        print(f"note: {problem}", file=out)
    for warning in run.warnings:
        print(f"warning: {warning}", file=out)


def error_lines(points: Sequence[StoredPoint]) -> list[str]:
    """Each level with failed requests: how many, and what the engine said (cleaned: the
    message is the server's)."""
    lines = []
    for p in points:
        if not p.errors:
            continue
        message = p.summary.get("error_message")
        said = (
            (
                f": {excerpt(message, 300)}"
                + (
                    f" ({p.summary.get('error_count')} of them)"
                    if p.summary.get("error_count") != p.errors
                    else ""
                )
            )
            if message
            else ""
        )
        lines.append(f"c={p.concurrency}: {p.errors} of {p.requests} requests failed{said}")
    return lines


PREFILL_NOTE = (
    "prefill tok/s above is the prompt over the TTFT the client saw (sending, "
    "queueing, prompt processing and the first token together); the server's prompt "
    "rate counts its prompt processing alone, so on small prompts it is much higher: "
    "both are right"
)


def _median(summary: dict[str, Any], name: str) -> float | None:
    return (summary.get(name) or {}).get("median")


def print_server_figures(points: Sequence[StoredPoint], out: IO[str]) -> None:
    """The server's own per-request figures beside the client's, where it reported them."""
    parts = [
        f"c={p.concurrency} decode {_num(_median(p.summary, 'server_decode_tps'))} "
        f"tok/s/req, prompt {_num(_median(p.summary, 'server_prefill_tps'), digits=0)} "
        "tok/s"
        for p in points
        if _median(p.summary, "server_decode_tps") is not None
        or _median(p.summary, "server_prefill_tps") is not None
    ]
    if parts:
        print("server's own (llama.cpp timings, median per request): " + "; ".join(parts), file=out)
    windows = [
        f"c={p.concurrency} TTFT {_num(p.summary.get('server_ttft_s'), 1000, 0)} ms, "
        f"decode {_num(p.summary.get('server_stream_decode_tps'))} tok/s/stream"
        for p in points
        if p.summary.get("server_ttft_s") is not None
        or p.summary.get("server_stream_decode_tps") is not None
    ]
    if windows:
        print(
            "server's own (latency histograms, mean over the level): " + "; ".join(windows),
            file=out,
        )
    if parts or windows:
        print(f"note: {PREFILL_NOTE}", file=out)


def print_history(runs: Sequence[StoredRun], out: IO[str]) -> None:
    if not runs:
        print("no benchmark runs stored yet (`sparkdeck bench` makes one)", file=out)
        return
    rows = [["run", "started", "status", "engine", "model", "prompt/output", "best total tok/s"]]
    for run in runs:
        best = max((p.total_output_tps for p in run.points if p.total_output_tps), default=None)
        rows.append(
            [
                str(run.id),
                run.started_at,
                run.status,
                run.fingerprint.label,
                run.fingerprint.model,
                f"{run.config.get('prompt_tokens')}/{run.config.get('output_tokens')}",
                _num(best),
            ]
        )
    _table(rows, out, left=(1, 2, 3, 4))  # started, status, engine, model are text


CSV_COLUMNS = (
    "run_id",
    "started_at",
    "status",
    "reason",
    "label",
    "kind",
    "model",
    "engine_version",
    "preset_id",
    "image",
    "image_id",
    "argv",
    "fingerprint",
    "prompt_tokens",
    "output_tokens",
    "depth_tokens",
    "prefix_cache",
    "runs",
    "concurrency",
    "requests",
    "errors",
    "ttft_median_s",
    "decode_median_tps",
    "prefill_median_tps",
    "total_output_tps",
    "total_decode_tps",
    "ttft_stdev_s",
    "decode_stdev_tps",
    "peak_used_bytes",
    "min_available_bytes",
    "max_psi_some_avg10",
    "max_psi_full_avg10",
    "gpu_throttle",
)


def _stdev(summary: dict, name: str) -> float | None:
    figure = summary.get(name) or {}
    return figure.get("stdev")


def to_csv(runs: Sequence[StoredRun]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for run in runs:
        fp, cfg, peaks = run.fingerprint, run.config, run.peaks or {}
        common = {
            "run_id": run.id,
            "started_at": run.started_at,
            "status": run.status,
            "reason": run.reason or "",
            "label": fp.label,
            "kind": fp.kind,
            "model": fp.model,
            "engine_version": fp.engine_version or "",
            "preset_id": fp.preset_id or "",
            "image": fp.image or "",
            "image_id": fp.image_id or "",
            "argv": " ".join(fp.argv),
            "fingerprint": fp.key,
            "prompt_tokens": cfg.get("prompt_tokens"),
            "output_tokens": cfg.get("output_tokens"),
            "depth_tokens": cfg.get("depth_tokens"),
            "prefix_cache": cfg.get("prefix_cache"),
            "runs": cfg.get("runs"),
            "peak_used_bytes": peaks.get("peak_used_bytes"),
            "min_available_bytes": peaks.get("min_available_bytes"),
            "max_psi_some_avg10": peaks.get("max_some_avg10"),
            "max_psi_full_avg10": peaks.get("max_full_avg10"),
            # the throttle kinds seen during the run; empty = never held back (or no GPU)
            "gpu_throttle": " ".join(k.replace(" ", "-") for k in peaks.get("throttle") or ()),
        }
        for p in run.points or ():
            writer.writerow(
                {
                    **common,
                    "concurrency": p.concurrency,
                    "requests": p.requests,
                    "errors": p.errors,
                    "ttft_median_s": p.ttft_s,
                    "decode_median_tps": p.decode_tps,
                    "prefill_median_tps": p.prefill_tps,
                    "total_output_tps": p.total_output_tps,
                    "total_decode_tps": p.total_decode_tps,
                    "ttft_stdev_s": _stdev(p.summary, "ttft_s"),
                    "decode_stdev_tps": _stdev(p.summary, "decode_tps"),
                }
            )
        if not run.points:  # a run stopped before any level finished still shows up
            writer.writerow(common)
    return out.getvalue()


def to_json(runs: Sequence[StoredRun]) -> str:
    return json.dumps({"runs": [r.to_dict() for r in runs]}, indent=2)


FORMATS = {"csv": to_csv, "json": to_json}

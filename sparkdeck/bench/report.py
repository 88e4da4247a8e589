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


def _num(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def _spread(summary: dict[str, Any], name: str, scale: float = 1.0) -> str:
    figure = summary.get(name) or {}
    stdev = figure.get("stdev")
    return "" if stdev is None else f" ±{stdev * scale:.1f}"


def point_row(p: StoredPoint) -> list[str]:
    return [str(p.concurrency),
            _num(p.ttft_s, 1000.0) + _spread(p.summary, "ttft_s", 1000.0),
            _num(p.prefill_tps, digits=0) + _spread(p.summary, "prefill_tps"),
            _num(p.decode_tps) + _spread(p.summary, "decode_tps"),
            _num(p.total_output_tps), _num(p.total_decode_tps), f"{p.errors}/{p.requests}"]


HEADERS = ["conc", "TTFT ms", "prefill tok/s", "decode tok/s/req", "total out tok/s",
           "total decode tok/s", "errors"]


def _table(rows: Sequence[Sequence[str]], out: IO[str]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths)), file=out)


def print_run(run: StoredRun, out: IO[str]) -> None:
    fp, cfg, plan = run.fingerprint, run.config, run.prompt_plan or {}
    version = f" ({fp.engine_version})" if fp.engine_version else ""
    print(f"run {run.id}: {fp.label} {fp.kind}{version}, model {fp.model}: {run.status}"
          + (f" ({run.reason})" if run.reason else ""), file=out)
    cache = "on" if cfg.get("prefix_cache") else "off"
    depth = f", depth {cfg['depth_tokens']} (prefix cache {cache})" if cfg.get("depth_tokens") \
        else ""
    print(f"prompt {plan.get('total_tokens', cfg['prompt_tokens'])} tokens (counted by "
          f"{plan.get('counted_by', '?')}), output {cfg['output_tokens']} tokens, "
          f"{cfg['runs']} run(s) per level{depth}", file=out)
    if run.points:
        _table([HEADERS, *(point_row(p) for p in run.points)], out)
    peaks = run.peaks or {}
    if peaks.get("samples"):
        used, low = peaks.get("peak_used_bytes"), peaks.get("min_available_bytes")
        print("memory: peak used " + (gib(used) if used is not None else "n/a")
              + ", lowest MemAvailable " + (gib(low) if low is not None else "n/a")
              + f", PSI some avg10 max {_num(peaks.get('max_some_avg10'))}, full avg10 max "
              f"{_num(peaks.get('max_full_avg10'))}, full stall rate max "
              f"{_num(peaks.get('max_full_rate_pct'))} % ({peaks['samples']} samples)",
              file=out)
    for problem in peaks.get("problems") or ():
        print(f"note: {problem}", file=out)
    for warning in run.warnings:
        print(f"warning: {warning}", file=out)


def print_history(runs: Sequence[StoredRun], out: IO[str]) -> None:
    if not runs:
        print("no benchmark runs stored yet (`sparkdeck bench` makes one)", file=out)
        return
    rows = [["run", "started", "status", "engine", "model", "prompt/output", "best total tok/s"]]
    for run in runs:
        best = max((p.total_output_tps for p in run.points if p.total_output_tps), default=None)
        rows.append([str(run.id), run.started_at, run.status, run.fingerprint.label,
                     run.fingerprint.model,
                     f"{run.config.get('prompt_tokens')}/{run.config.get('output_tokens')}",
                     _num(best)])
    _table(rows, out)


CSV_COLUMNS = (
    "run_id", "started_at", "status", "reason", "label", "kind", "model", "engine_version",
    "preset_id", "image", "image_id", "argv", "fingerprint", "prompt_tokens", "output_tokens",
    "depth_tokens", "prefix_cache", "runs", "concurrency", "requests", "errors",
    "ttft_median_s", "decode_median_tps", "prefill_median_tps", "total_output_tps",
    "total_decode_tps", "ttft_stdev_s", "decode_stdev_tps", "peak_used_bytes",
    "min_available_bytes", "max_psi_some_avg10", "max_psi_full_avg10",
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
            "run_id": run.id, "started_at": run.started_at, "status": run.status,
            "reason": run.reason or "", "label": fp.label, "kind": fp.kind, "model": fp.model,
            "engine_version": fp.engine_version or "", "preset_id": fp.preset_id or "",
            "image": fp.image or "", "image_id": fp.image_id or "", "argv": " ".join(fp.argv),
            "fingerprint": fp.key, "prompt_tokens": cfg.get("prompt_tokens"),
            "output_tokens": cfg.get("output_tokens"), "depth_tokens": cfg.get("depth_tokens"),
            "prefix_cache": cfg.get("prefix_cache"), "runs": cfg.get("runs"),
            "peak_used_bytes": peaks.get("peak_used_bytes"),
            "min_available_bytes": peaks.get("min_available_bytes"),
            "max_psi_some_avg10": peaks.get("max_some_avg10"),
            "max_psi_full_avg10": peaks.get("max_full_avg10"),
        }
        for p in run.points or ():
            writer.writerow({**common, "concurrency": p.concurrency, "requests": p.requests,
                             "errors": p.errors, "ttft_median_s": p.ttft_s,
                             "decode_median_tps": p.decode_tps,
                             "prefill_median_tps": p.prefill_tps,
                             "total_output_tps": p.total_output_tps,
                             "total_decode_tps": p.total_decode_tps,
                             "ttft_stdev_s": _stdev(p.summary, "ttft_s"),
                             "decode_stdev_tps": _stdev(p.summary, "decode_tps")})
        if not run.points:  # a run stopped before any level finished still shows up
            writer.writerow(common)
    return out.getvalue()


def to_json(runs: Sequence[StoredRun]) -> str:
    return json.dumps({"runs": [r.to_dict() for r in runs]}, indent=2)


FORMATS = {"csv": to_csv, "json": to_json}

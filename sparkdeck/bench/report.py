"""Benchmark results as text for the terminal: one run's table, and the history list."""

from __future__ import annotations

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
    depth = f", depth {cfg['depth_tokens']} (prefix cache {'on' if cfg['prefix_cache'] else 'off'})" \
        if cfg.get("depth_tokens") else ""
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

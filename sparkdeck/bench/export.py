"""Stored benchmark runs as CSV (one row per run and concurrency level) or JSON (everything)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence

from sparkdeck.bench.store import StoredRun

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

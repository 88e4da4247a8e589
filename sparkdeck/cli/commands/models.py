"""`sparkdeck models [--json] [--dir DIR ...]`: the models on this machine;
`sparkdeck models plan PRESET [--json]`: the memory a preset sized from its model claims;
`sparkdeck models pull REPO` / `sparkdeck models rm REPO`: the Hugging Face cache.

Lists the Hugging Face cache (HF_HOME / HF_HUB_CACHE honoured) and GGUF files (in the
directories given with --dir and those presets name), each with its format, quantisation,
parameters, size on disk, last use, KV cache per token, and the presets that use it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from sparkdeck.catalog import load_catalog
from sparkdeck.models.library import COLUMNS, row_cells, scan_library
from sparkdeck.models.pull import PullProgress, human_bytes
from sparkdeck.text_safety import clean


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "models",
        help="models on this machine (Hugging Face cache, GGUF files) with their "
        "size, KV cache per token and the presets that use them",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--dir",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="also list the .gguf files in DIR (repeatable)",
    )
    parser.set_defaults(run=run)
    actions = parser.add_subparsers(dest="models_action", metavar="ACTION")
    plan = actions.add_parser(
        "plan",
        help="the memory a preset sized from its model will claim: weights + KV "
        "cache + the engine's overhead, and the engine flags that follow",
    )
    plan.add_argument("preset", help="preset id")
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    plan.set_defaults(run=run_plan)
    pull = actions.add_parser(
        "pull",
        help="download a model repo into the Hugging Face cache, with progress "
        "(resumes an interrupted pull; HF_TOKEN from the environment)",
    )
    pull.add_argument("repo", help="model repo id, e.g. Qwen/Qwen3-8B")
    pull.add_argument("--revision", default=None, help="branch, tag or commit (default main)")
    pull.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="GLOB",
        help="only files matching GLOB (repeatable), e.g. '*.safetensors'",
    )
    pull.set_defaults(run=run_pull)
    remove = actions.add_parser(
        "rm", help="delete a model repo from the Hugging Face cache (asks first)"
    )
    remove.add_argument("repo", help="model repo id")
    remove.add_argument("--yes", action="store_true", help="do not ask")
    remove.set_defaults(run=run_rm)


def run(args: argparse.Namespace) -> int:
    catalog = load_catalog()
    library = scan_library(
        preset_models={p.id: p.model for p in catalog.presets.values()}, gguf_dirs=args.dir
    )
    if args.json:
        print(
            json.dumps(
                {
                    "models": [m.to_dict() for m in library.models],
                    "problems": list(library.problems),
                },
                indent=2,
            )
        )
        return 0
    if not library.models:
        print(
            "no models found in the Hugging Face cache"
            + (" or in " + ", ".join(map(str, args.dir)) if args.dir else "")
            + " (sparkdeck models --dir DIR lists GGUF files in DIR)"
        )
    else:
        header = tuple(c.upper() for c in COLUMNS)
        rows = [row_cells(m) for m in library.models]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())
        for model in library.models:
            if model.problem:
                print(f"  {clean(model.name)}: {clean(model.problem)}")
    for problem in library.problems:
        print(f"note: {clean(problem)}")
    return 0


def run_plan(args: argparse.Namespace) -> int:
    """Print a preset's computed memory: its parts, its engine flags, or why it has none."""
    from sparkdeck.models.plan import no_plan_reason, plan_or_reason

    catalog = load_catalog()
    try:
        preset = catalog.get(args.preset)
    except KeyError as exc:
        print(f"sparkdeck: {clean(str(exc.args[0]))}", file=sys.stderr)
        return 2
    plan, why = plan_or_reason(preset)
    setting = preset.memory_setting()
    if args.json:
        print(
            json.dumps(
                {
                    "preset": preset.id,
                    "kind": preset.kind,
                    "model": preset.model,
                    "sized_from_model": plan is not None,
                    "why_not": why,
                    "plan": plan.to_dict() if plan else None,
                    "memory_setting": setting,
                },
                indent=2,
            )
        )
        return 0
    print(f"{preset.id} ({preset.engine.title}, model {clean(preset.model)})")
    if plan is None:
        print("  not sized from the model: " + clean(why or no_plan_reason(preset)))
        print(f"  keeps the stated setting: {setting}")
        return 0
    for line in plan.lines():
        print("  " + clean(line))
    print(f"  engine flags:  {setting}")
    return 0


class _ProgressLine:
    """Progress on one line: redrawn in place on a terminal, a line a second otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self.last = 0.0
        self.file = ""

    def __call__(self, p: PullProgress) -> None:
        now = time.monotonic()
        new_file = p.file != self.file
        if not (new_file or p.file_done >= p.file_total or now - self.last >= 1.0):
            return
        self.last, self.file = now, p.file
        text = p.describe()
        if self.tty:
            print("\r\x1b[2K" + text, end="", flush=True)
        else:
            print(text, flush=True)

    def close(self) -> None:
        if self.tty:
            print()


def run_pull(args: argparse.Namespace) -> int:
    from sparkdeck.models.hub_access import PullCancelled, PullError
    from sparkdeck.models.pull import plan_pull, pull

    try:
        plan = plan_pull(args.repo, args.revision, args.include)
    except PullError as exc:
        print(f"sparkdeck: {clean(str(exc))}", file=sys.stderr)
        return 1
    print(
        f"{clean(plan.repo)} @ {plan.commit[:12]}: {len(plan.files)} file(s), "
        f"{human_bytes(plan.total)} ({human_bytes(plan.needed)} to fetch, "
        f"{human_bytes(plan.free)} free in {plan.cache_dir})",
        flush=True,
    )
    line = _ProgressLine()
    try:
        snapshot = pull(plan, line)
    except PullError as exc:
        line.close()
        print(f"sparkdeck: {clean(str(exc))}", file=sys.stderr)
        return 130 if isinstance(exc, PullCancelled) else 1
    line.close()
    print(f"done: {snapshot}")
    return 0


def run_rm(args: argparse.Namespace) -> int:
    from sparkdeck.models.library import NotInCache, plan_removal

    try:
        removal = plan_removal(args.repo)
    except NotInCache as exc:
        print(f"sparkdeck: {clean(str(exc))}", file=sys.stderr)
        return 1
    what = (
        f"{clean(removal.repo)}: {len(removal.revisions)} revision(s), "
        f"{human_bytes(removal.freed_bytes)}"
    )
    if not args.yes:
        if not sys.stdin.isatty():
            print(
                f"sparkdeck: would delete {what}; pass --yes to delete without a terminal",
                file=sys.stderr,
            )
            return 1
        if input(f"delete {what}? [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return 1
    removal.execute()
    print(f"deleted {what}")
    return 0

"""Apply each known mutation of issue 28 in a worktree of its own and run the test that
should kill it: `python tools/mutants.py` prints one line per mutant, killed or survived.

Each mutant is an exact text replacement in one file (found exactly once, or reported as
moved: the code changed and the mutant must be written again). The worktree is a fresh
checkout of HEAD, so the checkout's own files are never changed; the killing tests are
copied into it from the checkout, so tests not yet committed count too. The tests run
unmutated first: a test that fails without a mutant kills nothing. A mutant is killed when
its test fails (pytest's exit status 1); any other status (a collection error, no tests) is
an error, never a kill. Docker-backed tests need DOCKER_HOST, as in the rest of the suite.

    python tools/mutants.py            # all
    python tools/mutants.py 3a 9       # some
    python tools/mutants.py --list     # what they are
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PURE = "tests/unit/test_mutants_28.py"
REAL = "tests/integration/test_mutants_28_docker.py"


@dataclass(frozen=True)
class Mutant:
    id: str
    what: str
    path: str  # the file, relative to the repository
    old: str  # found exactly once in it
    new: str
    tests: tuple[str, ...]  # pytest node ids that must fail with the mutant


MUTANTS = (
    Mutant(
        "1a",
        "watchdog: a pending stop retried only while the reading still says stop",
        "sparkdeck/guard/watchdog.py",
        "attempt = self._attempt_stop() if self.stop_pending else None",
        "attempt = self._attempt_stop() if decision.level == STOP else None",
        (f"{PURE}::test_a_failed_stop_is_retried_after_memory_came_back_until_it_is_confirmed",),
    ),
    Mutant(
        "1b",
        "watchdog: the next watchdog forgets a failed stop once memory is back",
        "sparkdeck/guard/watchdog.py",
        "container_id, resume = engine.container_id, records.pending_stop(engine.container_id)",
        "container_id, resume = engine.container_id, None",
        ("tests/integration/test_guard_handover.py",),
    ),
    Mutant(
        "2a",
        "SGLang's static fraction not capped at 0.9",
        "sparkdeck/engines/sglang.py",
        "            ceiling=SHARE_CEILING,\n            available=None if available",
        "            ceiling=1.0,\n            available=None if available",
        (f"{PURE}::test_sglang_static_fraction_never_exceeds_0_9",),
    ),
    Mutant(
        "2b",
        "vLLM's utilization not capped at 0.9",
        "sparkdeck/engines/vllm.py",
        "share_of(plan.total, total, ceiling=SHARE_CEILING, available=available)",
        "share_of(plan.total, total, ceiling=1.0, available=available)",
        (f"{PURE}::test_vllm_utilization_never_exceeds_0_9",),
    ),
    Mutant(
        "2c",
        "TensorRT-LLM's free fraction not capped at 0.9",
        "sparkdeck/engines/trtllm.py",
        "share_of(plan.kv, max(free, 1), ceiling=SHARE_CEILING)",
        "share_of(plan.kv, max(free, 1), ceiling=1.0)",
        (f"{PURE}::test_trtllm_free_fraction_never_exceeds_0_9",),
    ),
    Mutant(
        "3a",
        "_ours: and -> or",
        "sparkdeck/runtime/client.py",
        'return labels.get(MANAGED) == "true" and labels.get(SCOPE) == self.scope',
        'return labels.get(MANAGED) == "true" or labels.get(SCOPE) == self.scope',
        (f"{REAL}::test_a_container_with_half_our_labels_is_never_touched",),
    ),
    Mutant(
        "3b",
        "_ours without its managed=true half",
        "sparkdeck/runtime/client.py",
        'return labels.get(MANAGED) == "true" and labels.get(SCOPE) == self.scope',
        "return labels.get(SCOPE) == self.scope",
        (f"{REAL}::test_a_container_with_half_our_labels_is_never_touched",),
    ),
    Mutant(
        "4",
        "the service's API key forwarded to the engine",
        "sparkdeck/endpoint/app.py",
        'if k.lower() not in _HOP and not (self._key and k.lower() == b"authorization")\n',
        "if k.lower() not in _HOP\n",
        (f"{REAL}::test_the_services_api_key_never_reaches_the_engine",),
    ),
    Mutant(
        "5",
        "the secret-name pattern without APIKEY",
        "sparkdeck/presets.py",
        "(TOKEN|SECRET|PASSWORD|API_KEY|APIKEY|_KEY$)",
        "(TOKEN|SECRET|PASSWORD|API_KEY|_KEY$)",
        (f"{PURE}::test_each_secret_name_pattern_is_refused",),
    ),
    Mutant(
        "6a",
        "bench: no decode-rate correction for a first read of several tokens",
        "sparkdeck/bench/stats.py",
        "after *= (self.text_chunks - self.first_batch) / (self.text_chunks - 1)",
        "after *= 1.0",
        (f"{PURE}::test_bench_decode_rate_counts_from_the_last_token_of_the_first_read",),
    ),
    Mutant(
        "6b",
        "chat: no decode-rate correction for a first read of several tokens",
        "sparkdeck/chat/reply.py",
        "after = (completion - 1) * (self.pieces - self.first_batch) / max(self.pieces - 1, 1)",
        "after = completion - 1",
        (f"{PURE}::test_chat_decode_rate_counts_from_the_last_token_of_the_first_read",),
    ),
    Mutant(
        "7",
        "switch_on_request ignored (a preset's model switches to it)",
        "sparkdeck/endpoint/switching.py",
        "if not self._settings.switch_on_request or self._owner is None or model is None:",
        "if self._owner is None or model is None:",
        (f"{REAL}::test_with_switch_on_request_off_a_presets_model_is_refused_not_switched_to",),
    ),
    Mutant(
        "8",
        "unknown models rewritten to the running one",
        "sparkdeck/endpoint/app.py",
        "if model in upstream.aliases:",
        "if True:",
        (f"{REAL}::test_an_unknown_model_is_refused_not_rewritten_to_the_running_one",),
    ),
    Mutant(
        "9",
        "the launch lock's failure ignored",
        "sparkdeck/launch/lock_holder.py",
        "raise lock_busy(lock, what)",
        "pass",
        (
            f"{REAL}::test_while_another_process_holds_the_launch_lock_stop_and_launch_"
            "touch_nothing",
        ),
    ),
    # Mutants that the weak assertions issue 28 names let live, killed by their replacements.
    Mutant(
        "W1",
        "/v1/models lists no preset's model (was: `data == [] or all(ids)`)",
        "sparkdeck/endpoint/answers.py",
        "for preset in sorted(catalog.presets.values(), key=lambda p: p.id):",
        "for preset in []:",
        ("tests/integration/test_endpoint.py::test_with_a_key_a_request_without_it_gets_401",),
    ),
    Mutant(
        "W2",
        "the preset table's on-disk cell wrong (was: expected built with the code's own functions)",
        "sparkdeck/ui/readers.py",
        'if found is None:\n        return "-"\n    return f"{bytes_on_disk',
        'if found is None:\n        return "?"\n    return f"{bytes_on_disk',
        ("tests/unit/test_ui_app.py::test_preset_table_rows_match_the_catalog",),
    ),
    Mutant(
        "W3",
        "help rows without what the key does (was: `assert rows`)",
        "sparkdeck/ui/screens/dialogs.py",
        'f"{binding.description}: {binding.tooltip}" if binding.tooltip else',
        "binding.description if binding.tooltip else",
        ("tests/unit/test_models_ui.py::test_o_opens_the_models_view_and_help_lists_it",),
    ),
    Mutant(
        "W4",
        "no driver, and the reading does not say so (was: `gpus or error`)",
        "sparkdeck/host/nvml.py",
        'self._failure = f"no NVIDIA driver (NVML: {exc})"',
        'self._failure = f"NVML: {exc}"',
        ("tests/unit/test_telemetry.py::test_sampler_on_this_machines_real_proc",),
    ),
    Mutant(
        "W5",
        'the fit check keeps no headroom (was: `"4000" in m`)',
        "sparkdeck/launch/sequence.py",
        "headroom=int(self.guard.stop_available_pct / 100",
        "headroom=int(0.0 / 100",
        (
            f"{REAL}::test_with_switch_on_request_a_model_that_cannot_fit_is_refused_with_"
            "its_numbers",
        ),
    ),
)


def pytest_run(tree: Path, tests: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        # -n 0: one process (with xdist, -x ends the session as interrupted, exit status 2)
        [sys.executable, "-m", "pytest", "-n", "0", "-q", "-x", "-p", "no:cacheprovider", *tests],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def last_line(done: subprocess.CompletedProcess[str]) -> str:
    """pytest's summary line, and for a failure the first line of what failed (so that a
    kill can be told from a test that broke for another reason)."""
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    summary = lines[-1] if lines else f"exit status {done.returncode}"
    failed = next((line[1:].strip() for line in lines if line.startswith("E ")), None)
    return f"{summary}: {failed[:160]}" if failed and done.returncode == 1 else summary


def check(tree: Path, chosen: list[Mutant]) -> list[tuple[Mutant, str, str]]:
    for test in sorted({t.split("::")[0] for m in chosen for t in m.tests}):
        shutil.copy2(REPO / test, tree / test)  # the checkout's, committed or not
    where = subprocess.run(
        [sys.executable, "-c", "import sparkdeck; print(sparkdeck.__file__)"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not where.startswith(str(tree)):
        raise SystemExit(f"sparkdeck is imported from {where}, not from the worktree {tree}")
    print(f"worktree {tree} (HEAD), sparkdeck from {where}", flush=True)
    baseline = pytest_run(tree, tuple(t for m in chosen for t in m.tests))
    if baseline.returncode != 0:
        raise SystemExit(
            "the killing tests fail without any mutant:\n"
            + (baseline.stdout + baseline.stderr)[-3000:]
        )
    print(f"unmutated: {last_line(baseline)}", flush=True)
    results = []
    for mutant in chosen:
        path = tree / mutant.path
        original = path.read_text()
        if original.count(mutant.old) != 1:
            results.append(
                (mutant, "MOVED", f"{mutant.old!r} is found {original.count(mutant.old)} times")
            )
        else:
            path.write_text(original.replace(mutant.old, mutant.new))
            try:
                done = pytest_run(tree, mutant.tests)
            finally:
                path.write_text(original)
            verdict = {0: "SURVIVED", 1: "killed"}.get(done.returncode, "ERROR")
            results.append((mutant, verdict, last_line(done)))
        shown = results[-1]
        print(
            f"{shown[1]:8} {mutant.id:3} {mutant.what}\n"
            f"             by {' '.join(mutant.tests)}\n             ({shown[2]})",
            flush=True,
        )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", help="mutant ids (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args()
    if args.list:
        for m in MUTANTS:
            print(f"{m.id:3} {m.what}\n    {m.path}: {m.old!r}\n    -> {m.new!r}")
        return 0
    unknown = set(args.ids) - {m.id for m in MUTANTS}
    if unknown:
        parser.error(f"no mutant {', '.join(sorted(unknown))}")
    chosen = [m for m in MUTANTS if not args.ids or m.id in args.ids]
    tree = Path(tempfile.mkdtemp(prefix="sd-mutants-")) / "tree"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), "HEAD"],
        check=True,
        capture_output=True,
    )
    try:
        results = check(tree, chosen)
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(tree.parent, ignore_errors=True)
    killed = sum(verdict == "killed" for _, verdict, _ in results)
    print(f"{killed} of {len(results)} mutants killed")
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())

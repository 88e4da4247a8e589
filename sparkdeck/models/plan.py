"""A preset's model on this machine, its facts, and its memory plan.

Finding the files: a `.gguf` path (as written, or through a bind mount in the preset's
volumes back to the host), else a Hugging Face repo id looked up in the hub cache with
`huggingface_hub`'s own try_to_load_from_cache (so the layout and HF_HUB_CACHE / HF_HOME
are honoured as the engines' downloads honour them). Facts are read once per file version.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sparkdeck.models.facts import ModelFacts
from sparkdeck.models.read import ModelUnreadable, read_model
from sparkdeck.models.sizing import MemoryPlan, PlanUnavailable, plan_memory

if TYPE_CHECKING:
    from sparkdeck.presets import Preset

GIB = 2**30


def hub_cache_dir() -> Path:
    """The hub cache as huggingface_hub resolves it, read from the environment now (its own
    constants are fixed when it is first imported)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME")
    base = Path(home).expanduser() if home else Path.home() / ".cache" / "huggingface"
    return base / "hub"


def gguf_on_host(model: str, volumes: Sequence[str]) -> Path | None:
    """The GGUF on this machine a container will load: the path as written, or mapped back
    through a bind mount 'HOST:CONTAINER' whose container side holds it."""
    if not model.endswith(".gguf"):
        return None
    candidates = [Path(model)]
    for volume in volumes:
        parts = volume.split(":")
        if len(parts) < 2:
            continue
        source, target = parts[0], parts[1].rstrip("/")
        if model.startswith(target + "/") and source.startswith(("/", ".", "~")):
            candidates.append(Path(source).expanduser() / model[len(target) + 1 :])
    return next((c for c in candidates if c.is_file()), None)


def hf_snapshot(
    repo_id: str, revision: str | None = None, cache_dir: Path | None = None
) -> Path | None:
    """The cached snapshot directory of `repo_id` holding its config.json, or None."""
    from huggingface_hub import try_to_load_from_cache

    if repo_id.count("/") != 1 or repo_id.startswith(("/", ".")):
        return None
    try:
        found = try_to_load_from_cache(
            repo_id, "config.json", revision=revision, cache_dir=str(cache_dir or hub_cache_dir())
        )
    except ValueError:  # not a valid repo id for the hub
        return None
    return Path(found).parent if isinstance(found, str) else None


def locate_model(model: str, volumes: Sequence[str] = ()) -> Path | None:
    """The file or directory on this machine that holds `model`, or None."""
    if not model:
        return None
    if model.endswith(".gguf"):
        return gguf_on_host(model, volumes)
    local = Path(model).expanduser()
    if local.is_dir() and (local / "config.json").is_file():
        return local
    return hf_snapshot(model)


@functools.lru_cache(maxsize=64)
def _facts_at(path: str, version: tuple[int, int]) -> ModelFacts:
    return read_model(Path(path))


def read_facts(path: Path) -> ModelFacts:
    """Facts of the model at `path`, read again only when the files change."""
    probe = path / "config.json" if path.is_dir() else path
    try:
        stat = probe.stat()
    except OSError as exc:
        raise ModelUnreadable(f"{probe}: {exc.strerror or exc}") from exc
    try:
        return _facts_at(str(path), (stat.st_mtime_ns, stat.st_size))
    except ModelUnreadable:
        raise
    except Exception as exc:  # the gguf and safetensors readers raise untyped errors on
        # malformed headers (struct, index, numpy errors); a bad file must not crash a caller
        raise ModelUnreadable(f"{path}: cannot read ({type(exc).__name__}: {exc})") from exc


def preset_facts(preset: Preset) -> ModelFacts:
    """The facts of a preset's model; ModelUnreadable says why they cannot be had."""
    where = locate_model(preset.model, preset.volumes)
    if where is None:
        raise ModelUnreadable(
            f"{preset.model or 'the model'} is not on this machine "
            "(not in the Hugging Face cache, nor a GGUF file here)"
        )
    return read_facts(where)


def wants_plan(preset: Preset) -> bool:
    """True when the preset sizes memory from the model (context or a KV budget stated)."""
    return preset.context is not None or preset.kv_budget_gib is not None


def no_plan_reason(preset: Preset) -> str:
    """Why a preset is not sized from its model, naming the keys that would size it: a
    `[llamacpp] context` sets the engine's context, not the plan, and said "neither
    `context` nor ..." to a user who had written one."""
    engine_context = preset.options.get("context") if preset.options else None
    aside = (
        f"; `{preset.kind}.context` = {engine_context} sets only the engine's own "
        "context, and the memory stays as stated"
        if engine_context is not None
        else ""
    )
    return (
        "the preset states neither the top-level `context` nor `kv_budget_gib` (the keys "
        f"that size its memory from the model){aside}"
    )


def preset_plan(preset: Preset) -> MemoryPlan:
    """The memory plan of a preset that asks for one; PlanUnavailable says why not."""
    if not wants_plan(preset):
        raise PlanUnavailable(no_plan_reason(preset))
    overhead = preset.engine.plan_overhead
    if overhead is None:
        raise PlanUnavailable(f"sparkdeck does not size {preset.engine.title} engines")
    try:
        facts = preset_facts(preset)
    except ModelUnreadable as exc:
        raise PlanUnavailable(str(exc)) from exc
    budget = int(preset.kv_budget_gib * GIB) if preset.kv_budget_gib is not None else None
    try:
        return plan_memory(
            facts,
            kind=preset.kind,
            overhead=int(overhead[0] * GIB),
            overhead_why=overhead[1],
            context=preset.context,
            sequences=preset.concurrency,
            kv_budget=budget,
            kv_dtype=preset.kv_cache_dtype or "auto",
        )
    except ValueError as exc:  # an unknown KV dtype for this model
        raise PlanUnavailable(str(exc)) from exc


def plan_or_reason(preset: Preset) -> tuple[MemoryPlan | None, str | None]:
    """(plan, None) when sized from the model; (None, why) when the preset asks for a plan
    that cannot be made; (None, None) when it asks for none."""
    if not wants_plan(preset):
        return None, None
    try:
        return preset_plan(preset), None
    except PlanUnavailable as exc:
        return None, str(exc)


def preset_bytes_per_token(preset: Preset) -> float | None:
    """The preset's stated bytes per token, else the active weights read from its model's
    files when they are on this machine (None when neither is known): the metrics' ceiling
    on decode speed (sparkdeck.engines.base.EngineKind.metrics_plan)."""
    if preset.bytes_per_token is not None:
        return preset.bytes_per_token
    try:
        return float(preset_facts(preset).active_weight_bytes) or None
    except ModelUnreadable:
        return None

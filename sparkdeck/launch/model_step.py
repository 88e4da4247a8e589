"""The launch's model step: a preset whose Hugging Face model is not (all) in the cache gets
it downloaded first, under the launch's own progress events, and the engine then starts with
the Hub offline.

Why: an engine that downloads its weights during start-up does so invisibly, inside the
container, where the readiness timeout and the start-up watchdog take a 60 GB download for a
hung or growing engine. So the step runs in the launch's preflight, after the fit check and
before the image pull, while the running engine still serves: a refusal (too little disk, a
gated repo without HF_TOKEN, no such repo) stops the launch with nothing stopped or started.
The download is sparkdeck.models.pull (huggingface_hub underneath); the container then gets
the engine kind's `offline_env` (HF_HUB_OFFLINE=1; llama-server's own switch too) with the
hub cache mounted as before. The plan asks the Hub too (`survey`), so the confirmation says
"will download N GiB of model first".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from sparkdeck.host.meminfo import gib
from sparkdeck.launch.events import (
    EventSink,
    ModelDownloaded,
    ModelDownloading,
    ModelDownloadStarted,
    ModelInCache,
)
from sparkdeck.launch.preflight import PreflightFailed
from sparkdeck.models.hub_access import NeedsToken, NoSpace, PullCancelled, PullError, RepoNotFound
from sparkdeck.models.hub_model import cached_snapshot, repo_and_tag
from sparkdeck.models.pull import PullPlan, PullProgress, free_bytes, plan_pull, pull
from sparkdeck.presets import HF_CACHE_TARGET, Preset, PresetError
from sparkdeck.runtime.spec import ContainerSpec

# Refusals the Hub gave: the cache is not trusted instead (it may hold a stale or other repo).
_REFUSED = (NeedsToken, RepoNotFound, NoSpace)


class ModelStepFailed(PreflightFailed):
    """The preset's model could not be put in the cache; nothing was stopped or started."""


@dataclass(frozen=True)
class HubModel:
    """The Hub repo a preset's engine loads, and what keeps that engine offline."""

    repo: str
    tag: str  # what followed ':' in the preset's model (llama.cpp's quantisation)
    offline_env: Mapping[str, str]
    cache: Path  # the hub cache the container sees: <the mounted HF home>/hub


def hub_model(preset: Preset, spec: ContainerSpec) -> HubModel | None:
    """The preset's model as a Hub repo the launch fetches, or None: a path, a .gguf, an
    engine that keeps its own models (Ollama) or a custom one, or the hub cache unmounted."""
    engine = preset.engine
    if not engine.offline_env:
        return None  # a custom engine that gets its model its own way
    mounted = next((m.source for m in spec.mounts if m.target == HF_CACHE_TARGET), None)
    found = repo_and_tag(preset.model)
    if mounted is None or found is None:
        return None
    # into the directory the container mounts (HF_HUB_CACHE elsewhere would not be seen)
    return HubModel(found[0], found[1], dict(engine.offline_env), Path(mounted) / "hub")


def _plan(preset: Preset, model: HubModel, free_space: Callable[[Path], int]) -> PullPlan:
    return plan_pull(
        model.repo,
        cache_dir=model.cache,
        free_space=free_space,
        choose=lambda names: preset.engine.hub_files(preset, names, model.tag),
    )


def _cached_commit(model: HubModel) -> str | None:
    """The commit refs/main names when its snapshot holds files (the cache's view only)."""
    snapshot = cached_snapshot(model.cache, model.repo)
    return snapshot.name if snapshot is not None else None


@dataclass(frozen=True)
class ModelSurvey:
    """What the launch will do about the model, as the plan shows it."""

    repo: str
    needed: int = 0
    total: int = 0
    problem: str | None = None  # why the Hub could not say (the launch will ask again)

    def line(self) -> str:
        if self.problem:
            return f"model {self.repo}: {self.problem}"
        if self.needed:
            return (
                f"will download {gib(self.needed)} of model {self.repo} first "
                f"({gib(self.total)} in all), then start the engine with the Hub offline"
            )
        return (
            f"model {self.repo} is in the cache ({gib(self.total)}); the engine starts "
            "with the Hub offline"
        )


def survey(preset: Preset, free_space: Callable[[Path], int] = free_bytes) -> ModelSurvey | None:
    """Ask the Hub what the launch would fetch (None when the preset has no Hub model)."""
    try:
        model = hub_model(preset, preset.container_spec())
    except (PresetError, ValueError, KeyError, TypeError):
        return None  # the preflight names what is wrong with the preset
    if model is None:
        return None
    try:
        plan = _plan(preset, model, free_space)
    except _REFUSED as exc:
        return ModelSurvey(model.repo, problem=f"the launch will be refused: {exc}")
    except PullError as exc:
        here = _cached_commit(model)
        what = (
            f"the cached snapshot {here[:12]} will be used"
            if here
            else "it is not in the cache either: the launch will fail"
        )
        return ModelSurvey(model.repo, problem=f"the Hub could not be asked ({exc}); {what}")
    return ModelSurvey(model.repo, plan.needed, plan.total)


class _Relay:
    """Turns the pull's many updates into a few launch events: a file beginning, each 5 %
    of the whole, every 10 s, and the end (the CLI prints each one as a line)."""

    def __init__(self, repo: str, on_event: EventSink) -> None:
        self.repo, self.on_event = repo, on_event
        self.file, self.step, self.at = "", -1, 0.0

    def __call__(self, p: PullProgress) -> None:
        now = time.monotonic()
        step = int(20 * p.done / p.total) if p.total else 0
        if p.file != self.file or step != self.step or now - self.at >= 10.0 or p.done >= p.total:
            self.file, self.step, self.at = p.file, step, now
            self.on_event(ModelDownloading(self.repo, p))


def ensure_model(
    preset: Preset,
    spec: ContainerSpec,
    on_event: EventSink,
    cancel: threading.Event | None = None,
    *,
    free_space: Callable[[Path], int] = free_bytes,
) -> ContainerSpec:
    """Put the preset's Hub model in the cache (downloading what is missing) and return the
    spec with the engine's offline variables; ModelStepFailed when it cannot be had, and
    KeyboardInterrupt again for a Ctrl-C (the launch reports what is left)."""
    model = hub_model(preset, spec)
    if model is None:
        return spec
    try:
        plan = _plan(preset, model, free_space)
    except _REFUSED as exc:
        raise ModelStepFailed(
            f"{preset.id} not launched: {exc}. Nothing was stopped or started."
        ) from exc
    except PullError as exc:  # the Hub is away: a snapshot in the cache is used as it is
        commit = _cached_commit(model)
        if commit is None:
            raise ModelStepFailed(
                f"{preset.id} not launched: model {model.repo} is not in the cache and the "
                f"Hub could not be asked ({exc}). Nothing was stopped or started."
            ) from exc
        on_event(
            ModelInCache(
                model.repo,
                None,
                f"the Hub could not be asked, so the cached "
                f"snapshot {commit[:12]} is used as it is",
            )
        )
        return _offline(preset, spec, model)
    if plan.needed == 0:
        on_event(ModelInCache(model.repo, plan.total))
        return _offline(preset, spec, model)
    on_event(
        ModelDownloadStarted(model.repo, plan.commit, len(plan.files), plan.needed, plan.total)
    )
    started = time.monotonic()
    try:
        pull(plan, _Relay(model.repo, on_event), cancel)
    except PullCancelled as exc:
        if cancel is None or not cancel.is_set():
            raise KeyboardInterrupt from None  # Ctrl-C: the launch says what is left
        raise ModelStepFailed(
            f"{preset.id} not launched: {exc}. Nothing was stopped or started."
        ) from None
    except PullError as exc:
        raise ModelStepFailed(
            f"{preset.id} not launched: the model download failed: {exc}. "
            "Nothing was stopped or started."
        ) from exc
    on_event(ModelDownloaded(model.repo, plan.needed, time.monotonic() - started))
    return _offline(preset, spec, model)


def _offline(preset: Preset, spec: ContainerSpec, model: HubModel) -> ContainerSpec:
    """The spec with the engine's offline variables and HF_HOME at the mounted cache (an
    image whose HOME is not /root still finds the model); a value the preset's own `env`
    sets for one of them is the user's choice and stays."""
    env = dict(spec.env)
    wanted = {"HF_HOME": HF_CACHE_TARGET, **model.offline_env}
    env.update({k: v for k, v in wanted.items() if k not in preset.env})
    return replace(spec, env=tuple(sorted(env.items())))

"""Engine presets: TOML files in presets/ (bundled) and the user's config dir, strictly checked.

Every problem names its file and the dotted key to fix; a bad file is reported and skipped,
never allowed to stop the other presets from loading. A user preset with the same id as a
bundled one replaces it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkdeck.config.schema import FileProblem, Option, check_table
from sparkdeck.config.toml_files import TomlFileError, read_toml
from sparkdeck.engines import KINDS, EngineKind, get_kind
from sparkdeck.models.facts import KV_DTYPE_BYTES
from sparkdeck.runtime.spec import ContainerSpec, GeneratedFile, Mount, PortBinding

if TYPE_CHECKING:
    from sparkdeck.config.settings import GuardSettings
    from sparkdeck.guard.claims import MemoryClaim

_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIZE = re.compile(r"^[0-9]+[bkmgBKMG]?$")
# Values under names like these are secrets: they belong in the environment, not in a file.
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|API_KEY|APIKEY|_KEY$)", re.I)
HF_CACHE_TARGET = "/root/.cache/huggingface"

COMMON: dict[str, Option] = {
    "id": Option("str", None, "unique id; defaults to the file name without .toml"),
    "title": Option("str", None, "name shown in lists", required=True),
    "description": Option("str", "", "a line about what this preset is for"),
    "kind": Option("str", None, "engine kind", choices=tuple(KINDS), required=True),
    "image": Option("str", None, "container image reference", required=True),
    "model": Option("str", "", "model id or path, as the engine takes it"),
    "port": Option(
        "int", None, "host port (default: the engine's usual port)", minimum=1, maximum=65535
    ),
    "lan": Option("bool", False, "publish on all interfaces instead of 127.0.0.1"),
    "args": Option("list[str]", [], "extra engine arguments, appended to the command"),
    "env": Option("table[str]", {}, "fixed environment values (never secrets)"),
    "pass_env": Option(
        "list[str]",
        ["HF_TOKEN"],
        "variables passed from sparkdeck's environment when set (secrets go here)",
    ),
    "volumes": Option("list[str]", [], "extra mounts, 'HOST:CONTAINER[:ro]'"),
    "gpus": Option("bool", True, "request all GPUs (--gpus all)"),
    "ipc": Option(
        "str",
        None,
        "IPC mode (default: host for vLLM, SGLang, TensorRT-LLM)",
        choices=("private", "host", "shareable"),
    ),
    "shm_size": Option("str", "16g", "size of /dev/shm when IPC is not host"),
    "hf_cache": Option("bool", True, "mount the Hugging Face cache into the container"),
    "memlock": Option(
        "int",
        -1,
        "locked-memory limit in bytes for the container; -1 is "
        "unlimited, as NVIDIA's playbooks ask (--ulimit memlock=-1)",
        minimum=-1,
    ),
    "startup_timeout": Option(
        "float", None, "seconds to wait for the health endpoint", minimum=1.0, maximum=86_400.0
    ),
    # Bytes one decode step reads per generated token (the active weights, e.g. ~4.6e9 for
    # an 8B model at 4.5 bits): the engine panel shows tok/s against 273 GB/s divided by it.
    # 1 kB to 1 TB brackets every model a Spark can hold.
    "bytes_per_token": Option(
        "float",
        None,
        "bytes read per generated token (active weights), for the bandwidth ceiling",
        minimum=1e3,
        maximum=1e12,
    ),
    # Right-sized memory (sparkdeck.models.sizing): with `context` (or a KV budget) stated,
    # sparkdeck reads the model's files and sets the engine's own memory knob to weights +
    # KV + the engine's overhead instead of a flat share of the pool.
    "context": Option(
        "int",
        None,
        "tokens per sequence; sizes the KV cache from the model",
        minimum=16,
        maximum=16_777_216,
    ),
    "concurrency": Option(
        "int",
        None,
        "sequences of `context` tokens held at once (default 1)",
        minimum=1,
        maximum=4096,
    ),
    "kv_budget_gib": Option(
        "float",
        None,
        "KV cache size in GiB, instead of concurrency",
        minimum=0.0,
        exclusive_minimum=True,
        maximum=4096.0,
    ),
    "kv_cache_dtype": Option(
        "str", None, "KV cache dtype (default: the model's)", choices=tuple(KV_DTYPE_BYTES)
    ),
}


class PresetError(ValueError):
    """A preset file that cannot be used; carries every problem found in it."""

    def __init__(self, problems: list[FileProblem]):
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


@dataclass(frozen=True)
class Preset:
    id: str
    title: str
    kind: str
    image: str
    model: str
    port: int
    lan: bool
    args: tuple[str, ...]
    env: Mapping[str, str]
    pass_env: tuple[str, ...]
    volumes: tuple[str, ...]
    gpus: bool
    ipc: str | None
    shm_size: str
    hf_cache: bool
    startup_timeout: float
    options: Mapping[str, Any]
    memlock: int = -1
    bytes_per_token: float | None = None
    context: int | None = None
    concurrency: int | None = None
    kv_budget_gib: float | None = None
    kv_cache_dtype: str | None = None
    description: str = ""
    source: Path | None = None
    bundled: bool = False

    @property
    def engine(self) -> EngineKind:
        return get_kind(self.kind)

    def memory_setting(self) -> str:
        return self.engine.memory_setting(self)

    def memory_claim(self, total: int, guard: GuardSettings) -> MemoryClaim:
        """What this preset will take from a pool of `total` bytes (see the engine kind).

        A figure that cannot be computed (a GGUF header with absurd sizes, say) makes this
        preset's claim unknown; it never takes the preset list or the table down with it.
        """
        from sparkdeck.guard.claims import MemoryClaim

        try:
            return self.engine.memory_claim(self, total, guard)
        except (ArithmeticError, ValueError, OSError) as exc:
            return MemoryClaim(None, f"cannot be sized ({type(exc).__name__}: {exc})")

    def container_spec(self) -> ContainerSpec:
        """Turn the preset into what Docker will be asked for."""
        engine = self.engine
        mounts = [_parse_volume(v) for v in self.volumes]
        if self.hf_cache and engine.uses_hf_cache:
            mounts.append(Mount(str(_hf_cache_dir()), HF_CACHE_TARGET))
        mounts += engine.mounts(self)
        files: list[GeneratedFile] = engine.files(self)
        env = {**engine.environment(self), **dict(self.env)}
        entrypoint = engine.entrypoint(self)
        return ContainerSpec(
            preset_id=self.id,
            kind=self.kind,
            image=self.image,
            command=tuple(engine.command(self)),
            entrypoint=tuple(entrypoint) if entrypoint is not None else None,
            port=PortBinding(
                engine.container_port(self), self.port, "0.0.0.0" if self.lan else "127.0.0.1"
            ),
            health_path=engine.health(self),
            metrics_path=engine.metrics(self),
            env=tuple(sorted(env.items())),
            pass_env=self.pass_env,
            mounts=tuple(mounts),
            files=tuple(files),
            gpus=self.gpus,
            ipc_mode=self.ipc,
            shm_size=None if self.ipc == "host" else self.shm_size,
            startup_timeout=self.startup_timeout,
            memlock=self.memlock,
            model=self.model,
        )

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description (no secret values: pass_env lists names only)."""
        return {
            "id": self.id,
            "title": self.title,
            "kind": self.kind,
            "image": self.image,
            "model": self.model,
            "port": self.port,
            "lan": self.lan,
            "memory_setting": self.memory_setting(),
            "gpus": self.gpus,
            "args": list(self.args),
            "pass_env": list(self.pass_env),
            "bytes_per_token": self.bytes_per_token,
            "context": self.context,
            "concurrency": self.concurrency,
            "kv_budget_gib": self.kv_budget_gib,
            "kv_cache_dtype": self.kv_cache_dtype,
            "description": self.description,
            "source": str(self.source) if self.source else None,
            "bundled": self.bundled,
        }


def _hf_cache_dir() -> Path:
    hf_home = os.environ.get("HF_HOME")
    return Path(hf_home) if hf_home else Path.home() / ".cache" / "huggingface"


def _parse_volume(text: str) -> Mount:
    parts = text.split(":")
    source, target = os.path.expanduser(parts[0]), parts[1]
    read_only = len(parts) == 3 and parts[2] == "ro"
    named = not source.startswith(("/", "."))
    if not named:
        source = str(Path(source).resolve())
    return Mount(source, target, read_only, volume=named)


def _volume_problem(text: str) -> str | None:
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        return f"{text!r} must look like 'HOST_PATH:CONTAINER_PATH' or 'HOST:CONTAINER:ro'"
    if not parts[1].startswith("/"):
        return f"{text!r}: the container path must be absolute"
    if len(parts) == 3 and parts[2] not in ("ro", "rw"):
        return f"{text!r}: the mode must be 'ro' or 'rw'"
    return None


def _semantic_problems(values: Mapping[str, Any], engine: EngineKind) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if values.get("id") is not None and not _ID.match(values["id"]):
        problems.append(
            (
                "id",
                f"{values['id']!r} must be lower-case letters, digits, '.', "
                "'_' or '-', starting with a letter or digit",
            )
        )
    if engine.requires_model and not values.get("model"):
        problems.append(("model", f"is required for a {engine.title} preset"))
    if not str(values.get("image", "x")).strip():
        problems.append(("image", "must not be empty"))
    for name in values.get("env", {}):
        if not _ENV_NAME.match(name):
            problems.append((f"env.{name}", "is not a valid environment variable name"))
        elif _SECRET_NAME.search(name):
            problems.append(
                (
                    f"env.{name}",
                    "looks like a secret: do not write it in a preset; "
                    f"export {name} and list it in pass_env",
                )
            )
    for name in values.get("pass_env", []):
        if not _ENV_NAME.match(name):
            problems.append(("pass_env", f"{name!r} is not a valid environment variable name"))
    for volume in values.get("volumes", []):
        why = _volume_problem(volume)
        if why:
            problems.append(("volumes", why))
    if values.get("concurrency") is not None and values.get("kv_budget_gib") is not None:
        problems.append(
            (
                "concurrency",
                "state either concurrency or kv_budget_gib, not both "
                "(the budget decides how many sequences fit)",
            )
        )
    elif values.get("concurrency") is not None and values.get("context") is None:
        problems.append(("concurrency", "needs `context` (tokens per sequence)"))
    if not _SIZE.match(str(values.get("shm_size", "1g"))):
        problems.append(("shm_size", f"{values['shm_size']!r} must look like '16g' or '512m'"))
    return problems


def parse_preset(path: Path, data: Mapping[str, Any], bundled: bool = False) -> Preset:
    """Check one preset's table and build the Preset, or raise PresetError with every problem."""
    problems: list[tuple[str, str]] = []
    kind_name = data.get("kind")
    engine = KINDS.get(kind_name) if isinstance(kind_name, str) else None
    common_input = {k: v for k, v in data.items() if k not in KINDS}
    values, found = check_table(COMMON, common_input)
    problems += found
    options: dict[str, Any] = {}
    for table_name in (k for k in data if k in KINDS):
        if engine is None or table_name != engine.name:
            problems.append(
                (
                    table_name,
                    f"table [{table_name}] does not apply to a preset of kind {kind_name!r}",
                )
            )
    if engine is not None:
        table = data.get(engine.name, {})
        if not isinstance(table, Mapping):
            problems.append((engine.name, f"must be a table ([{engine.name}])"))
            table = {}
        options, found = check_table(engine.options, table, prefix=f"{engine.name}.")
        problems += found
        if not found:
            problems += engine.cross_check(values, options)
        problems += _semantic_problems(values, engine)
        for arg in values.get("args", []):
            owner = engine.owned_flags.get(arg.split("=", 1)[0])
            if owner:
                problems.append(("args", f"{arg!r} is set by sparkdeck; use {owner} instead"))
    if problems:
        raise PresetError([FileProblem(path, key, msg) for key, msg in problems])
    assert engine is not None
    return Preset(
        id=values["id"] or path.stem,
        title=values["title"],
        kind=engine.name,
        image=values["image"].strip(),
        model=values["model"],
        port=values["port"] or engine.default_port,
        lan=values["lan"],
        args=tuple(values["args"]),
        env=dict(values["env"]),
        pass_env=tuple(values["pass_env"]),
        volumes=tuple(values["volumes"]),
        gpus=values["gpus"],
        ipc=values["ipc"] or engine.default_ipc,
        shm_size=values["shm_size"],
        hf_cache=values["hf_cache"],
        startup_timeout=float(values["startup_timeout"] or engine.default_startup_timeout),
        options=options,
        memlock=values["memlock"],
        bytes_per_token=(
            float(values["bytes_per_token"]) if values["bytes_per_token"] is not None else None
        ),
        context=values["context"],
        concurrency=values["concurrency"],
        kv_budget_gib=(
            float(values["kv_budget_gib"]) if values["kv_budget_gib"] is not None else None
        ),
        kv_cache_dtype=values["kv_cache_dtype"],
        description=values["description"],
        source=path,
        bundled=bundled,
    )


def load_file(path: Path, bundled: bool = False) -> Preset:
    """Read and check one preset file; raise PresetError naming the file on any problem."""
    try:
        data = read_toml(path)
    except TomlFileError as exc:  # unreadable, not UTF-8, not TOML, nested too deep
        raise PresetError([FileProblem(path, None, exc.reason)]) from None
    return parse_preset(path, data, bundled=bundled)

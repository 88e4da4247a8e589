"""How to point a client at the service's OpenAI endpoint, for `sparkdeck endpoint` and the
TUI's connect screen alike: the base URL, the address it listens on and who can reach it,
whether the service and its endpoint answer, the model names, whether a key is needed (and
who can switch the engine without one), and snippets to paste.

The key's *value* never leaves this process's environment: a snippet names the environment
variable (`$SPARKDECK_API_KEY`, `os.environ["SPARKDECK_API_KEY"]`), and the value is only
ever put in the Authorization header of the one request that lists the models.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparkdeck.catalog import PresetCatalog, load_catalog
from sparkdeck.config.settings import EndpointSettings
from sparkdeck.endpoint.listener import api_key, endpoint_line, is_loopback, listen_address

# (the service's pid or None, a problem or None, the endpoint's state as the service reports it)
ServiceState = Callable[[], tuple[int | None, str | None, dict[str, Any] | None]]

ASK_TIMEOUT_S = 5.0
NO_MODEL = "MODEL"  # what a snippet says when no model name is known


@dataclass(frozen=True)
class ListedModel:
    """One model a client may name: the running engine's own, or a preset's."""

    id: str
    running: bool = False
    preset: str | None = None


@dataclass(frozen=True)
class Snippet:
    """A block to paste, with what it is for."""

    title: str
    text: str


@dataclass(frozen=True)
class ConnectInfo:
    """What a client needs, read once; `models_from` says where the names came from
    ("endpoint": its /v1/models; "presets": the preset files, the endpoint not answering)."""

    base_url: str
    host: str
    port: int
    key_env: str
    key_required: bool
    models: tuple[ListedModel, ...] = ()
    models_from: str = "endpoint"
    endpoint_problem: str | None = None  # why /v1/models was not read
    service_pid: int | None = None  # None: no service answers on this user's socket
    service_problem: str | None = None  # a service of another version, say
    snippets: tuple[Snippet, ...] = field(default=())
    switch_on_request: bool = False
    endpoint_off: bool = False  # the service says its endpoint is off (endpoint_problem: why)

    @property
    def running_model(self) -> str | None:
        return next((m.id for m in self.models if m.running), None)

    @property
    def listens(self) -> str:
        """The address the endpoint is bound to (0.0.0.0:8400), not the URL shown to reach it."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def lan(self) -> bool:
        return not is_loopback(self.host)

    @property
    def anyone_local_can_switch(self) -> bool:
        """switch_on_request with no key: every local process may switch the engine."""
        return self.switch_on_request and not self.key_required

    def to_json(self) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "host": self.host,
            "port": self.port,
            "listens": self.listens,
            "lan": self.lan,
            "reachable_by": reach_line(self),
            "switch_on_request": self.switch_on_request,
            "anyone_local_can_switch": self.anyone_local_can_switch,
            "key_required": self.key_required,
            "key_env": self.key_env,
            "running": self.running_model,
            "models": [m.id for m in self.models],
            "models_from": self.models_from,
            "problem": self.endpoint_problem,
            "service_pid": self.service_pid,
            "service_problem": self.service_problem,
            "endpoint_off": self.endpoint_off,
        }


def base_url(settings: EndpointSettings) -> tuple[str, int, str]:
    """(host, port, base URL): a wildcard host is reached on loopback from this machine."""
    host, port = listen_address(settings)
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return host, port, f"http://{shown}:{port}/v1"


def ask_models(
    base: str, key: str | None, timeout: float = ASK_TIMEOUT_S
) -> tuple[tuple[ListedModel, ...], str | None]:
    """The endpoint's /v1/models as ListedModels, or () and why not."""
    import httpx  # not on the TUI's idle path: only when the connect screen or CLI asks

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        answer = httpx.get(base + "/models", headers=headers, timeout=timeout)
        answer.raise_for_status()
        data = answer.json().get("data", [])
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        return (), (
            f"the endpoint does not answer at {base} ({type(exc).__name__}): is the "
            "service running? (`sparkdeck service start`)"
        )
    return tuple(
        ListedModel(
            str(m.get("id")),
            bool(m.get("running")),
            m.get("preset") if isinstance(m.get("preset"), str) else None,
        )
        for m in data
        if isinstance(m, dict) and m.get("id")
    ), None


def preset_models(catalog: PresetCatalog) -> tuple[ListedModel, ...]:
    """Every preset's model name as the endpoint would list it (its `model`, else its id)."""
    seen: dict[str, ListedModel] = {}
    for preset in sorted(catalog.presets.values(), key=lambda p: p.id):
        name = preset.model or preset.id
        seen.setdefault(name, ListedModel(name, False, preset.id))
    return tuple(seen.values())


def read_connect_info(
    settings: EndpointSettings,
    catalog_loader: Callable[[], PresetCatalog] = load_catalog,
    service_state: ServiceState | None = None,
) -> ConnectInfo:
    """Everything the connect screen and `sparkdeck endpoint` show (blocking: a worker's).
    `service_state` asks the service (the front end's, sparkdeck.service.client.service_state):
    its pid, a problem, and the endpoint's own state as the service reports it."""
    host, port, base = base_url(settings)
    key = api_key(settings)
    pid, service_problem, endpoint = service_state() if service_state else (None, None, None)
    endpoint_off = endpoint is not None and not endpoint.get("on", True)
    models: tuple[ListedModel, ...]
    if endpoint_off:  # whatever answers on the port is another program: not asked
        models, problem = (), endpoint_line(endpoint)
    else:
        models, problem = ask_models(base, key)
    models_from = "endpoint"
    if problem is not None:
        models, models_from = preset_models(catalog_loader()), "presets"
    info = ConnectInfo(
        base,
        host,
        port,
        settings.api_key_env,
        key is not None,
        models,
        models_from,
        problem,
        pid,
        service_problem,
        switch_on_request=settings.switch_on_request,
        endpoint_off=endpoint_off,
    )
    return ConnectInfo(**{**info.__dict__, "snippets": build_snippets(info)})


def build_snippets(info: ConnectInfo) -> tuple[Snippet, ...]:
    """curl, the openai client, Open WebUI's fields and an ssh -L line, for `info`."""
    base, port, env = info.base_url, info.port, info.key_env
    model = info.running_model or (info.models[0].id if info.models else NO_MODEL)
    auth = f' -H "Authorization: Bearer ${env}"' if info.key_required else ""
    key_arg = f'os.environ["{env}"]' if info.key_required else '"none"'
    webui_key = f"${env} (its value)" if info.key_required else "anything (no key needed)"
    imports = "import os\n" if info.key_required else ""
    return (
        Snippet(
            "curl",
            f"curl {base}/chat/completions{auth} -H 'Content-Type: "
            f'application/json\' \\\n  -d \'{{"model": "{model}", "messages": '
            '[{"role": "user", "content": "Hello"}]}\'',
        ),
        Snippet(
            "openai (Python)",
            f"{imports}from openai import OpenAI\n"
            f'client = OpenAI(base_url="{base}", api_key={key_arg})\n'
            f'print(client.chat.completions.create(model="{model}",\n'
            '      messages=[{"role": "user", "content": "Hello"}])'
            ".choices[0].message.content)",
        ),
        Snippet(
            "Open WebUI (Settings > Connections > OpenAI API)",
            f"URL  {base}\n"
            f"Key  {webui_key}"
            "\n(Open WebUI in a container on this machine: run it with --network=host; an "
            "endpoint\n on 127.0.0.1 is not reachable from Docker's bridge network)",
        ),
        Snippet(
            "from a laptop",
            f"ssh -L {port}:127.0.0.1:{port} spark     # then use http://127.0.0.1:{port}/v1 there",
        ),
    )


def key_line(info: ConnectInfo) -> str:
    """Whether a key is needed, naming its variable (never its value)."""
    if info.key_required:
        return f"required: the value of ${info.key_env} in the service's environment"
    return f"none (set ${info.key_env} where the service starts to require one)"


def listens_line(info: ConnectInfo) -> str:
    """The bound address, and what a wildcard means."""
    wildcard = {
        "0.0.0.0": "every IPv4 address of this machine",
        "::": "every address of this machine",
    }.get(info.host)
    return info.listens + (f" ({wildcard})" if wildcard else "")


def reach_line(info: ConnectInfo) -> str:
    """Who can send the endpoint requests. Loopback is not private: every user of the
    machine can connect to it, so without a key it is theirs too."""
    if info.lan:
        return (
            f"the network: any machine that can reach {info.listens}, and every user of "
            f"this machine, each with the key (${info.key_env})"
        )
    if info.key_required:
        return f"processes on this machine that send the key (${info.key_env})"
    return (
        f"every user of this machine, with no key (loopback); to close it to the others, "
        f"set ${info.key_env} where the service starts and [endpoint] "
        "require_key_on_loopback = true"
    )


def switch_line(info: ConnectInfo) -> str | None:
    """Who can switch the engine through the endpoint (None: switch_on_request is off)."""
    if not info.switch_on_request:
        return None
    if info.key_required:
        return "on: a request naming another preset's model switches the engine (with the key)"
    return (
        f"on, with no key: any local process (any user of this machine) can switch the "
        f"engine by naming another preset's model; to close it set ${info.key_env} where "
        "the service starts (and require_key_on_loopback = true), or switch_on_request "
        "= false"
    )


def service_line(info: ConnectInfo) -> str:
    """The service and its endpoint in words."""
    if info.service_problem:
        return info.service_problem
    service = (
        f"running (process {info.service_pid})"
        if info.service_pid
        else "not running (`sparkdeck service start`)"
    )
    endpoint = (
        "answering"
        if info.endpoint_problem is None
        else "OFF"
        if info.endpoint_off
        else "not answering"
    )
    return f"service {service}; endpoint {endpoint}"


def model_lines(info: ConnectInfo) -> list[str]:
    """One line per model, the running one marked."""
    lines = [
        f"{m.id}{'   <- running' if m.running else ''}"
        f"{f'   (preset {m.preset})' if m.preset else ''}"
        for m in info.models
    ]
    return lines or ["none (no presets, no engine)"]


def models_note(info: ConnectInfo) -> str | None:
    """Where the names came from, when not from the endpoint itself."""
    if info.models_from == "presets":
        return "(model names from the preset files: the endpoint does not answer)"
    return None


def as_text(info: ConnectInfo) -> str:
    """What `sparkdeck endpoint` prints."""
    lines = [
        f"base URL      {info.base_url}",
        f"listens on    {listens_line(info)}",
        f"reachable by  {reach_line(info)}",
        f"API key       {key_line(info)}",
    ]
    if (switching := switch_line(info)) is not None:
        lines.append(f"switching     {switching}")
    lines.append(f"status        {service_line(info)}")
    if info.endpoint_problem:
        lines.append(f"              {info.endpoint_problem}")
    lines += [f"model         {line}" for line in model_lines(info)]
    if (note := models_note(info)) is not None:
        lines.append(f"              {note}")
    for snippet in info.snippets:
        body = "\n".join("  " + line for line in snippet.text.splitlines())
        lines += ["", f"{snippet.title}:", body]
    return "\n".join(lines)

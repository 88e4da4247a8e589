"""The endpoint's two commands: `sparkdeck endpoint` (how to point a client at the service's
OpenAI endpoint) and `sparkdeck requests [--json] [--since 10m]` (what went through it).

`endpoint` prints the base URL, whether the service and its endpoint answer, the model names
the endpoint lists, whether a key is needed (naming the environment variable, never the key),
and snippets to paste: curl, the `openai` Python client, Open WebUI's connection fields, and
an `ssh -L` line for a laptop. The text is sparkdeck.endpoint.connect_info's, which the TUI's
connect screen shows too.

`requests` reads the service's request log (sparkdeck.endpoint.request_log) from the data
dir: one line per request with its model, status, tokens, TTFT and decode speed. No prompt
or reply text is ever in it.
"""

from __future__ import annotations

import argparse
import json
import re
import time

from sparkdeck.cli.commands import CommandFailed

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def register(subparsers: argparse._SubParsersAction) -> None:
    requests = subparsers.add_parser(
        "requests", help="requests the OpenAI endpoint forwarded: model, tokens, TTFT, tok/s"
    )
    requests.add_argument("--json", action="store_true", help="a JSON list of the records")
    requests.add_argument(
        "--since", metavar="AGE", type=_age, help="only requests newer than AGE (30s, 10m, 2h, 1d)"
    )
    requests.set_defaults(run=run_requests)
    endpoint = subparsers.add_parser(
        "endpoint", help="the stable OpenAI endpoint: URL, models, ready-to-paste snippets"
    )
    endpoint.add_argument("--json", action="store_true")
    endpoint.set_defaults(run=run_endpoint)


def run_endpoint(args: argparse.Namespace) -> int:
    from sparkdeck.config.settings import SettingsError, load_settings
    from sparkdeck.endpoint.connect_info import as_text, read_connect_info
    from sparkdeck.service.client import service_state

    try:
        settings = load_settings().endpoint
    except SettingsError as exc:
        raise CommandFailed(str(exc)) from exc
    info = read_connect_info(settings, service_state=service_state)
    print(json.dumps(info.to_json()) if args.json else as_text(info))
    return 0


def _age(text: str) -> float:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not an age such as 30s, 10m, 2h, 1d")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def _cell(value: object, spec: str = "") -> str:
    return "-" if value is None else format(value, spec)


def run_requests(args: argparse.Namespace) -> int:
    from sparkdeck.endpoint.request_log import RequestLog

    log = RequestLog()
    try:
        rows = list(log.read(time.time() - args.since if args.since is not None else None))
    except OSError as exc:
        raise CommandFailed(f"cannot read {log.path}: {exc}") from exc
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print(f"no requests{' in that time' if args.since else ''} ({log.path})")
        return 0
    print(
        f"{'time':19} {'client':21} {'status':>6} {'prompt':>6} {'output':>6} "
        f"{'ttft ms':>8} {'tok/s':>8}  model"
    )
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row.get("time", 0)))
        ttft = row.get("ttft_s")
        print(
            f"{when:19} {str(row.get('client'))[:21]:21} {_cell(row.get('status')):>6} "
            f"{_cell(row.get('prompt_tokens')):>6} {_cell(row.get('output_tokens')):>6} "
            f"{_cell(ttft * 1000 if ttft is not None else None, '.1f'):>8} "
            f"{_cell(row.get('decode_tps'), '.1f'):>8}  {row.get('model') or '-'}"
            + (f"  ({row['error']})" if row.get("error") else "")
        )
    return 0

"""`python -m sparkdeck.service`: the service in the foreground, the way the detached start
and the systemd unit run it. Same as `sparkdeck service run`, without building the whole
CLI first: the long-running process then holds only what the service uses (docs/service.md).
"""

from sparkdeck.service.server import serve

raise SystemExit(serve())

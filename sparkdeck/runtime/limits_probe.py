"""Can Docker give a container the preset's resource limits? Asked before a launch touches
anything.

NVIDIA's playbooks ask for `--ulimit memlock=-1`; a Docker daemon that runs with a lower
hard limit and without CAP_SYS_RESOURCE (a sandbox, a rootless or confined daemon) refuses
it only when the container starts: after the running engine was stopped and the page cache
dropped, for nothing. runc sets a container's rlimits before it looks for the program to
run, so a probe container of the same image, with the same limits and a program that does
not exist, fails at once in one of two ways: on the rlimit (the launch would fail the same
way) or on the missing program (the limits are fine). About 0.2 s; nothing else is touched.
"""

from __future__ import annotations

import uuid

import docker
import docker.errors
import requests

from sparkdeck.runtime.create import ulimits
from sparkdeck.runtime.errors import explain_start_failure
from sparkdeck.runtime.spec import ContainerSpec
from sparkdeck.runtime.state import SCOPE

PROBE_LABEL = "io.sparkdeck.probe"
MISSING_PROGRAM = "/sparkdeck-limits-probe-not-a-program"


def limits_problem(client: docker.DockerClient, spec: ContainerSpec, scope: str) -> str | None:
    """Why Docker cannot start `spec`'s image with its limits (the advice the launch would
    give after its failure), or None when it can or the probe cannot tell. The probe carries
    the launch's scope, so each sparkdeck on one daemon can tell its own probe."""
    try:
        probe = client.containers.create(
            spec.image,
            entrypoint=[MISSING_PROGRAM],
            command=[],
            network_mode="none",
            name=f"sparkdeck-probe-{uuid.uuid4().hex[:12]}",
            labels={PROBE_LABEL: "limits", SCOPE: scope},
            ulimits=ulimits(spec),
        )
    except (docker.errors.DockerException, requests.RequestException):
        return None  # the launch's own create says what is wrong, with its advice
    try:
        probe.start()
    except (docker.errors.DockerException, requests.RequestException) as exc:
        explanation = getattr(exc, "explanation", None)
        text = str(explanation or exc)
        if "rlimit" in text.lower():
            return explain_start_failure(
                text, spec.image, spec.port.host_ip, spec.port.host_port, spec.command
            )
        return None  # the missing program, as meant: the limits were set
    finally:
        try:
            probe.remove(force=True)
        except (docker.errors.DockerException, requests.RequestException):
            pass  # removed already, or Docker went away: nothing of the engine's is left
    return None

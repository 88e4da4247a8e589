"""Generated malformed preset sets never crash the loader (hypothesis, >= 200 cases each).

Each case writes a directory of preset files - valid ones mutated at random, plus garbage
bytes - and loads it. The loader must return: every file either loads or is reported by
path, the valid control preset always loads, and nothing raises.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkdeck.catalog import load_catalog
from sparkdeck.engines import KINDS
from sparkdeck.presets import PresetError, load_file

VALID = {"title": "t", "kind": "vllm", "image": "img", "model": "m"}
KEYS = [
    "id",
    "title",
    "description",
    "kind",
    "image",
    "model",
    "port",
    "lan",
    "args",
    "env",
    "pass_env",
    "volumes",
    "gpus",
    "ipc",
    "shm_size",
    "hf_cache",
    "startup_timeout",
    "memlock",
    *KINDS,
    "bogus",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
toml_values = st.recursive(
    st.one_of(
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
        st.floats(allow_nan=True),
        st.text(max_size=30),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(
                [
                    "gpu_memory_utilization",
                    "mem_fraction_static",
                    "context",
                    "container_port",
                    "HF_TOKEN",
                    "A",
                    "x y",
                    "serve_command",
                ]
            ),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=8,
)


@st.composite
def mutated_preset(draw: Any) -> dict[str, Any]:
    data = dict(VALID)
    data["kind"] = draw(st.sampled_from([*KINDS, "nope"]))
    for _ in range(draw(st.integers(0, 4))):
        key = draw(st.sampled_from(KEYS))
        if draw(st.booleans()):
            data[key] = draw(toml_values)
        else:
            data.pop(key, None)
    return data


file_contents = st.one_of(
    mutated_preset().map(lambda d: tomli_w.dumps(d).encode()),
    st.binary(max_size=200),
    st.text(max_size=200).map(str.encode),
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=st.lists(file_contents, min_size=1, max_size=6))
def test_malformed_preset_sets_never_crash_the_loader(files: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "control.toml").write_text(tomli_w.dumps({**VALID, "id": "control"}))
        names = []
        for i, content in enumerate(files):
            path = directory / f"case{i}.toml"
            path.write_bytes(content)
            names.append(path)
        catalog = load_catalog([(directory, False)])
        assert "control" in catalog.presets
        reported = {p.path for p in catalog.problems}
        loaded = {p.source for p in catalog.presets.values()}
        for path in names:
            assert (path in reported) != (path in loaded), path  # exactly one of the two
        for problem in catalog.problems:
            assert str(problem).startswith(str(problem.path))


@settings(max_examples=250, deadline=None)
@given(data=mutated_preset())
def test_mutated_presets_load_or_raise_preset_error_only(data: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.toml"
        path.write_text(tomli_w.dumps(data))
        try:
            preset = load_file(path)
        except PresetError as exc:
            assert exc.problems and all(p.path == path for p in exc.problems)
            return
        spec = preset.container_spec()  # a preset that loads must also build a spec
        assert all(isinstance(a, str) for a in spec.command)
        assert 1 <= spec.port.host_port <= 65535

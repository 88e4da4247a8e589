"""Presets: the bundled ones, strict validation with file-and-key messages, and overrides."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparkdeck.catalog import load_catalog
from sparkdeck.config import paths
from sparkdeck.engines import KINDS
from sparkdeck.presets import PresetError, load_file

BUNDLED = sorted(paths.bundled_presets_dir().glob("*.toml"))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_every_bundled_preset_validates():
    assert len(BUNDLED) >= 7
    catalog = load_catalog()
    assert catalog.problems == []
    kinds = {p.kind for p in catalog.presets.values()}
    assert kinds == set(KINDS), "one bundled preset per engine kind, plus the custom one"
    images = {p.image for p in catalog.presets.values()}
    assert "nvcr.io/nvidia/vllm:26.05.post1-py3" in images  # NVIDIA's NGC vLLM
    assert any(i.startswith("vllm/vllm-openai") for i in images)  # upstream vLLM


def test_vllm_spec_argv_and_knob():
    spec = load_catalog().get("vllm-ngc").container_spec()
    assert spec.command[:3] == ("vllm", "serve", "Qwen/Qwen3-8B")
    i = spec.command.index("--gpu-memory-utilization")
    assert spec.command[i + 1] == "0.8"
    assert spec.port.host_ip == "127.0.0.1" and spec.port.container_port == 8000
    assert spec.ipc_mode == "host" and spec.shm_size is None
    assert spec.gpus and spec.pass_env == ("HF_TOKEN",)
    # env holds (name, value) pairs: the secret is passed by name at start, never held here
    assert "HF_TOKEN" not in dict(spec.env)
    upstream = load_catalog().get("vllm-upstream").container_spec()
    assert upstream.command[0] == "Qwen/Qwen3-8B"  # its entrypoint is already vllm serve


def test_sglang_llamacpp_trtllm_ollama_specs():
    catalog = load_catalog()
    sglang = catalog.get("sglang").container_spec().command
    assert "--enable-metrics" in sglang
    assert sglang[sglang.index("--mem-fraction-static") + 1] == "0.75"
    llama_spec = catalog.get("llamacpp").container_spec()
    llama = llama_spec.command
    assert "--metrics" in llama and llama[llama.index("-c") + 1] == "32768"
    # no mmap by the environment, which old (--no-mmap) and new (--load-mode) builds both read
    assert "--no-mmap" not in llama and dict(llama_spec.env)["LLAMA_ARG_NO_MMAP"] == "1"
    trt = catalog.get("trtllm").container_spec()
    (options_file,) = trt.files
    assert "free_gpu_memory_fraction: 0.75" in options_file.content
    assert (
        trt.command[trt.command.index("--extra_llm_api_options") + 1] == options_file.container_path
    )
    ollama = catalog.get("ollama").container_spec()
    env = dict(ollama.env)
    assert env["OLLAMA_CONTEXT_LENGTH"] == "8192" and env["OLLAMA_HOST"] == "0.0.0.0:11434"
    assert ollama.health_path == "/api/version" and ollama.metrics_path is None


def test_share_defaults_to_08_and_ceiling_is_enforced(tmp_path):
    ok = load_file(write(tmp_path / "v.toml", 'title="v"\nkind="vllm"\nimage="i"\nmodel="m"\n'))
    assert ok.options["gpu_memory_utilization"] == 0.8
    sg = load_file(write(tmp_path / "s.toml", 'title="s"\nkind="sglang"\nimage="i"\nmodel="m"\n'))
    assert sg.options["mem_fraction_static"] == 0.8
    bad = write(
        tmp_path / "greedy.toml",
        'title="v"\nkind="vllm"\nimage="i"\nmodel="m"\n[vllm]\ngpu_memory_utilization = 0.95\n',
    )
    with pytest.raises(PresetError) as info:
        load_file(bad)
    assert str(info.value) == f"{bad}: vllm.gpu_memory_utilization: 0.95 is above the ceiling 0.9"


@pytest.mark.parametrize(
    "body, key, fragment",
    [
        ('title="t"\nkind="vllm"\nimage="i"\nmodel="m"\nprot=1\n', "prot", "unknown key"),
        ('title="t"\nkind="vllm"\nimage="i"\nmodel="m"\nport="8000"\n', "port", "whole number"),
        ('title="t"\nkind="vllm"\nimage="i"\nmodel="m"\nport=70000\n', "port", "ceiling 65535"),
        ('title="t"\nkind="vllm"\nimage="i"\nmodel="m"\ngpus=1\n', "gpus", "true or false"),
        ('title="t"\nkind="vllm"\nimage="i"\n', "model", "required"),
        ('title="t"\nkind="nope"\nimage="i"\n', "kind", "not one of"),
        ('kind="vllm"\nimage="i"\nmodel="m"\n', "title", "required"),
        (
            'title="t"\nkind="vllm"\nimage="i"\nmodel="m"\n[vllm]\ngpu_memory_utilization=0\n',
            "vllm.gpu_memory_utilization",
            "above 0",
        ),
        (
            'title="t"\nkind="vllm"\nimage="i"\nmodel="m"\n[sglang]\nmem_fraction_static=0.5\n',
            "sglang",
            "does not apply",
        ),
        (
            'title="t"\nkind="vllm"\nimage="i"\nmodel="m"\n[env]\nHF_TOKEN="hf_abc"\n',
            "env.HF_TOKEN",
            "looks like a secret",
        ),
        (
            'title="t"\nkind="vllm"\nimage="i"\nmodel="m"\nargs=["--gpu-memory-utilization=0.99"]\n',
            "args",
            "use vllm.gpu_memory_utilization",
        ),
        (
            'title="t"\nkind="vllm"\nimage="i"\nmodel="m"\nvolumes=["/data"]\n',
            "volumes",
            "HOST_PATH:CONTAINER_PATH",
        ),
        ('title="t"\nkind="openai"\nimage="i"\n', "openai.container_port", "required"),
        (
            'title="t"\nkind="llamacpp"\nimage="i"\nmodel="m"\n[llamacpp]\ncontext=true\n',
            "llamacpp.context",
            "whole number",
        ),
    ],
)
def test_bad_values_name_file_and_key(tmp_path, body, key, fragment):
    path = write(tmp_path / "bad.toml", body)
    with pytest.raises(PresetError) as info:
        load_file(path)
    messages = [str(p) for p in info.value.problems]
    assert any(m.startswith(f"{path}: {key}: ") and fragment in m for m in messages), messages


def test_toml_syntax_error_names_the_file(tmp_path):
    path = write(tmp_path / "broken.toml", 'title = "unterminated\n')
    with pytest.raises(PresetError) as info:
        load_file(path)
    assert str(info.value).startswith(f"{path}: is not valid TOML")


def test_one_bad_file_does_not_stop_the_others(tmp_path):
    good = tmp_path / "dir"
    write(good / "a.toml", 'title="a"\nkind="vllm"\nimage="i"\nmodel="m"\n')
    write(good / "b.toml", 'title="b"\nkind="vllm"\nimage="i"\nmodel="m"\nport=-1\n')
    write(good / "c.toml", b"\xff\xfe".decode("latin-1"))
    catalog = load_catalog([(good, False)])
    assert list(catalog.presets) == ["a"]
    assert sorted(p.path.name for p in catalog.problems) == ["b.toml", "c.toml"]


def test_user_preset_overrides_bundled_by_id(isolated_dirs):
    write(
        isolated_dirs["config"] / "presets" / "mine.toml",
        'id="vllm-ngc"\ntitle="my vLLM"\nkind="vllm"\nimage="nvcr.io/nvidia/vllm:custom"\n'
        'model="m"\n[vllm]\ngpu_memory_utilization=0.7\n',
    )
    catalog = load_catalog()
    preset = catalog.get("vllm-ngc")
    assert (preset.title, preset.bundled, preset.options["gpu_memory_utilization"]) == (
        "my vLLM",
        False,
        0.7,
    )
    assert len([p for p in catalog.presets.values() if p.id == "vllm-ngc"]) == 1


def test_duplicate_ids_in_one_dir_are_reported(tmp_path):
    write(tmp_path / "one.toml", 'id="x"\ntitle="a"\nkind="vllm"\nimage="i"\nmodel="m"\n')
    write(tmp_path / "two.toml", 'id="x"\ntitle="b"\nkind="vllm"\nimage="i"\nmodel="m"\n')
    catalog = load_catalog([(tmp_path, False)])
    assert list(catalog.presets) == ["x"]
    assert [str(p) for p in catalog.problems] == [
        f"{tmp_path / 'two.toml'}: id: 'x' is already used by {tmp_path / 'one.toml'}"
    ]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkdeck", *args], capture_output=True, text=True, timeout=60
    )


def test_validate_command_exit_codes(tmp_path):
    good = write(tmp_path / "good.toml", 'title="a"\nkind="vllm"\nimage="i"\nmodel="m"\n')
    bad = write(
        tmp_path / "bad.toml",
        'title="a"\nkind="vllm"\nimage="i"\nmodel="m"\n[vllm]\ngpu_memory_utilization=1.5\n',
    )
    ok = _cli("presets", "validate", str(good))
    assert ok.returncode == 0 and "good.toml: ok" in ok.stdout
    failed = _cli("presets", "validate", str(good), str(bad))
    assert failed.returncode == 1
    assert f"{bad}: vllm.gpu_memory_utilization: 1.5 is above the ceiling 0.9" in failed.stderr
    assert _cli("presets", "validate").returncode == 0  # every bundled preset
    assert _cli("presets", "--bogus").returncode == 2


def test_presets_json_lists_bundled_and_names_no_secret_values(monkeypatch):
    import json

    result = _cli("presets", "--json")
    assert result.returncode == 0
    data = json.loads(result.stdout)
    assert {p["id"] for p in data["presets"]} >= {
        "vllm-ngc",
        "vllm-upstream",
        "sglang",
        "llamacpp",
        "ollama",
        "trtllm",
        "custom-openai",
    }
    assert all(p["pass_env"] == ["HF_TOKEN"] for p in data["presets"])


def test_a_secret_in_the_environment_reaches_no_spec_description_or_digest(monkeypatch):
    """The contract behind pass_env: specs, descriptions and digests hold names, never values."""
    secret = "hf_presets_only_test_value_9f3a"
    monkeypatch.setenv("HF_TOKEN", secret)
    catalog = load_catalog()
    for preset in catalog.presets.values():
        spec = preset.container_spec()
        assert secret not in repr(spec) and secret not in repr(preset.summary())
        assert all(secret not in value for _, value in spec.env)
        assert "HF_TOKEN" not in dict(spec.env)
    # the digest must not change with the secret's value (it would leak its hash otherwise)
    before = {p.id: p.container_spec().spec_hash() for p in catalog.presets.values()}
    monkeypatch.setenv("HF_TOKEN", secret + "-rotated")
    assert {p.id: p.container_spec().spec_hash() for p in load_catalog().presets.values()} == before

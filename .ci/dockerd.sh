#!/usr/bin/env bash
# Starts or stops a private Docker daemon with its own data root, exec root and socket, so the
# tests never touch a Docker that something else on the machine uses.
# Usage: dockerd.sh start DIR   (prints the DOCKER_HOST value)   |   dockerd.sh stop DIR
set -euo pipefail
cmd=${1:?start|stop}; dir=${2:?state dir}
sock="unix://$dir/docker.sock"
case "$cmd" in
start)
  mkdir -p "$dir/data" "$dir/exec"
  if DOCKER_HOST="$sock" docker version >/dev/null 2>&1; then echo "$sock"; exit 0; fi
  # A short exec root: containerd's socket paths must stay under 108 characters.
  nohup dockerd --data-root "$dir/data" --exec-root "$dir/exec" -H "$sock" \
    --pidfile "$dir/dockerd.pid" >"$dir/dockerd.log" 2>&1 &
  for _ in $(seq 1 60); do
    if DOCKER_HOST="$sock" docker version >/dev/null 2>&1; then echo "$sock"; exit 0; fi
    sleep 0.5
  done
  echo "dockerd did not come up; its log:" >&2; tail -30 "$dir/dockerd.log" >&2; exit 1 ;;
stop)
  if [ -f "$dir/dockerd.pid" ]; then
    pid=$(cat "$dir/dockerd.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
  fi ;;
*) echo "usage: dockerd.sh start|stop DIR" >&2; exit 2 ;;
esac

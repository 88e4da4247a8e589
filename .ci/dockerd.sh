#!/usr/bin/env bash
# Starts or stops a private Docker daemon with its own data root, exec root and socket, so the
# tests never touch a Docker that something else on the machine uses.
# Usage: dockerd.sh start DIR [DOCKERD-ARGS...]   (prints the DOCKER_HOST value)
#        dockerd.sh stop DIR
#
# Each daemon also gets a bridge and subnet of its own. Two daemons on the default docker0
# share its 172.17.0.0/16: their containers get the same addresses, and a port published by
# one can be answered by a container of the other (seen: a busybox test reached a
# llama-server left running by another daemon).
#
# A test's own daemon starts with --iptables=false: every dockerd that manages iptables
# deletes and re-creates the host's one DOCKER chain as it starts, so a second daemon
# starting beside the first made the first's port mapping fail ("iptables: No chain/target/
# match by that name", parallel run 20). Its published ports still work: docker-proxy
# forwards them over the bridge.
set -euo pipefail
cmd=${1:?start|stop}; dir=${2:?state dir}; shift 2
sock="unix://$dir/docker.sock"
tag=$(printf '%s' "$dir" | cksum | cut -d' ' -f1)
bridge="sdbr$(( tag % 100000 ))"
subnet="10.$(( 100 + tag % 100 )).$(( (tag / 100) % 250 )).1/24"
case "$cmd" in
start)
  mkdir -p "$dir/data" "$dir/exec"
  if DOCKER_HOST="$sock" docker version >/dev/null 2>&1; then echo "$sock"; exit 0; fi
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
    ip addr add "$subnet" dev "$bridge"
  fi
  ip link set "$bridge" up
  # A short exec root: containerd's socket paths must stay under 108 characters.
  nohup dockerd --data-root "$dir/data" --exec-root "$dir/exec" -H "$sock" --bridge "$bridge" \
    --pidfile "$dir/dockerd.pid" "$@" >"$dir/dockerd.log" 2>&1 &
  for _ in $(seq 1 60); do
    if DOCKER_HOST="$sock" docker version >/dev/null 2>&1; then echo "$sock"; exit 0; fi
    sleep 0.5
  done
  echo "dockerd did not come up; its log:" >&2; tail -30 "$dir/dockerd.log" >&2; exit 1 ;;
stop)
  if [ -f "$dir/dockerd.pid" ]; then
    pid=$(cat "$dir/dockerd.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  ip link del "$bridge" 2>/dev/null || true ;;
*) echo "usage: dockerd.sh start|stop DIR" >&2; exit 2 ;;
esac

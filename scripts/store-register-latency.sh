#!/usr/bin/env bash
# REGISTER latency through one `holdline serve` (one worker) with each location store:
# memory, persistent (redb) and Redis (a redis-server started here), `durability = "commit"`.
# Prints `holdline load register`'s latency line and totals per store (docs/scaling.md).
#
# usage: scripts/store-register-latency.sh [RATE] [USERS] [STORES]
#        REDIS_ARGS='--appendonly yes --appendfsync always' scripts/store-register-latency.sh
#        (default RATE 2000, USERS 20000, STORES "memory persistent redis")
# needs: a release build (cargo build --release), redis-server.
set -euo pipefail
rate=${1:-2000}
users=${2:-20000}
stores=${3:-memory persistent redis}
bin=${HOLDLINE:-$(dirname "$0")/../target/release/holdline}
work=$(mktemp -d)
# Ports below the ephemeral range, so no connecting socket takes one first.
rp=$((20000 + RANDOM % 5000)); sp=$((rp + 1))
# shellcheck disable=SC2086 # REDIS_ARGS is a list of arguments
redis-server --port "$rp" --bind 127.0.0.1 --save "" ${REDIS_ARGS:---appendonly no} \
  --dir "$work" >/dev/null 2>&1 &
rpid=$!
spid=
cleanup() {
  [ -n "$spid" ] && kill "$spid" 2>/dev/null || true
  kill "$rpid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 100); do redis-cli -p "$rp" ping >/dev/null 2>&1 && break; sleep 0.1; done
for store in $stores; do
  case $store in
    memory) arg=--store=memory ;;
    persistent) arg=--store=$work/persistent ;;
    redis) arg="--store=redis://127.0.0.1:$rp/0?namespace=bench" ;;
    *) echo "unknown store $store" >&2; exit 2 ;;
  esac
  "$bin" serve --listen "udp:127.0.0.1:$sp" --domain example.com --workers 1 "$arg" \
    2>"$work/serve-$store.log" &
  spid=$!
  for _ in $(seq 100); do grep -q "holdline: ready" "$work/serve-$store.log" && break; sleep 0.1; done
  "$bin" load register --target "127.0.0.1:$sp" --users "user{0..$((users - 1))}@example.com" \
    --rate "$rate" --progress=off >"$work/load-$store.log" 2>&1
  kill -TERM "$spid"; wait "$spid" || true; spid=
  echo "$store @ $rate/s: $(grep '^register ' "$work/load-$store.log")"
  echo "$store @ $rate/s: $(grep '^registrations:' "$work/load-$store.log")"
done

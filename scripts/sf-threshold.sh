#!/usr/bin/env bash
# False rejections of smart forwarding in front of a healthy next hop.
#
# One `holdline serve` (one worker, core 1) forwards calls over TCP to `holdline load uas`
# (core 0); `holdline load uac` (core 0) offers RATE calls/s for 6 s. Prints the UAC's
# totals and the server's smart-forwarding rejections
# (holdline_forward_rejected_total{reason="target_backlog"}) for the given threshold.
#
# usage: scripts/sf-threshold.sh THRESHOLD_BYTES RATE [ics|ecs|off]
#        HOLD_MS=N scripts/sf-threshold.sh ...   (smart_forwarding_hold_ms; default: the server's)
# needs: a release build (cargo build --release), taskset, ss, curl, python3.
set -euo pipefail
th=$1
rate=$2
mode=${3:-ics}
bin=${HOLDLINE:-$(dirname "$0")/../target/release/holdline}
work=$(mktemp -d)
# Ports below the ephemeral range, so no connecting socket takes one first.
p=$((20000 + RANDOM % 5000)); u=$((p + 1)); m=$((p + 2))
printf '[overload]\nsmart_forwarding = "%s"\nsmart_forwarding_threshold = %s\n' "$mode" "$th" >"$work/sf.toml"
if [ -n "${HOLD_MS:-}" ]; then
    printf 'smart_forwarding_hold_ms = %s\n' "$HOLD_MS" >>"$work/sf.toml"
fi
taskset -c 0 "$bin" load uas --transport tcp --listen "127.0.0.1:$u" --max-time 30 \
    --progress off >"$work/uas.log" 2>&1 &
uas=$!
taskset -c 1 "$bin" serve --config "$work/sf.toml" --listen "tcp:127.0.0.1:$p" \
    --route "*=tcp:127.0.0.1:$u" --store memory --workers 1 --metrics "127.0.0.1:$m" \
    >"$work/serve.log" 2>&1 &
srv=$!
trap 'kill $srv $uas 2>/dev/null || true' EXIT
for _ in $(seq 50); do
    if ss -ltn | grep -q ":$p " && ss -ltn | grep -q ":$u "; then break; fi
    sleep 0.1 # bounded wait for the two listeners (5 s)
done
taskset -c 0 "$bin" load uac --transport tcp --target "127.0.0.1:$p" --rate "$rate" \
    --duration 6 --drain 5 --max-time 20 --progress off --json "$work/uac.json" \
    >"$work/uac.log" 2>&1
sf=$(curl -s "127.0.0.1:$m/metrics" |
    awk '/^holdline_forward_rejected_total\{.*reason="target_backlog"/ {s += $2} END {print s + 0}')
python3 - "$work/uac.json" "$th" "$rate" "$mode" "$sf" "${HOLD_MS:-default}" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["totals"]
print(f"threshold={sys.argv[2]} hold_ms={sys.argv[6]} rate={sys.argv[3]} mode={sys.argv[4]} attempted={t['attempted']} "
      f"ok={t['calls_ok']} r503={t['r503']} smart_forwarding_rejected={sys.argv[5]}")
PY
rm -rf "$work"

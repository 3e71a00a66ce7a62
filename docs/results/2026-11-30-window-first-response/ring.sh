#!/bin/bash
# Seed 004's window in front of an idle downstream whose callees ring: calls carried with
# the window's delay measured to the first response (the default) and to the final one.
# UAC (20 calls/s, 10 s) -> upstream holdline (--feedback window) -> downstream holdline
# (--overload none) -> holdline load uas --answer-delay-ms D. Writes ring.csv in the
# current directory and the per-run reports under runs/.
# usage: ring.sh [HOLDLINE_BINARY]   (default: target/release/holdline of the source tree)
set -eu
B=${1:-$(cd "$(dirname "$0")/../../.." && pwd)/target/release/holdline}
mkdir -p runs
echo "answer_delay_ms,window_delay,attempted,calls_ok,r503,window_full" > ring.csv
for ans in 0 1000 3000; do
  for wd in final first-response; do
    tag=ring-$ans-$wd
    printf '[overload]\nwindow_delay = "%s"\n' "$wd" > runs/$tag-up.toml
    $B load uas --listen 127.0.0.1:16001 --answer-delay-ms $ans --max-time 40 --progress off \
      --json runs/$tag-uas.json > runs/$tag-uas.log 2>&1 & U=$!
    $B serve --listen=udp:127.0.0.1:16002 --route='*=udp:127.0.0.1:16001' --workers=1 \
      --store=memory --overload=none > runs/$tag-down.log 2>&1 & D=$!
    $B serve --listen=udp:127.0.0.1:16003 --route='*=udp:127.0.0.1:16002' --workers=1 \
      --store=memory --metrics=127.0.0.1:16013 --feedback=window \
      --config=runs/$tag-up.toml > runs/$tag-up.log 2>&1 & P=$!
    for _ in $(seq 100); do curl -sf 127.0.0.1:16013/metrics > /dev/null && break; sleep 0.1; done
    $B load uac --target 127.0.0.1:16003 --to 'user{0..99}@x.lab' --rate 20 --duration 10 \
      --drain 6 --max-time 30 --progress off --json runs/$tag-uac.json > runs/$tag-uac.log 2>&1
    full=$(curl -s 127.0.0.1:16013/metrics | grep 'holdline_feedback_rejected_total{.*window_full' | awk '{print $2}')
    kill $U $D $P; wait $U $D $P 2>/dev/null || true
    python3 - "$ans" "$wd" "$full" runs/$tag-uac.json >> ring.csv <<'PY'
import json, sys
t = json.load(open(sys.argv[4]))["totals"]
print(f"{sys.argv[1]},{sys.argv[2]},{t['attempted']},{t['calls_ok']},{t['r503']},{sys.argv[3]}")
PY
    tail -n 1 ring.csv
  done
done

#!/bin/bash
# Flood protection under a SIP scanner (docs/security.md): legitimate calls from 127.0.0.1
# (trusted) at 2,000/s for 20 s while SIPp sweeps the server from 127.0.0.2 with 20,000
# OPTIONS/s. usage: scripts/flood-demo.sh none|on|off [OUTDIR]
#   none: no attacker; on: attacker, [flood] on; off: attacker, [flood] enabled = false.
# Needs a release build (cargo build --release), SIPp, taskset and curl. Every process is
# bounded in time and stopped by PID.
set -u
MODE=${1:?none|on|off}
OUT=${2:-flood-demo}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
EXE=$ROOT/target/release/holdline
mkdir -p "$OUT"
printf 'trusted = ["127.0.0.1"]\n[flood]\nenabled = %s\n' "$([ "$MODE" = off ] && echo false || echo true)" >"$OUT/serve.toml"
taskset -c 1 "$EXE" serve --config="$OUT/serve.toml" --listen=udp:127.0.0.1:26060 \
    --route='*=udp:127.0.0.1:26070' --workers=1 --store=memory --metrics=127.0.0.1:26080 2>"$OUT/serve.log" &
SP=$!
taskset -c 0 "$EXE" load uas --listen=127.0.0.1:26070 --max-time=40 --progress=off --json="$OUT/uas.json" 2>"$OUT/uas.log" &
UP=$!
sleep 1 # the listeners bind (a demo script, not a test)
AP=
if [ "$MODE" != none ]; then
    taskset -c 0 timeout 25 sipp -sf "$ROOT/lab/scenarios/scanner_options.xml" -i 127.0.0.2 -p 26090 \
        -r 20000 -m 500000 -timeout 25s -timeout_error 127.0.0.1:26060 >/dev/null 2>&1 &
    AP=$!
fi
taskset -c 0 "$EXE" load uac --target=127.0.0.1:26060 --rate=2000 --duration=20 --drain=5 \
    --max-time=30 --json="$OUT/uac-$MODE.json" --progress=off 2>"$OUT/uac-$MODE.log"
curl -s 127.0.0.1:26080/metrics >"$OUT/metrics-$MODE.txt"
[ -n "$AP" ] && kill "$AP" 2>/dev/null
kill "$SP"; kill -TERM "$UP"; wait "$UP" 2>/dev/null; wait "$SP" 2>/dev/null
python3 - "$OUT/uac-$MODE.json" "$MODE" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); t = r["totals"]
print(f"{sys.argv[2]}: calls {t['calls_ok']}/{t['attempted']}, PDD p50 {r['pdd_p50_ms']} ms p99 {r['pdd_p99_ms']} ms")
PY
grep -E 'reason="flood"|flood_offenders|method="OPTIONS"' "$OUT/metrics-$MODE.txt"

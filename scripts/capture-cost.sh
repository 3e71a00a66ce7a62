#!/bin/bash
# What SIP capture (HEP v3, [capture]) costs (issue 22 item 6, docs/operations.md): the same
# `holdline lab soak` point (one worker on core 1, holdline load uac/uas on core 0, UDP) with
# capture off, on to a UDP collector and on to a TCP collector, in turn, REPEAT times. The UDP
# sink is a socket bound on 127.0.0.1:SINK that never reads (the kernel drops what overflows
# its buffer: the server pays the whole send path, the sink no CPU); the TCP sink on the same
# port accepts and reads into a discard buffer (on core 0).
# usage: scripts/capture-cost.sh [RATES] [DURATION] [REPEAT] [OUTDIR] [MODES]
#        (default "3000,8000" 20 3 capture-cost "off udp tcp tcp@0.1"; RATES comma-separated;
#        a mode is off, udp or tcp, with @F for `sample = F`)
# Writes OUTDIR/results.csv: mode, repeat, rate, attempted, completed, completed ratio, 503s,
# server CPU µs per completed call, server busy share. Needs a release build and taskset.
set -u
RATES=${1:-3000,8000}
DURATION=${2:-20}
REPEAT=${3:-3}
OUT=${4:-capture-cost}
MODES=${5:-off udp tcp tcp@0.1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
EXE=${HOLDLINE_EXE:-$ROOT/target/release/holdline}
SINK=${SINK_PORT:-27960}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
python3 -c "
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
s.bind(('127.0.0.1', $SINK))
time.sleep(24 * 3600)
" &
SINK_PID=$!
taskset -c 0 python3 -c "
import socket, threading
l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(('127.0.0.1', $SINK))
l.listen(16)
def drain(c):
    buf = bytearray(1 << 20)
    while c.recv_into(buf):
        pass
while True:
    c, _ = l.accept()
    threading.Thread(target=drain, args=(c,), daemon=True).start()
" &
TCP_SINK_PID=$!
trap 'kill $SINK_PID $TCP_SINK_PID 2>/dev/null' EXIT
echo "mode,repeat,rate,attempted,completed,completed_ratio,r503,cpu_us_per_call,server_busy" >"$OUT/results.csv"
for rep in $(seq 1 "$REPEAT"); do
    for mode in $MODES; do
        dir="$OUT/$mode-$rep"
        extra=()
        if [ "$mode" != off ]; then
            extra=(--capture "${mode%@*}:127.0.0.1:$SINK")
            [ "${mode#*@}" != "$mode" ] && extra+=(--capture-sample "${mode#*@}")
        fi
        "$EXE" lab soak --rate "$RATES" --duration "$DURATION" --exe "$EXE" --out "$dir" \
            "${extra[@]}" >"$dir.log" 2>&1 || echo "soak $mode $rep failed: see $dir.log" >&2
        python3 - "$dir/results.json" "$mode" "$rep" >>"$OUT/results.csv" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
for p in r["points"]:
    print(",".join(str(x) for x in [sys.argv[2], sys.argv[3], p["rate"], p["attempted"],
        p["completed"], round(p["completed_ratio"], 5), p.get("r503", ""),
        round(p["cpu_us_per_call"], 1), round(p["server_busy"], 3)]))
EOF
        tail -n +2 "$OUT/results.csv" | tail -n "$(echo "$RATES" | tr ',' '\n' | wc -l)"
    done
done

#!/bin/bash
# What SIP capture (HEP v3, [capture]) costs (issue 22 item 6, docs/operations.md): the same
# `holdline lab soak` point (one worker on core 1, holdline load uac/uas on core 0, UDP) with
# capture off and on, mode after mode, REPEAT times. The UDP sink is a socket bound on
# 127.0.0.1:SINK that never reads (the kernel drops what overflows its buffer: the server pays
# the whole send path, the sink no CPU); the TCP sink on the same port accepts, reads into a
# discard buffer (on core 0) and counts the HEP packets of each connection.
# usage: scripts/capture-cost.sh [RATES] [DURATION] [REPEAT] [OUTDIR] [MODES]
#        (default "8000" 20 3 capture-cost "off tcp tcp+normal udp tcp@0.1"; RATES
#        comma-separated; a mode is off, or udp|tcp with @F for `sample = F` and +normal for
#        `priority = "normal"` (default background))
# Writes OUTDIR/results.csv: mode, repeat, rate, attempted, completed, completed ratio, 503s,
# server CPU µs per completed call (all threads), the workers' threads' CPU µs per completed
# call, the capture thread's, server busy share, and HEP packets the TCP sink received per
# completed call. The thread figures come from /proc/PID/task, read every 0.5 s while the
# server runs (the last reading before it exits: the load has ended by then). With HOG=1 a
# busy loop shares the server's core (1) for the whole run: the worker cannot have the core
# to itself, so a rate it would carry alone overloads it (capture at full load: what it takes
# from the calls, and what it still captures). Needs a release build, taskset and a quiet
# machine.
set -u
RATES=${1:-8000}
DURATION=${2:-20}
REPEAT=${3:-3}
OUT=${4:-capture-cost}
MODES=${5:-off tcp tcp+normal udp tcp@0.1}
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
: >"$OUT/.sink"
taskset -c 0 python3 -c "
import socket, threading
l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(('127.0.0.1', $SINK))
l.listen(16)
def drain(c):
    buf = bytearray(1 << 20)
    pending = b''
    packets = 0
    while True:
        n = c.recv_into(buf)
        if not n:
            break
        pending += bytes(buf[:n])
        at = 0
        while len(pending) - at >= 6:
            size = int.from_bytes(pending[at + 4:at + 6], 'big')
            if len(pending) - at < size:
                break
            at += size
            packets += 1
        pending = pending[at:]
    with open('$OUT/.sink', 'a') as f:
        f.write(f'{packets}\n')
while True:
    c, _ = l.accept()
    threading.Thread(target=drain, args=(c,), daemon=True).start()
" &
TCP_SINK_PID=$!
# The server's threads' CPU ticks, by server PID: \"PID workers capture\" lines, the last
# reading of each server kept.
: >"$OUT/.ticks"
(
    while true; do
        for P in $(pgrep -f "holdline serve"); do
            w=0
            c=0
            for t in /proc/$P/task/*; do
                comm=$(cat "$t/comm" 2>/dev/null) || continue
                ticks=$(awk '{print $14 + $15}' "$t/stat" 2>/dev/null) || continue
                case $comm in
                holdline-w*) w=$((w + ticks)) ;;
                holdline-captur*) c=$((c + ticks)) ;;
                esac
            done
            echo "$P $w $c" >>"$OUT/.ticks"
        done
        sleep 0.5
    done
) &
TICKS_PID=$!
HOG_PID=
if [ "${HOG:-0}" = 1 ]; then
    taskset -c 1 python3 -c "
while True:
    pass
" &
    HOG_PID=$!
fi
trap 'kill $SINK_PID $TCP_SINK_PID $TICKS_PID $HOG_PID 2>/dev/null' EXIT
HZ=$(getconf CLK_TCK)
echo "mode,repeat,rate,attempted,completed,completed_ratio,r503,cpu_us_per_call,worker_us_per_call,capture_us_per_call,server_busy,hep_per_call" >"$OUT/results.csv"
for rep in $(seq 1 "$REPEAT"); do
    for mode in $MODES; do
        dir="$OUT/$mode-$rep"
        extra=()
        base=${mode%+*}
        if [ "$mode" != off ]; then
            extra=(--capture "${base%@*}:127.0.0.1:$SINK")
            [ "${base#*@}" != "$base" ] && extra+=(--capture-sample "${base#*@}")
            [ "${mode#*+}" != "$mode" ] && extra+=(--capture-priority "${mode#*+}")
        fi
        ticks_before=$(wc -l <"$OUT/.ticks")
        sink_before=$(wc -l <"$OUT/.sink")
        "$EXE" lab soak --rate "$RATES" --duration "$DURATION" --exe "$EXE" --out "$dir" \
            "${extra[@]}" >"$dir.log" 2>&1 || echo "soak $mode $rep failed: see $dir.log" >&2
        sleep 1 # the sink's count of the last connection
        tail -n +$((ticks_before + 1)) "$OUT/.ticks" >"$dir.ticks"
        tail -n +$((sink_before + 1)) "$OUT/.sink" >"$dir.sink"
        python3 - "$dir" "$mode" "$rep" "$HZ" >>"$OUT/results.csv" <<'EOF'
import json, sys
d, mode, rep, hz = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
r = json.load(open(d + "/results.json"))
last = {}
for line in open(d + ".ticks"):
    pid, w, c = line.split()
    last[pid] = (int(w), int(c))  # servers in the order they ran; the last reading each
servers = list(last.values())
sink = [int(x) for x in open(d + ".sink").read().split()]
for i, p in enumerate(r["points"]):
    done = max(p["completed"], 1)
    w, c = servers[i] if i < len(servers) else (0, 0)
    hep = sink[i] / done if mode.startswith("tcp") and i < len(sink) else ""
    print(",".join(str(x) for x in [mode, rep, p["rate"], p["attempted"], p["completed"],
        round(p["completed_ratio"], 5), p.get("r503", ""), round(p["cpu_us_per_call"], 1),
        round(w * 1e6 / hz / done, 1), round(c * 1e6 / hz / done, 1),
        round(p["server_busy"], 3), round(hep, 2) if hep != "" else ""]))
EOF
        tail -n +2 "$OUT/results.csv" | tail -n "$(echo "$RATES" | tr ',' '\n' | wc -l)"
    done
done

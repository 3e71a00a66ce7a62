#!/bin/bash
# Phones on their own TCP connections, registered and refreshing (issue 21 item 4,
# docs/benchmarks.md "Phones on their own TCP connections"): holdline serve (one worker on
# core 1, the default persistent store, limits.max_connections raised to fit) and
# `holdline load register --transport tcp --connections N` on core 0: N phones, phone u on
# connection u, the connections spread over 127.0.0.2 and 127.0.0.3, registering at RATE/s,
# each re-registering REFRESH seconds after its last success (Expires 2 x REFRESH) for
# DURATION seconds. The server's RSS, bindings and open connections are sampled every second.
# usage: scripts/phones.sh [N] [REFRESH_S] [DURATION_S] [RATE] [OUTDIR]
#        (default 19000 60 300 1000 phones): N is bounded by the open-file hard limit of
#        both processes (ulimit -Hn; one descriptor per connection).
# Writes OUTDIR/server.csv, register.csv, register.json, summary.json and phones.svg.
# Needs a release build, taskset, curl. Every process is bounded and stopped by PID.
set -u
N=${1:-19000}
REFRESH=${2:-60}
DURATION=${3:-300}
RATE=${4:-1000}
OUT=${5:-phones}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
EXE=$ROOT/target/release/holdline
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -rf "$OUT/data"
P=27460 M=27461
printf 'data_dir = "%s/data"\n[limits]\nmax_connections = %s\n' "$OUT" $((N + 500)) >"$OUT/serve.toml"
taskset -c 1 "$EXE" serve --config="$OUT/serve.toml" --listen=tcp:127.0.0.1:$P --domain=example.com \
    --workers=1 --metrics=127.0.0.1:$M 2>"$OUT/serve.log" &
SP=$!
for _ in $(seq 50); do curl -s -o /dev/null 127.0.0.1:$M/metrics && break; sleep 0.1; done
grep "open-file" "$OUT/serve.log"
metric() { awk -v n="$1" '$1 ~ "^"n"({|$)" {s += $2} END {print s + 0}' "$2"; }
echo "t_s,rss_kb,bindings,connections_open,registers_in" >"$OUT/server.csv"
sample() {
    curl -s 127.0.0.1:$M/metrics >"$OUT/.m"
    echo "$1,$(awk '/^VmRSS/ {print $2}' /proc/$SP/status),$(metric holdline_store_bindings "$OUT/.m"),$(metric holdline_connections_open "$OUT/.m"),$(grep '^holdline_sip_requests_in_total{.*method="REGISTER"' "$OUT/.m" | awk '{s += $2} END {print s + 0}')" >>"$OUT/server.csv"
}
sample 0
taskset -c 0 "$EXE" load register --transport=tcp --target=127.0.0.1:$P --connections="$N" \
    --local-ips=127.0.0.2,127.0.0.3 --users="phone{0..$((N - 1))}@example.com" --rate="$RATE" \
    --refresh="$REFRESH" --duration="$DURATION" --expires=$((2 * REFRESH)) --drain=20 \
    --max-time=$((DURATION + 60)) --progress=lines --csv="$OUT/register.csv" \
    --json="$OUT/register.json" 2>"$OUT/register.log" >"$OUT/register.out" &
LP=$!
start=$(date +%s.%N)
while kill -0 $LP 2>/dev/null; do # bounded: the generator stops by its --max-time
    sleep 1
    t=$(echo "$(date +%s.%N) - $start" | bc)
    sample "$t"
    [ $(( ${t%.*} % 30 )) -eq 0 ] && tail -1 "$OUT/server.csv"
done
wait $LP
kill $SP; wait $SP 2>/dev/null
python3 - "$OUT" "$N" <<'PY'
import csv, json, sys
out, n = sys.argv[1], int(sys.argv[2])
rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(open(f"{out}/server.csv"))]
rep = json.load(open(f"{out}/register.json"))
t = rep["totals"]
idle = rows[0]["rss_kb"]
# Connections are opened before the registrations (at RATE/s) are done: from the first
# sample with every connection open to the first with every phone bound, the RSS grows with
# the bindings alone (bytes per binding); what the connected sample holds above the idle
# server, less its bindings, is the connections' (bytes per connection).
conn = next((r for r in rows if r["connections_open"] >= n), None)
full = next((r for r in rows if r["bindings"] >= n), None)
s = {
    "phones": n,
    "register_totals": t,
    "rss_idle_mb": idle / 1024,
    "rss_max_mb": max(r["rss_kb"] for r in rows) / 1024,
    "rss_end_mb": rows[-1]["rss_kb"] / 1024,
    "registers_in": rows[-1]["registers_in"],
}
if conn and full and full["bindings"] > conn["bindings"]:
    per_binding = (full["rss_kb"] - conn["rss_kb"]) * 1024 / (full["bindings"] - conn["bindings"])
    s["rss_connected_mb"] = conn["rss_kb"] / 1024
    s["rss_all_bound_mb"] = full["rss_kb"] / 1024
    s["all_bound_at_s"] = full["t_s"]
    s["bytes_per_binding"] = per_binding
    s["bytes_per_connection"] = ((conn["rss_kb"] - idle) * 1024 - per_binding * conn["bindings"]) / n
json.dump(s, open(f"{out}/summary.json", "w"), indent=2)
print(json.dumps(s, indent=2))
W, H, x0, y0 = 720, 320, 60, 270
tmax = max(r["t_s"] for r in rows) or 1
rmax = max(r["rss_kb"] for r in rows) * 1.1
def line(key, top, col):
    pts = " ".join(f'{x0 + r["t_s"] / tmax * 600:.1f},{y0 - r[key] / top * 230:.1f}' for r in rows)
    return f'<polyline points="{pts}" fill="none" stroke="{col}" stroke-width="2"/>'
svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">'
       f'<rect width="100%" height="100%" fill="white"/>'
       f'<text x="{W/2}" y="18" text-anchor="middle">{n} phones on their own TCP connections: server RSS (max {rmax/1.1/1024:.0f} MB) and bindings (max {n})</text>'
       f'<line x1="{x0}" y1="{y0}" x2="{x0+600}" y2="{y0}" stroke="black"/><line x1="{x0}" y1="40" x2="{x0}" y2="{y0}" stroke="black"/>'
       + line("rss_kb", rmax, "#4477aa") + line("bindings", n * 1.1, "#cc6677") + line("connections_open", n * 1.1, "#228833")
       + f'<text x="{x0+10}" y="54" fill="#4477aa">RSS</text><text x="{x0+50}" y="54" fill="#cc6677">bindings</text><text x="{x0+120}" y="54" fill="#228833">connections open</text>'
       + "".join(f'<text x="{x0 + k / 5 * 600:.0f}" y="{y0+16}" text-anchor="middle">{k / 5 * tmax:.0f} s</text>' for k in range(6))
       + '</svg>')
open(f"{out}/phones.svg", "w").write(svg)
PY

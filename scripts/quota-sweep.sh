#!/usr/bin/env bash
# Overload under a real CPU quota, measured honestly: one `holdline serve` (one worker, 8 MiB
# UDP buffers) in a cgroup v1 CPU group (QUOTA_US per 10 ms, default 2500: 25% of a core),
# pinned to core 1; `holdline load uas` and `holdline load uac` (Poisson calls over UDP, 20 s
# by default) on core 0. For each offered rate and mechanism it records the goodput that came
# *during* the load phase (`goodput_in_load_cps`), the steady rate of 200 OKs (seconds 4 to the
# end of the load), and the drain-inflated `goodput_cps` beside it, with PDD, 503s and
# retransmissions. Root (cgroups). After `cargo build --release -p holdline`.
#
# Usage: scripts/quota-sweep.sh OUTDIR [SECONDS]   (SECONDS = plot: redraw the plot only)
#   RATES="2780 4170 5560 11120 19460 27800"  offered calls/s
#   MECHS="default none"                      default: holdline's defaults; none: --overload none
#   EXTRA_TOML='[overload]\nudp_invite_recv_buffer = 1048576\n'  appended to the server config
# Writes OUTDIR/points.csv, OUTDIR/goodput.svg and each point's files in OUTDIR/MECH-RATE/.
set -euo pipefail
OUT=${1:?usage: scripts/quota-sweep.sh OUTDIR [SECONDS]}
DUR=${2:-20}
BIN=$(cd "$(dirname "$0")/.." && pwd)/target/release/holdline
[ -x "$BIN" ] || { echo "quota-sweep: build first: cargo build --release -p holdline" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "quota-sweep: needs root (cgroup v1 CPU group)" >&2; exit 2; }
[ -d /sys/fs/cgroup/cpu ] || { echo "quota-sweep: no cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu" >&2; exit 2; }
mkdir -p "$OUT"
# `scripts/quota-sweep.sh OUTDIR plot`: redraw goodput.svg from OUTDIR/points.csv only.
PLOT_ONLY=0
[ "$DUR" = plot ] && PLOT_ONLY=1
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

point() { # MECH RATE DIR
  local mech=$1 rate=$2 d=$3 extra=()
  [ "$mech" = none ] && extra=(--overload none)
  mkdir -p "$d"
  local cg=/sys/fs/cgroup/cpu/holdline-quota-sweep-$$
  mkdir -p "$cg"
  echo 10000 > "$cg/cpu.cfs_period_us"; echo "${QUOTA_US:-2500}" > "$cg/cpu.cfs_quota_us"
  local p u m; p=$(free_port); u=$(free_port); m=$(free_port)
  printf "[limits]\nudp_recv_buffer = 8388608\nudp_send_buffer = 8388608\n${EXTRA_TOML:-}" > "$d/holdline.toml"
  sh -c 'echo $$ > "$0"; exec "$@"' "$cg/cgroup.procs" taskset -c 1 "$BIN" serve --config "$d/holdline.toml" \
    --listen "udp:127.0.0.1:$p" --metrics "127.0.0.1:$m" --workers 1 --store memory \
    --route "*=udp:127.0.0.1:$u" "${extra[@]}" 2> "$d/serve.log" &
  local sp=$!
  taskset -c 0 "$BIN" load uas --listen "127.0.0.1:$u" --duration $((DUR + 45)) --progress off > "$d/uas.log" 2>&1 &
  local up=$!
  for _ in $(seq 100); do curl -sf "127.0.0.1:$m/metrics" > /dev/null && break; sleep 0.1; done
  taskset -c 0 "$BIN" load uac --target "127.0.0.1:$p" --rate "$rate" --duration "$DUR" --progress off \
    --json "$d/uac.json" --csv "$d/uac.csv" > "$d/uac.log" 2>&1 || true
  curl -sf "127.0.0.1:$m/metrics" > "$d/metrics.txt" || true
  grep nr_throttled "$cg/cpu.stat" > "$d/cpu.stat" || true
  kill "$sp" "$up" 2> /dev/null || true
  wait "$sp" "$up" 2> /dev/null || true
  rmdir "$cg" 2> /dev/null || true
}

[ "$PLOT_ONLY" = 1 ] || {
echo "mechanism,offered_cps,goodput_in_load_cps,r200_steady_cps,goodput_cps,pdd_p50_ms,pdd_p99_ms,r503,retrans_invite,retrans_200,calls_ok,attempted" > "$OUT/points.csv"
for r in ${RATES:-2780 4170 5560 11120 19460 27800}; do
  for mech in ${MECHS:-default none}; do
    echo "quota-sweep: $mech at $r calls/s for $DUR s" >&2
    point "$mech" "$r" "$OUT/$mech-$r"
    python3 - "$OUT/$mech-$r" "$mech" "$r" >> "$OUT/points.csv" <<'PY'
import csv, json, sys
d, mech, rate = sys.argv[1:4]
j = json.load(open(d + "/uac.json"))
rows = list(csv.DictReader(open(d + "/uac.csv")))
steady = [float(x["r200"]) for x in rows if 3 < float(x["t_s"]) <= float(j["load_duration_s"])]
t = j["totals"]
print(f"{mech},{rate},{j['goodput_in_load_cps']:.0f},{sum(steady) / max(len(steady), 1):.0f},"
      f"{j['goodput_cps']:.0f},{j['pdd_p50_ms']:.1f},{j['pdd_p99_ms']:.1f},{t['r503']},"
      f"{t['retrans_invite']},{t['retrans_200']},{t['calls_ok']},{t['attempted']}")
PY
    tail -n 1 "$OUT/points.csv" >&2
  done
done
}
# A plot a person can look at: goodput during the load (solid) and drain-inflated (dashed).
python3 - "$OUT" <<'PY'
import csv, sys
out = sys.argv[1]
pts = list(csv.DictReader(open(out + "/points.csv")))
W, H, L, B = 720, 440, 70, 50
xs = sorted({float(p["offered_cps"]) for p in pts})
ymax = max(max(float(p["goodput_cps"]), float(p["goodput_in_load_cps"])) for p in pts) * 1.1
xmax = max(xs) * 1.05
X = lambda v: L + v / xmax * (W - L - 20)
Y = lambda v: H - B - v / ymax * (H - B - 30)
colors = {"default": "#1f77b4", "none": "#d62728"}
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{W/2}" y="18" text-anchor="middle" font-size="14">goodput under a CPU quota: during the load (solid) vs drain-inflated (dashed)</text>',
       f'<line x1="{L}" y1="{H-B}" x2="{W-20}" y2="{H-B}" stroke="black"/>',
       f'<line x1="{L}" y1="{H-B}" x2="{L}" y2="30" stroke="black"/>',
       f'<text x="{W/2}" y="{H-12}" text-anchor="middle">offered calls/s</text>',
       f'<text x="16" y="{H/2}" transform="rotate(-90 16 {H/2})" text-anchor="middle">calls/s</text>']
for i in range(6):
    v = ymax * i / 5
    svg.append(f'<text x="{L-6}" y="{Y(v)+4:.0f}" text-anchor="end">{v:.0f}</text>')
for x in xs:
    svg.append(f'<text x="{X(x):.0f}" y="{H-B+16}" text-anchor="middle">{x:.0f}</text>')
k = 0
for mech in sorted({p["mechanism"] for p in pts}):
    c = colors.get(mech, "#2ca02c")
    mine = sorted((p for p in pts if p["mechanism"] == mech), key=lambda p: float(p["offered_cps"]))
    for field, dash in (("goodput_in_load_cps", ""), ("goodput_cps", ' stroke-dasharray="6 4"')):
        path = " ".join(f"{X(float(p['offered_cps'])):.1f},{Y(float(p[field])):.1f}" for p in mine)
        svg.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
    svg.append(f'<text x="{L+10}" y="{40+16*k}" fill="{c}">{mech}</text>')
    k += 1
svg.append("</svg>")
open(out + "/goodput.svg", "w").write("\n".join(svg))
PY
echo "quota-sweep: done; $OUT/points.csv, $OUT/goodput.svg" >&2

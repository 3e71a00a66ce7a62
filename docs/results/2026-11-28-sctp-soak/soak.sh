#!/bin/bash
# soak.sh RATE DURATION WORKERS OUTDIR: holdline load uac -> A (UDP) -> SCTP -> B -> holdline load uas on
# loopback (as ../2026-11-28-sctp/chain.sh), sampling both servers' RSS every 5 s into OUTDIR/rss.csv.
# HOLDLINE: the binary (default target/release/holdline). Every process is stopped by its PID.
set -u
B=${HOLDLINE:-target/release/holdline}; rate=$1; dur=$2; w=$3; out=$4
mkdir -p "$out"
$B load uas --listen 127.0.0.1:5092 --duration $((dur+15)) --json "$out/uas.json" > "$out/uas.log" 2>&1 & UAS=$!
$B serve --listen sctp:127.0.0.1:9902 --listen udp:127.0.0.1:5082 --route '*=udp:127.0.0.1:5092' --store memory \
  --workers $w --metrics 127.0.0.1:9482 > "$out/b.log" 2>&1 & BP=$!
$B serve --listen udp:127.0.0.1:5081 --listen sctp:127.0.0.1:9901 --route '*=sctp:127.0.0.1:9902' --store memory \
  --workers $w --metrics 127.0.0.1:9481 > "$out/a.log" 2>&1 & AP=$!
for i in $(seq 1 50); do curl -sf 127.0.0.1:9481/metrics >/dev/null && curl -sf 127.0.0.1:9482/metrics >/dev/null && break; sleep 0.1; done
echo "t_s,rss_a_kb,rss_b_kb" > "$out/rss.csv"
( t=0; while kill -0 $AP 2>/dev/null && [ $t -le $((dur+15)) ]; do
    echo "$t,$(ps -o rss= -p $AP | tr -d ' '),$(ps -o rss= -p $BP | tr -d ' ')" >> "$out/rss.csv"; sleep 5; t=$((t+5)); done ) & SAMP=$!
$B load uac --target 127.0.0.1:5081 --rate $rate --duration $dur --hold fixed:1 --to bob@example.com \
  --json "$out/uac.json" --max-time $((dur+12)) --progress lines > "$out/uac.log" 2>&1
for p in 9481 9482; do curl -s 127.0.0.1:$p/metrics > "$out/metrics-$p.txt"; done
kill $AP $BP $UAS $SAMP 2>/dev/null; wait $AP $BP $UAS $SAMP 2>/dev/null
grep -E "calls:|pdd" "$out/uac.log"
python3 - "$out" <<'PY'
import csv, sys
out = sys.argv[1]
rows = [r for r in csv.DictReader(open(f"{out}/rss.csv")) if r["rss_a_kb"] and r["rss_b_kb"]]
W, H, P = 640, 360, 50
tmax = max(float(r["t_s"]) for r in rows) or 1
ymax = max(max(int(r["rss_a_kb"]), int(r["rss_b_kb"])) for r in rows) / 1024 * 1.1
def pts(k):
    return " ".join(f"{P + float(r['t_s']) / tmax * (W - 2 * P):.1f},{H - P - int(r[k]) / 1024 / ymax * (H - 2 * P):.1f}" for r in rows)
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<text x="{W/2}" y="20" text-anchor="middle">RSS of the two servers, SCTP chain (MB)</text>',
       f'<line x1="{P}" y1="{H-P}" x2="{W-P}" y2="{H-P}" stroke="black"/><line x1="{P}" y1="{P}" x2="{P}" y2="{H-P}" stroke="black"/>',
       f'<text x="{W/2}" y="{H-15}" text-anchor="middle">seconds (0 to {tmax:.0f})</text>',
       f'<text x="{P-5}" y="{P}" text-anchor="end">{ymax:.0f}</text><text x="{P-5}" y="{H-P}" text-anchor="end">0</text>',
       f'<polyline fill="none" stroke="#d62728" stroke-width="2" points="{pts("rss_a_kb")}"/>',
       f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{pts("rss_b_kb")}"/>',
       f'<text x="{W-P}" y="{P}" fill="#d62728" text-anchor="end">A (sends over SCTP)</text>',
       f'<text x="{W-P}" y="{P+15}" fill="#1f77b4" text-anchor="end">B</text></svg>']
open(f"{out}/rss.svg", "w").write("\n".join(svg))
PY

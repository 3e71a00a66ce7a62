#!/bin/bash
# CPU per authenticated call (issue 13, docs/benchmarks.md "Authentication and TLS cost"):
# the server's CPU time (utime + stime of holdline serve, one worker on core 1) per call,
# for the same calls through the same server
#   plain: SIPp from 127.0.0.1 (trusted: not challenged), lab scenario call_chain.xml;
#   auth:  SIPp from 127.0.0.2 as user alice: INVITE, 407 (stateless nonce), ACK, INVITE with
#          a digest answer (MD5, SIPp's only algorithm), verified; then the same call;
# SIPp's UAS (uas_rr.xml) and caller on core 0. Runs the two modes alternately, REPEAT times.
# usage: scripts/auth-cost.sh [RATE] [CALLS] [REPEAT] [OUTDIR]   (default 1000 20000 3)
# Writes OUTDIR/results.csv and OUTDIR/auth-cost.svg. Needs a release build, SIPp, taskset.
# Every process is bounded (SIPp -m and -timeout, holdline stopped by PID).
set -u
RATE=${1:-1000}
CALLS=${2:-20000}
REPEAT=${3:-3}
OUT=${4:-auth-cost}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
EXE=$ROOT/target/release/holdline
SC=$ROOT/crates/holdline/tests/scenarios
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT/users.txt"
echo wonderland | "$EXE" user add --file "$OUT/users.txt" alice@example.test 2>/dev/null
# The caller from 127.0.0.2 sends 6 requests per call: above [flood]'s 1,000 per 2 s at
# this rate, so the limit is raised (this measures authentication, not flood protection).
printf 'trusted = ["127.0.0.1"]\n[auth]\nusers_file = "%s"\nalgorithms = ["MD5", "SHA-256"]\n[flood]\nlimit = 1000000\n' \
    "$OUT/users.txt" >"$OUT/serve.toml"
echo "mode,repeat,rate,calls,successful,failed,cpu_s,us_per_call" >"$OUT/results.csv"
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)
port=27300
for rep in $(seq 1 "$REPEAT"); do
    for mode in plain auth; do
        port=$((port + 10))
        P=$port U=$((port + 1)) M=$((port + 2)) C=$((port + 3))
        taskset -c 1 "$EXE" serve --config="$OUT/serve.toml" --listen=udp:127.0.0.1:$P \
            --domain=example.test --route="*=udp:127.0.0.1:$U" --workers=1 --store=memory \
            --metrics=127.0.0.1:$M 2>"$OUT/serve-$mode-$rep.log" &
        SP=$!
        (cd "$OUT" && exec taskset -c 0 sipp -sf "$SC/uas_rr.xml" -i 127.0.0.1 -p $U -t u1 \
            -nostdin -timeout 120s >/dev/null 2>&1) &
        UP=$!
        for _ in $(seq 50); do # bounded wait for both listeners
            curl -s -o /dev/null 127.0.0.1:$M/metrics && ss -uln | grep -q ":$U " && break
            sleep 0.1
        done
        before=$(cpu $SP)
        if [ "$mode" = plain ]; then
            args=(-sf "$SC/call_chain.xml" -i 127.0.0.1)
        else
            printf 'SEQUENTIAL\nalice;-;127.0.0.1:%s;\n' "$U" >"$OUT/caller.csv"
            args=(-sf "$SC/uac_auth.xml" -inf "$OUT/caller.csv" -au alice -ap wonderland -i 127.0.0.2)
        fi
        (cd "$OUT" && taskset -c 0 sipp 127.0.0.1:$P "${args[@]}" -p $C -t u1 -r "$RATE" \
            -m "$CALLS" -d 0 -nostdin -timeout 120s -trace_stat -fd 1 \
            -stf "$OUT/uac-$mode-$rep.csv" >/dev/null 2>&1)
        after=$(cpu $SP)
        kill $SP $UP 2>/dev/null
        wait $SP $UP 2>/dev/null
        ok=$(tail -1 "$OUT/uac-$mode-$rep.csv" | tr ';' '\n' | sed -n "$(head -1 "$OUT/uac-$mode-$rep.csv" | tr ';' '\n' | grep -n '^SuccessfulCall(C)$' | cut -d: -f1)p")
        bad=$(tail -1 "$OUT/uac-$mode-$rep.csv" | tr ';' '\n' | sed -n "$(head -1 "$OUT/uac-$mode-$rep.csv" | tr ';' '\n' | grep -n '^FailedCall(C)$' | cut -d: -f1)p")
        python3 -c "
b, a, t, ok = $before, $after, $TICK, max(int('${ok:-0}'), 1)
cpu = (a - b) / t
print(f'$mode,$rep,$RATE,$CALLS,${ok:-0},${bad:-0},{cpu:.2f},{cpu / ok * 1e6:.1f}')" | tee -a "$OUT/results.csv"
    done
done
python3 - "$OUT" <<'PY'
import csv, statistics, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/results.csv")))
med = {m: statistics.median(float(r["us_per_call"]) for r in rows if r["mode"] == m) for m in ("plain", "auth")}
top = max(med.values()) * 1.25
bars = "".join(
    f'<rect x="{80 + i * 160}" y="{260 - v / top * 220:.0f}" width="100" height="{v / top * 220:.0f}" fill="#4477aa"/>'
    f'<text x="{130 + i * 160}" y="{252 - v / top * 220:.0f}" text-anchor="middle">{v:.0f} µs</text>'
    f'<text x="{130 + i * 160}" y="282" text-anchor="middle">{m}</text>'
    for i, (m, v) in enumerate(med.items()))
open(f"{out}/auth-cost.svg", "w").write(
    '<svg xmlns="http://www.w3.org/2000/svg" width="420" height="320" font-family="sans-serif" font-size="13">'
    f'<text x="210" y="20" text-anchor="middle">holdline CPU per call (median of {len(rows)//2}), {rows[0]["rate"]} calls/s</text>'
    f'<line x1="60" y1="260" x2="400" y2="260" stroke="black"/>{bars}</svg>')
print("median µs/call:", {k: round(v, 1) for k, v in med.items()}, f"auth/plain {med['auth'] / med['plain']:.2f}")
PY

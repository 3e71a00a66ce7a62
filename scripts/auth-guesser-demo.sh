#!/bin/bash
# Failed-authentication throttling under a password guesser (docs/security.md): legitimate
# calls from 127.0.0.1 (trusted, not challenged) at 2,000/s for 20 s while SIPp guesses bob's
# password from 127.0.0.2 at 200 guesses/s (REGISTER, 401, REGISTER with a wrong password:
# 400 requests/s, under [flood]'s limit of 500/s, so that only the failed-authentication
# throttle can stop it).
# usage: scripts/auth-guesser-demo.sh none|on|off [OUTDIR]
#   none: no guesser; on: guesser, throttled (failure_limit = 20 per 10 s, the default);
#   off: guesser, failure_limit = 0 (every guess answered).
# Needs a release build (cargo build --release), SIPp, taskset and curl. Every process is
# bounded in time and stopped by PID.
set -u
MODE=${1:?none|on|off}
OUT=${2:-auth-guesser-demo}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
EXE=$ROOT/target/release/holdline
mkdir -p "$OUT"
rm -f "$OUT/users.txt"
echo builder | "$EXE" user add --file "$OUT/users.txt" bob@example.test 2>/dev/null
LIMIT=20
[ "$MODE" = off ] && LIMIT=0
printf 'trusted = ["127.0.0.1"]\n[auth]\nusers_file = "%s"\nalgorithms = ["MD5", "SHA-256"]\nfailure_limit = %s\n' \
    "$OUT/users.txt" "$LIMIT" >"$OUT/serve.toml"
printf 'SEQUENTIAL\nbob;\n' >"$OUT/guesses.csv"
taskset -c 1 "$EXE" serve --config="$OUT/serve.toml" --listen=udp:127.0.0.1:26160 --domain=example.test \
    --route='*=udp:127.0.0.1:26170' --workers=1 --store=memory --metrics=127.0.0.1:26180 2>"$OUT/serve.log" &
SP=$!
taskset -c 0 "$EXE" load uas --listen=127.0.0.1:26170 --max-time=40 --progress=off --json="$OUT/uas.json" 2>"$OUT/uas.log" &
UP=$!
sleep 1 # the listeners bind (a demo script, not a test)
AP=
if [ "$MODE" != none ]; then
    (cd "$OUT" && taskset -c 0 timeout 28 sipp -sf "$ROOT/lab/scenarios/register_guess.xml" \
        -inf guesses.csv -au bob -ap guess -i 127.0.0.2 -p 26190 -r 200 -m 4000 \
        -timeout 27s -nostdin 127.0.0.1:26160 >/dev/null 2>&1) &
    AP=$!
fi
taskset -c 0 "$EXE" load uac --target=127.0.0.1:26160 --rate=2000 --duration=20 --drain=5 \
    --max-time=30 --json="$OUT/uac-$MODE.json" --progress=off 2>"$OUT/uac-$MODE.log"
curl -s 127.0.0.1:26180/metrics >"$OUT/metrics-$MODE.txt"
[ -n "$AP" ] && wait "$AP" 2>/dev/null
kill "$SP"; kill -TERM "$UP"; wait "$UP" 2>/dev/null; wait "$SP" 2>/dev/null
python3 - "$OUT/uac-$MODE.json" "$MODE" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); t = r["totals"]
print(f"{sys.argv[2]}: calls {t['calls_ok']}/{t['attempted']}, PDD p50 {r['pdd_p50_ms']} ms p99 {r['pdd_p99_ms']} ms")
PY
grep -E 'reason="(auth_failures|flood)"|auth_throttled|holdline_auth_total|code="401"|method="REGISTER"' "$OUT/metrics-$MODE.txt" | grep -v " 0$"

#!/usr/bin/env bash
# Checks lab/kamailio/kamailio.cfg for real with SIPp, all on 127.0.0.1, every run bounded
# (-m and -timeout) and every process this script starts stopped by its PID:
#   1. calls over UDP: SIPp's built-in uac -> Kamailio -> SIPp's built-in uas (next hop, udp)
#   2. calls over TCP: the same with `-t t1` and the next hop configured `transport=tcp`
#   3. registrar over UDP: CALLS users REGISTER (register.xml) with their contact at a
#      second SIPp uas (B); then calls to sip:userN@example.test (call_domain.xml) must all
#      reach B and none the next hop (A)
#   4. registrar over TCP: the same REGISTERs over TCP get 200
#   5. with python3: single-request probes (OPTIONS 200, Max-Forwards 0 -> 483, a bad
#      Max-Forwards -> 400, Proxy-Require -> 420, an unregistered user of the domain -> 404)
#
#   lab/kamailio/verify.sh [CALLS] [RATE] [CHILDREN]      defaults: 2000 200 4
#
# Ports: Kamailio on KAM_VERIFY_PORT (default 15060), SIPp uas A/B on +10/+11, uac on +30.
# Prints one line per check and exits 1 if a REGISTER failed, calls went to the wrong
# place, or more than 1% of the calls of a run failed. Kamailio runs several processes, so a
# 180 can overtake a 200 (BENCHMARKING.md: reordering); SIPp's strict scenarios count that
# call as failed, which is why the limit is not zero. KEEP=1 keeps the work directory.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v sipp >/dev/null 2>&1 || { echo "verify.sh: sipp not found: install the Debian package sip-tester" >&2; exit 2; }
command -v kamailio >/dev/null 2>&1 || { echo "verify.sh: kamailio not found: install the Debian package kamailio" >&2; exit 2; }
calls=${1:-2000} rate=${2:-200} children=${3:-4}
base=${KAM_VERIFY_PORT:-15060}
kam=$base uas_a=$((base + 10)) uas_b=$((base + 11)) uac=$((base + 30))
buf=8388608
secs=$((calls / rate + 30))
work=$(mktemp -d "${TMPDIR:-/tmp}/kamailio-verify.XXXXXX")
pids=()
bad=0

cleanup() {
  local p
  for p in "${pids[@]}"; do
    if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = kamailio ]; then "$here/stop.sh" "$p" || true; fi
    kill "$p" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ "${KEEP:-0}" = 1 ]; then echo "work directory: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# stop PID...: SIGTERM to processes this script started (Kamailio through stop.sh, which
# repeats the SIGTERM until it is obeyed), then wait for them.
stop() {
  local p q keep=()
  for p in "$@"; do
    if [ "$p" = "${kp:-}" ]; then "$here/stop.sh" "$p" || true; else kill "$p" 2>/dev/null || true; fi
  done
  for p in "$@"; do wait "$p" 2>/dev/null || true; done
  for q in "${pids[@]}"; do
    for p in "$@"; do [ "$p" = "$q" ] && continue 2; done
    keep+=("$q")
  done
  pids=("${keep[@]}")
}

# Kamailio with next-hop transport $1 and extra kamailio arguments; sets $kp.
start_kamailio() {
  local t=$1
  shift
  KAM_RUNDIR=$work/run "$here/run.sh" 127.0.0.1 "$kam" "127.0.0.1:$uas_a" "$t" "$children" -- "$@" \
    >>"$work/kamailio.log" 2>&1 &
  kp=$!
  pids+=("$kp")
  local i
  for i in $(seq 100); do
    if [ -n "$(ss -Hlnu "sport = :$kam")" ] && [ -n "$(ss -Hltn "sport = :$kam")" ]; then
      sleep 0.3
      return
    fi
    kill -0 "$kp" 2>/dev/null || break
    sleep 0.1
  done
  echo "verify.sh: kamailio did not start:" >&2
  cat "$work/kamailio.log" >&2
  exit 1
}

# A SIPp uas on port $1 with transport $2 (u1|t1), stats to $3; sets $up.
start_uas() {
  (cd "$work" && exec sipp -sn uas -i 127.0.0.1 -p "$1" -t "$2" -buff_size $buf -nostdin \
    -timeout $((secs + 30))s -trace_stat -fd 1 -stf "$3" >/dev/null 2>&1) &
  up=$!
  pids+=("$up")
  sleep 0.5
}

# SIPp as a client towards Kamailio: transport, stats file, then sipp arguments.
run_client() {
  local t=$1 stf=$2
  shift 2
  (cd "$work" && sipp 127.0.0.1:$kam -i 127.0.0.1 -p $uac -t "$t" -buff_size $buf -nostdin \
    -timeout ${secs}s -trace_stat -fd 1 -stf "$stf" -trace_err -error_file "$stf.errors" "$@" \
    >/dev/null 2>&1) || true
}

# col FILE COLUMN: the column of the last line of a SIPp statistics file.
col() {
  [ -s "$work/$1" ] || { echo 0; return; }
  awk -F';' -v name="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i } END { print (c ? $c : 0) + 0 }' "$work/$1"
}

report_calls() {
  local what=$1 f=$2 ok failed
  ok=$(col "$f" 'SuccessfulCall(C)')
  failed=$(col "$f" 'FailedCall(C)')
  printf '%-34s created %s, successful %s, failed %s (unexpected message %s, retransmissions %s)\n' \
    "$what:" "$(col "$f" 'TotalCallCreated')" "$ok" "$failed" \
    "$(col "$f" 'FailedUnexpectedMessage(C)')" "$(col "$f" 'Retransmissions(C)')"
  if [ "$failed" -gt 0 ] && [ -f "$work/$f.errors" ]; then
    printf '%-34s %s of them aborted on a 180 Ringing that arrived after the 200 OK (reordering)\n' "" \
      "$(grep -c "Aborting call on unexpected message.*received 'SIP/2.0 180 " "$work/$f.errors" || true)"
  fi
  if [ "$ok" -eq 0 ] || [ $((failed * 100)) -gt "$calls" ]; then bad=1; fi
}

echo "kamailio $(kamailio -v | awk 'NR == 1 { print $3 }'), sipp $(sipp -v 2>/dev/null | awk '/SIPp v/ { print $2 }'):" \
  "$calls calls at $rate/s per run, $children udp + $children tcp children"

# 1. UDP calls.
start_kamailio udp
start_uas $uas_a u1 uas_udp.csv
run_client u1 uac_udp.csv -sn uac -r "$rate" -m "$calls" -d 0 -l $((rate * 4))
report_calls "calls over UDP" uac_udp.csv
stop "$up" "$kp"

# 2. TCP calls (the next hop is sip:...;transport=tcp, so no ;transport in the RURI needed).
start_kamailio tcp
start_uas $uas_a t1 uas_tcp.csv
run_client t1 uac_tcp.csv -sn uac -r "$rate" -m "$calls" -d 0 -l $((rate * 4))
report_calls "calls over TCP" uac_tcp.csv
stop "$up" "$kp"

# 3. Registrar and calls to registered users, UDP, with example.test as the served domain.
{
  echo SEQUENTIAL
  for i in $(seq 0 $((calls - 1))); do echo "user$i;127.0.0.1:$uas_b"; done
} >"$work/users.csv"
start_kamailio udp -A 'DOMAIN="example.test"'
start_uas $uas_a u1 uas_a.csv
uas_a_pid=$up
start_uas $uas_b u1 uas_b.csv
uas_b_pid=$up
run_client u1 reg_udp.csv -sf "$here/register.xml" -inf "$work/users.csv" -r "$rate" -m "$calls"
ok=$(col reg_udp.csv 'SuccessfulCall(C)')
printf '%-34s sent %s, 200 OK %s, failed %s\n' "REGISTER over UDP:" \
  "$(col reg_udp.csv TotalCallCreated)" "$ok" "$(col reg_udp.csv 'FailedCall(C)')"
[ "$ok" -eq "$calls" ] || bad=1
run_client u1 uac_reg.csv -sf "$here/call_domain.xml" -inf "$work/users.csv" -r "$rate" -m "$calls" -d 0 \
  -l $((rate * 4))
report_calls "calls to registered users (UDP)" uac_reg.csv
sleep 1.5 # a last statistics dump of the two UAS
a=$(col uas_a.csv 'IncomingCall(C)') b=$(col uas_b.csv 'IncomingCall(C)')
printf '%-34s registered contact (uas B) %s, static next hop (uas A) %s\n' "  INVITEs received by:" "$b" "$a"
[ "$a" -eq 0 ] && [ "$b" -ge "$(col uac_reg.csv 'SuccessfulCall(C)')" ] || bad=1

# 5. Single-request probes (with python3).
if command -v python3 >/dev/null 2>&1; then
  python3 - "$kam" <<'PY' || bad=1
import socket, sys, uuid
port = int(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0))
s.settimeout(2)
lp = s.getsockname()[1]
ok = True
def probe(what, method, ruri, hdrs, want):
    global ok
    b = uuid.uuid4().hex
    m = (f"{method} {ruri} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{lp};branch=z9hG4bK{b}\r\n{hdrs}"
         f"From: <sip:probe@127.0.0.1>;tag=p{b[:8]}\r\nTo: <{ruri}>\r\nCall-ID: {b}\r\n"
         f"CSeq: 1 {method}\r\nContent-Length: 0\r\n\r\n")
    s.sendto(m.encode(), ("127.0.0.1", port))
    got = "timeout"
    try:
        while True:
            line = s.recv(65535).decode(errors="replace").split("\r\n")[0]
            code = int(line.split()[1])
            if code >= 200:
                got = str(code)
                break
    except socket.timeout:
        pass
    print(f"  probe {what:<38} -> {got} (want {want})")
    ok = ok and got == str(want)
me = f"sip:127.0.0.1:{port}"
probe("OPTIONS to the proxy", "OPTIONS", me, "Max-Forwards: 70\r\n", 200)
probe("INVITE with Max-Forwards: 0", "INVITE", "sip:bob@example.test", "Max-Forwards: 0\r\n", 483)
probe("INVITE with Max-Forwards: x", "INVITE", "sip:bob@example.test", "Max-Forwards: x\r\n", 400)
probe("INVITE with Proxy-Require: foo", "INVITE", "sip:bob@example.test",
      "Max-Forwards: 70\r\nProxy-Require: foo\r\n", 420)
probe("INVITE to an unregistered domain user", "INVITE", "sip:nobody@example.test",
      "Max-Forwards: 70\r\n", 404)
sys.exit(0 if ok else 1)
PY
fi
stop "$uas_a_pid" "$uas_b_pid" "$kp"

# 4. REGISTER over TCP.
start_kamailio tcp -A 'DOMAIN="example.test"'
run_client t1 reg_tcp.csv -sf "$here/register.xml" -inf "$work/users.csv" -r "$rate" -m "$calls"
ok=$(col reg_tcp.csv 'SuccessfulCall(C)')
printf '%-34s sent %s, 200 OK %s, failed %s\n' "REGISTER over TCP:" \
  "$(col reg_tcp.csv TotalCallCreated)" "$ok" "$(col reg_tcp.csv 'FailedCall(C)')"
[ "$ok" -eq "$calls" ] || bad=1
stop "$kp"

if [ -s "$work/kamailio.log" ] && grep -qE 'ERROR|CRITICAL' "$work/kamailio.log"; then
  echo "kamailio's log (errors only):"
  grep -E 'ERROR|CRITICAL' "$work/kamailio.log" | sed 's/^ *[0-9]*([0-9]*) //' | sort | uniq -c | sort -rn | head -n 10
fi
if [ $bad -eq 0 ]; then echo "verify.sh: all checks passed"; else echo "verify.sh: some checks FAILED"; fi
exit $bad

#!/usr/bin/env bash
# Capacity steps for `holdline serve` with the real SIPp (issue 3's measurement; `holdline
# bench` will supersede this). holdline runs pinned to core 1 with one worker; SIPp's
# built-in uac and uas run pinned to core 0. Each step restarts holdline, offers RATE calls/s
# for SECONDS seconds (INVITE/100/180/200/ACK/BYE/200, zero holding time), and records the
# SIPp results and holdline's CPU time (utime+stime from /proc) over the run.
#
#   scripts/sipp-capacity.sh [udp|tcp] [SECONDS] RATE...    e.g.  scripts/sipp-capacity.sh udp 10 1000 2000 4000
#
# Socket buffers: SIPp and holdline get 8 MiB (`-buff_size`, `limits.udp_*_buffer`); the
# script raises net.core.rmem_max/wmem_max to 16 MiB if they are lower (it says so). With the
# kernel's default 208 KiB buffers SIPp's own uac<->uas pair loses datagrams at 1,000 calls/s
# on this machine (measured 2026-11-22: 209 of 10,000 calls failed with no proxy at all).
#
# Output: one CSV line per step on stdout (and progress on stderr):
#   transport,rate,calls,successful,failed,unexpected,retrans,cpu_s,cpu_us_per_call,holdline_core_pct
set -euo pipefail
cd "$(dirname "$0")/.."
transport=${1:-udp}; shift || true
seconds=${1:-10}; shift || true
rates=("$@"); [ ${#rates[@]} -gt 0 ] || rates=(1000 2000)
command -v sipp >/dev/null || { echo "sipp missing: apt-get install sip-tester" >&2; exit 2; }
bin=target/release/holdline
[ -x "$bin" ] || cargo build --release -q
case $transport in udp) st=u1 ;; tcp) st=t1 ;; *) echo "udp or tcp" >&2; exit 2 ;; esac
tick=$(getconf CLK_TCK)
work=$(mktemp -d)
buf=8388608
for k in net.core.rmem_max net.core.wmem_max; do
  if [ "$(sysctl -n $k)" -lt 16777216 ]; then
    echo "raising $k to 16777216 (was $(sysctl -n $k))" >&2
    sysctl -qw "$k=16777216"
  fi
done
cat >"$work/holdline.toml" <<TOML
[limits]
udp_recv_buffer = $buf
udp_send_buffer = $buf
TOML
proxy=15060; uas=15070; uac=15090
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
echo "transport,rate,calls,successful,failed,unexpected,retrans,cpu_s,cpu_us_per_call,holdline_core_pct"
for rate in "${rates[@]}"; do
  calls=$((rate * seconds))
  echo "step: $transport $rate calls/s, $calls calls" >&2
  taskset -c 1 "$bin" serve --config "$work/holdline.toml" --listen "$transport:127.0.0.1:$proxy" --route "*=$transport:127.0.0.1:$uas" \
    --store memory --workers 1 2>"$work/holdline.log" &
  hp=$!; pids+=("$hp")
  for _ in $(seq 100); do grep -q 'holdline: ready' "$work/holdline.log" 2>/dev/null && break; sleep 0.05; done
  (cd "$work" && exec taskset -c 0 sipp -sn uas -i 127.0.0.1 -p $uas -t $st -buff_size $buf -nostdin -timeout $((seconds + 20))s >/dev/null 2>&1) &
  up=$!; pids+=("$up")
  sleep 0.3
  t0=$(cpu_ticks "$hp"); w0=$(date +%s.%N)
  (cd "$work" && taskset -c 0 sipp -sn uac 127.0.0.1:$proxy -i 127.0.0.1 -p $uac -t $st -r "$rate" -m "$calls" -d 0 \
    -l $((rate * 4)) -buff_size $buf -nostdin -timeout $((seconds + 15))s -trace_stat -fd 1 -stf "$work/uac.csv" >/dev/null 2>&1) || true
  t1=$(cpu_ticks "$hp"); w1=$(date +%s.%N)
  last=$(tail -n 1 "$work/uac.csv"); head=$(head -n 1 "$work/uac.csv")
  col() { awk -F';' -v h="$head" -v name="$1" 'BEGIN{n=split(h,a,";"); for(i=1;i<=n;i++) if(a[i]==name) c=i} {print $c}' <<<"$last"; }
  ok=$(col 'SuccessfulCall(C)'); failed=$(col 'FailedCall(C)'); unexp=$(col 'FailedUnexpectedMessage(C)')
  retr=$(col 'Retransmissions(C)')
  cpu=$(echo "($t1 - $t0) / $tick" | bc -l)
  per=$(echo "if ($ok > 0) $cpu * 1000000 / $ok else 0" | bc -l)
  pct=$(echo "100 * $cpu / ($w1 - $w0)" | bc -l)
  printf '%s,%s,%s,%s,%s,%s,%s,%.2f,%.1f,%.0f\n' "$transport" "$rate" "$calls" "$ok" "$failed" "$unexp" "${retr:-0}" "$cpu" "$per" "$pct"
  kill "$up" "$hp" 2>/dev/null || true; wait "$up" "$hp" 2>/dev/null || true
  pids=()
done

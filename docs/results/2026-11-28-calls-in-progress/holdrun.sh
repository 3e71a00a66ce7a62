#!/bin/bash
# usage: HOLDLINE=BIN holdrun.sh HOLD_S TAG: RSS and transactions of the server at 95, 110, 125 s;
# server on core 1, generator and UAS on core 0, loopback ports 5270/5271, metrics 9482
B=${HOLDLINE:-target/release/holdline}  # the binary to measure
taskset -c 1 $B serve --listen udp:127.0.0.1:5270 --route '*=udp:127.0.0.1:5271' --domain example.test --workers 1 --store memory --metrics 127.0.0.1:9482 > /tmp/hold-$2.serve.log 2>&1 &
SP=$!
taskset -c 0 $B load uas --listen 127.0.0.1:5271 --progress off --max-time 200 > /tmp/hold-$2.uas.log 2>&1 &
UP=$!
for i in $(seq 100); do grep -q "ready" /tmp/hold-$2.serve.log && break; sleep 0.1; done
taskset -c 0 $B load uac --target 127.0.0.1:5270 --to 'u{0..99999}@elsewhere.test' --rate 1000 --duration 130 --hold fixed:$1 --drain 70 --max-time 200 --progress off --json /tmp/hold-$2.json > /tmp/hold-$2.uac.log 2>&1 &
CP=$!
for t in 95 110 125; do
  sleep $(( t - ${last:-0} )); last=$t
  rss=$(awk '/VmRSS/{print $2}' /proc/$SP/status)
  m=$(curl -s 127.0.0.1:9482/metrics)
  tx=$(echo "$m" | awk '/^holdline_sip_active_transactions/{s+=$2} END{print s}')
  kept=$(echo "$m" | awk '/^holdline_txn_kept_bytes/{s+=$2} END{print s}')
  echo "$2 hold=$1 t=$t rss_kb=$rss transactions=$tx kept=$kept"
done
wait $CP
python3 -c "import json; v=json.load(open('/tmp/hold-$2.json')); print('$2', {k:v[k] for k in v if k.startswith('calls')})"
kill $SP $UP; wait 2>/dev/null

#!/bin/bash
# usage: split.sh BIN USERS RATE OUT  -- persistent store (commit), one worker on core 1,
# per-thread CPU of the server at the end.
B=$1; N=$2; RATE=$3; OUT=$4; mkdir -p $OUT; rm -rf $OUT/store
taskset -c 1 python3 /tmp/reg/rus.py $OUT/total_cpu $B serve --listen udp:127.0.0.1:25170 --domain example.test --workers 1 --store $OUT/store --metrics 127.0.0.1:25171 2>$OUT/serve.log & WP=$!; SP=$WP
for i in $(seq 1 100); do grep -q "holdline: ready" $OUT/serve.log && break; sleep 0.1; done
sleep 0.2; SP=$(pgrep -P $WP)
snap() { for t in /proc/$SP/task/*; do echo "$(cat $t/comm) $(awk '{print $14+$15}' $t/stat)"; done; }
snap > $OUT/cpu0
taskset -c 0 $B load register --target 127.0.0.1:25170 --users "u{0..$((N-1))}@example.test" --rate $RATE --progress off --json $OUT/reg.json > $OUT/load.log 2>&1
snap > $OUT/cpu1
curl -s 127.0.0.1:25171/metrics > $OUT/metrics.txt
kill -INT $SP; wait $WP 2>/dev/null
echo "whole process incl. shutdown: $(python3 -c "print(f\"{float(open('$OUT/total_cpu').read())*1e6/$N:.2f}\")") us/REGISTER"
paste $OUT/cpu0 $OUT/cpu1 | awk -v n=$N '{d=($4-$2)*10000; tot+=d; if (d>0) printf "%-16s %8.2f us/REGISTER\n", $1, d/n} END {printf "total %.2f us/REGISTER\n", tot/n}'
python3 -c "import json;d=json.load(open('$OUT/reg.json'));t=d['totals'];L=d['latency']['register'];print('ok',t['reg_ok'],'5xx',t['reg_5xx'],'p50',L['p50_ms'],'p99',L['p99_ms'])"

#!/bin/bash
# usage: storm.sh BIN LOCAL(occ|none) QUOTA_PCT RATE USERS OUT [extra load args]
# One worker on core 1 in a cgroup with QUOTA_PCT of a core; REGISTER storm from core 0.
B=$1; LOCAL=$2; Q=$3; RATE=$4; N=$5; OUT=$6; shift 6
mkdir -p $OUT
printf "[overload]\nlocal = \"%s\"\n%s\n" "$LOCAL" "$EXTRA" > $OUT/cfg.toml
CG=/sys/fs/cgroup/cpu/hlstorm$$
mkdir -p $CG; echo 100000 > $CG/cpu.cfs_period_us; echo $((Q*1000)) > $CG/cpu.cfs_quota_us
taskset -c 1 $B serve --config $OUT/cfg.toml --listen udp:127.0.0.1:25170 --domain example.test --workers 1 --store ${STORE:-memory} --metrics 127.0.0.1:25171 2>$OUT/serve.log & SP=$!
echo $SP > $CG/tasks; for t in /proc/$SP/task/*; do echo ${t##*/} > $CG/tasks; done
for i in $(seq 1 50); do grep -q "holdline: ready" $OUT/serve.log && break; sleep 0.1; done
c0=$(awk '{print $14+$15}' /proc/$SP/stat)
taskset -c 0 $B load register --target 127.0.0.1:25170 --users "u{0..$((N-1))}@example.test" --rate $RATE --progress off --json $OUT/reg.json --csv $OUT/reg.csv "$@" > $OUT/load.log 2>&1
c1=$(awk '{print $14+$15}' /proc/$SP/stat)
curl -s 127.0.0.1:25171/metrics > $OUT/metrics.txt
kill $SP; wait $SP 2>/dev/null
rmdir $CG
python3 - "$OUT/reg.json" "$LOCAL" "$c0" "$c1" "$N" <<'P'
import json,sys
d=json.load(open(sys.argv[1])); t=d['totals']; L=d['latency']
n=int(sys.argv[5]); cpu=(int(sys.argv[4])-int(sys.argv[3]))*10000
reg=L.get('registered',{})
print(f"{sys.argv[2]}: users {n} ok {t['reg_ok']} sent {t['reg_sent']} 5xx {t['reg_5xx']} retry_after {t.get('reg_retry_after')} timeouts {t.get('timeouts')} retrans {t.get('retrans_other')}; register p50 {L['register']['p50_ms']} p99 {L['register']['p99_ms']}; registered p50 {reg.get('p50_ms')} p99 {reg.get('p99_ms')} max {reg.get('max_ms')} ms; server CPU {cpu/1e6:.1f} s; duration {d.get('duration_s')}")
P

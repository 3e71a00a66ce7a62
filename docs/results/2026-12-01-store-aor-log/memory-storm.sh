#!/bin/bash
# run.sh BIN TAG [env...]: memory-store storm, prints latency and slow-processing counts
BIN=$1; TAG=$2; shift 2
sleep 1
env "$@" $WRAP taskset -c 1 $BIN serve --listen udp:127.0.0.1:15060 --domain example.test --workers 1 --store memory --metrics 127.0.0.1:19480 > /tmp/mst/serve-$TAG.log 2>&1 & 
PID=$!
sleep 1
taskset -c 0 $BIN load register --target=127.0.0.1:15060 --transport=udp '--users=u{0..999999}@example.test' --rate=20000 --drain=5 --max-time=120 --seed=1 --json=/tmp/mst/reg-$TAG.json --progress=off > /tmp/mst/load-$TAG.log 2>&1
curl -s 127.0.0.1:19480/metrics > /tmp/mst/metrics-$TAG.txt
kill $PID; wait $PID
python3 - "$TAG" <<'PY'
import json,sys,re
tag=sys.argv[1]
d=json.load(open(f'/tmp/mst/reg-{tag}.json'))['latency']['register']
m=open(f'/tmp/mst/metrics-{tag}.txt').read()
b={float(k):int(v) for k,v in re.findall(r'holdline_processing_seconds_bucket\{worker="0",le="([0-9.]+)"\} (\d+)',m)}
tot=int(re.search(r'holdline_processing_seconds_count\{worker="0"\} (\d+)',m).group(1))
print(tag, 'p50 %.2f p99 %.2f p999 %.1f max %.0f'%(d['p50_ms'],d['p99_ms'],d['p999_ms'],d['max_ms']), 'proc>0.5ms', tot-b[0.0005], '>2ms', tot-b[0.002], '>5ms', tot-b[0.005])
PY

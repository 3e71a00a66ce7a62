#!/bin/bash
# UAC -> DEOC edge -> UAS that answers 1% of calls 503 (a healthy callee's stray 503s).
# usage: run.sh N RATE DUR MIX  -> writes res-N.json, metrics-N.txt
N=$1; RATE=${2:-50}; DUR=${3:-60}; MIX=${4:-200:0.99,503:0.01}
B=/work/main/target/release/holdline
UAS=$((25000+N)); EDGE=$((25100+N)); MET=$((25200+N))
printf '[overload]\nfeedback = "deoc"\nlocal = "none"\n[overload.deoc]\nmin_rejections = %s\nmin_rejection_share = 0.25\n' $N > edge-$N.toml
$B load uas --listen 127.0.0.1:$UAS --responses $MIX --duration $((DUR+20)) > uas-$N.log 2>&1 & U=$!
$B serve --listen udp:127.0.0.1:$EDGE --store memory --workers 1 --route "*=udp:127.0.0.1:$UAS" --metrics 127.0.0.1:$MET --config edge-$N.toml > edge-$N.log 2>&1 & E=$!
for i in $(seq 50); do curl -s 127.0.0.1:$MET/metrics >/dev/null && break; sleep 0.1; done
$B load uac --target 127.0.0.1:$EDGE --rate $RATE --duration $DUR --seed 7 --json res-$N.json --progress off > uac-$N.log 2>&1
curl -s 127.0.0.1:$MET/metrics > metrics-$N.txt
kill $E $U 2>/dev/null; wait $E $U 2>/dev/null

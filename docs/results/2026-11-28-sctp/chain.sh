#!/bin/bash
# chain.sh RATE DURATION WORKERS [sctp|udp]: holdline load uac -> A (UDP) -> SCTP or UDP -> B -> holdline load uas,
# on loopback (ports 5081/5082/5092, 9901/9902, metrics 9481/9482); prints the UAC's summary and the servers'
# drops and busy ratios. HOLDLINE: the binary (default target/release/holdline). Every process is stopped by PID.
B=${HOLDLINE:-target/release/holdline}; rate=$1; dur=$2; w=$3; t=${4:-sctp}
if [ "$t" = sctp ]; then AL="--listen sctp:127.0.0.1:9901"; BL="--listen sctp:127.0.0.1:9902"; R='*=sctp:127.0.0.1:9902'; else AL=""; BL=""; R='*=udp:127.0.0.1:5082'; fi
$B load uas --listen 127.0.0.1:5092 --duration $((dur+15)) --json uas.json > uas.log 2>&1 & UAS=$!
$B serve $BL --listen udp:127.0.0.1:5082 --route '*=udp:127.0.0.1:5092' --store memory --workers $w --metrics 127.0.0.1:9482 > b.log 2>&1 & BP=$!
$B serve --listen udp:127.0.0.1:5081 $AL --route "$R" --store memory --workers $w --metrics 127.0.0.1:9481 > a.log 2>&1 & AP=$!
sleep 1.5
$B load uac --target 127.0.0.1:5081 --rate $rate --duration $dur --hold fixed:1 --to bob@example.com --json uac.json --max-time $((dur+12)) > uac.log 2>&1
grep -E "calls:|pdd" uac.log
for p in 9481 9482; do curl -s 127.0.0.1:$p/metrics | grep -E "drops_total.*[1-9]$|busy_ratio|^holdline_sctp.*total.*[1-9]$" | grep -v "^#" | tr '\n' ' '; echo; done
kill $AP $BP $UAS; wait $AP $BP $UAS 2>/dev/null

#!/bin/bash
# One real udp-overload point (UAC -> server -> UAS), rate $1, control $OVL (default none),
# with the server's loop and read counts scraped every second into scrape.txt (start time in
# start.txt); its metrics once fresh in re.metrics. Compare with `holdline sim run` timeseries.csv
# (iterations, main_reads, invite_reads; OCC's acceptance and occupancy). Usage: OVL=queue-limit
# bash point-scraped.sh 1420; EVERY=0.25 SCRAPES=100 scrape every 0.25 s (default: 1 s, 30 times).
B=${HOLDLINE:-target/release/holdline}
R=${1:-710}
taskset -c 0 $B load uas --transport=udp --listen=127.0.0.1:23136 --json=uas.json --max-time=28 --progress=off > uas.log 2>&1 & UAS=$!
taskset -c 1 $B serve --listen=udp:127.0.0.1:23183 --route='*=udp:127.0.0.1:23136' --workers=1 --store=memory --udp-recv-buffer=212992 --metrics=127.0.0.1:23224 --overload=${OVL:-none} --emulate-cost-us=1000 --emulate-reject-cost-us=0 > re.log 2>&1 & RE=$!
for i in $(seq 50); do curl -sf 127.0.0.1:23224/metrics >/dev/null && break; sleep 0.1; done
( for i in $(seq ${SCRAPES:-30}); do echo "T $(date +%s.%N)"; curl -s 127.0.0.1:23224/metrics | grep -E '^holdline_(overload_acceptance_ratio|overload_occupancy_ratio|loop_busy_seconds_count|queue_delay_seconds_count|invite_queue_delay_seconds_count|udp_invite_socket_messages_total|udp_kernel_drops_total|messages_in_total\{worker="0",transport="udp"\})'; sleep ${EVERY:-1}; done > scrape.txt ) & SC=$!
echo "START $(date +%s.%N)" > start.txt
taskset -c 0 $B load uac --transport=udp --target=127.0.0.1:23183 --rate=$R --duration=10 --drain=10 --goodput-window=10 --steady-after=2.5 --max-time=25 --seed=1 --json=uac.json --progress=off > uac.log 2>&1
sleep 8; kill $SC 2>/dev/null
for i in $(seq 180); do curl -s 127.0.0.1:23224/metrics > re.metrics; grep -q 'holdline_core_metrics_age_seconds{worker="0"} 0\.0' re.metrics && break; sleep 0.5; done
kill $RE $UAS; wait

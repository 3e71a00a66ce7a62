#!/bin/bash
# One real SE->RE no-control point, 1 SE, rate $1, metrics scraped at the end.
B=${HOLDLINE:-target/release/holdline}
R=${1:-710}
$B load uas --transport=udp --listen=127.0.0.1:23136 --json=uas.json --max-time=28 --progress=off > uas.log 2>&1 & UAS=$!
$B serve --listen=udp:127.0.0.1:23183 --route='*=udp:127.0.0.1:23136' --workers=1 --store=memory --udp-recv-buffer=212992 --metrics=127.0.0.1:23224 --overload=none --emulate-cost-us=1000 --emulate-reject-cost-us=0 > re.log 2>&1 & RE=$!
$B serve --listen=udp:127.0.0.1:23042 --route='*=udp:127.0.0.1:23183' --workers=1 --store=memory --udp-recv-buffer=212992 --metrics=127.0.0.1:23952 --overload=none --feedback=none > se.log 2>&1 & SE=$!
for i in $(seq 50); do curl -sf 127.0.0.1:23224/metrics >/dev/null && curl -sf 127.0.0.1:23952/metrics > /dev/null && break; sleep 0.1; done
$B load uac --transport=udp --target=127.0.0.1:23042 --rate=$R --duration=10 --drain=10 --goodput-window=10 --steady-after=2.5 --max-time=25 --seed=1 --json=uac.json --progress=off > uac.log 2>&1
for i in $(seq 180); do curl -s 127.0.0.1:23224/metrics > re.metrics; grep -q "method=\"INVITE\"} [1-9]" re.metrics && break; sleep 0.5; done
for i in $(seq 60); do curl -s 127.0.0.1:23952/metrics > se.metrics; grep -q sip_requests_in se.metrics && break; sleep 0.5; done
kill $RE $SE $UAS; wait

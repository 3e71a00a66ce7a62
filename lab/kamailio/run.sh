#!/usr/bin/env bash
# Starts Kamailio with lab/kamailio/kamailio.cfg in the foreground, doing the job of
# `holdline serve` in `holdline bench`: stateful proxy with Record-Route, in-memory
# registrar, UDP and TCP listeners on LISTEN_IP:PORT, everything not registered sent to one
# static next hop over the given transport.
#
#   lab/kamailio/run.sh LISTEN_IP PORT NEXTHOP_IP:PORT NEXTHOP_TRANSPORT [CHILDREN] [-- KAMAILIO_ARGS...]
#   e.g. lab/kamailio/run.sh 127.0.0.1 15060 127.0.0.1:15070 tcp 4
#        lab/kamailio/run.sh 127.0.0.1 15060 127.0.0.1:15070 udp 4 -- -A 'DOMAIN="example.test"'
#
# NEXTHOP_TRANSPORT is udp or tcp; CHILDREN (default 4) is the number of UDP and of TCP
# worker processes each. After the config check the script execs kamailio (-DD -E: no
# daemon, no pid file, logs on stderr), so the PID the caller started is Kamailio's main
# process; SIGTERM (or SIGINT) to it stops Kamailio and all its children.
#
# Environment: KAMAILIO (binary, default `kamailio` on PATH), KAM_SHM_MB (shared memory,
# default 1024), KAM_PKG_MB (private memory per process, default 64), KAM_RUNDIR (runtime
# directory, default a new directory under ${TMPDIR:-/tmp}; it stays empty with this config
# and is left behind).
#
# Exit status before exec: 2 on bad arguments or a missing kamailio, 1 if the config check
# fails.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cfg=$here/kamailio.cfg
usage() {
  sed -n '7,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,3\}//' >&2
  exit 2
}

kam=${KAMAILIO:-kamailio}
if ! command -v "$kam" >/dev/null 2>&1; then
  echo "run.sh: kamailio not found: install the Debian package kamailio (apt-get install kamailio)" >&2
  exit 2
fi

[ $# -ge 4 ] || usage
listen_ip=$1 port=$2 nexthop=$3 transport=$4
shift 4
children=4
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
  children=$1
  shift
fi
if [ $# -gt 0 ]; then
  [ "$1" = "--" ] || usage
  shift
fi
extra=("$@")

ipv4='^([0-9]{1,3}\.){3}[0-9]{1,3}$'
is_port() { [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le 65535 ]; }
[[ $listen_ip =~ $ipv4 ]] || { echo "run.sh: LISTEN_IP must be an IPv4 address, got '$listen_ip'" >&2; exit 2; }
is_port "$port" || { echo "run.sh: PORT must be 1-65535, got '$port'" >&2; exit 2; }
nh_ip=${nexthop%:*} nh_port=${nexthop##*:}
[[ $nexthop == *:* && $nh_ip =~ $ipv4 ]] && is_port "$nh_port" ||
  { echo "run.sh: NEXTHOP must be IPv4:PORT, got '$nexthop'" >&2; exit 2; }
case $transport in
  udp | tcp) ;;
  *) echo "run.sh: NEXTHOP_TRANSPORT must be udp or tcp, got '$transport'" >&2; exit 2 ;;
esac
[[ $children =~ ^[0-9]+$ ]] && [ "$children" -ge 1 ] ||
  { echo "run.sh: CHILDREN must be a positive number, got '$children'" >&2; exit 2; }

rundir=${KAM_RUNDIR:-}
if [ -z "$rundir" ]; then
  rundir=$(mktemp -d "${TMPDIR:-/tmp}/holdline-kamailio.XXXXXX")
fi
mkdir -p "$rundir"

args=(
  -f "$cfg"
  -Y "$rundir"
  -m "${KAM_SHM_MB:-1024}"
  -M "${KAM_PKG_MB:-64}"
  -A "LISTEN_IP=$listen_ip"
  -A "LISTEN_PORT=$port"
  -A "NEXTHOP_URI=\"sip:$nh_ip:$nh_port;transport=$transport\""
  -A "CHILDREN=$children"
  -A "TCP_CHILDREN=$children"
  "${extra[@]}"
)

if ! out=$("$kam" -c "${args[@]}" 2>&1); then
  printf '%s\n' "$out" >&2
  echo "run.sh: kamailio rejected $cfg (see above)" >&2
  exit 1
fi

echo "run.sh: kamailio on udp+tcp $listen_ip:$port, next hop sip:$nh_ip:$nh_port;transport=$transport," \
  "$children udp + $children tcp children, runtime dir $rundir" >&2
# Kamailio prints its listeners on stdout at start; everything goes to stderr instead.
exec "$kam" -DD -E "${args[@]}" >&2

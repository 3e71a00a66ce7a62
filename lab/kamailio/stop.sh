#!/usr/bin/env bash
# Stops a Kamailio started by lab/kamailio/run.sh, given the PID run.sh was started as (it
# execs Kamailio, so that is Kamailio's main process).
#
#   lab/kamailio/stop.sh PID [SECONDS]      (default: give up waiting after 5 s)
#
# A single `kill PID` normally does it: the main process stops its children and exits 0
# within a second. This script adds two safeguards for a harness: Kamailio's main process
# (5.6, src/main.c `sig_usr`) keeps one pending signal in a flag and drops a signal that
# arrives while another is still pending, so SIGTERM is repeated every 0.5 s until the main
# process is gone; and if it is still there after SECONDS, it and the children it had
# (collected by parent PID first: a SIGKILLed main leaves them running, holding the ports)
# are SIGKILLed. It returns once the main process has exited (or is a zombie its parent has
# not reaped yet). It touches only PID and PID's children, and only if PID is a kamailio
# process: started as `cd DIR && run.sh ... &`, `$!` is a subshell, not Kamailio, and this
# script refuses it.
set -euo pipefail
pid=${1:?usage: stop.sh PID [SECONDS]}
limit=${2:-5}
[[ $pid =~ ^[0-9]+$ ]] || { echo "stop.sh: not a PID: $pid" >&2; exit 2; }
comm=$(cat "/proc/$pid/comm" 2>/dev/null || true)
[ -n "$comm" ] || exit 0 # already gone
[ "$comm" = kamailio ] || { echo "stop.sh: PID $pid is '$comm', not kamailio" >&2; exit 2; }
children=$(ps -o pid= --ppid "$pid" | tr -d ' ' | tr '\n' ' ' || true)
deadline=$(($(date +%s%N) + limit * 1000000000))
killed=0
while [ -d "/proc/$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = kamailio ]; do
  # A zombie (our caller has not reaped it yet) has exited: done.
  [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ] && break
  if [ "$(date +%s%N)" -ge "$deadline" ]; then
    echo "stop.sh: kamailio $pid ignored SIGTERM for ${limit}s; SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    killed=1
    break
  fi
  kill -TERM "$pid" 2>/dev/null || true
  sleep 0.5
done
# After a SIGTERM the main process stops its children itself; after a SIGKILL they are left.
[ $killed = 1 ] || exit 0
for c in $children; do
  if [ "$(cat "/proc/$c/comm" 2>/dev/null)" = kamailio ]; then
    kill -KILL "$c" 2>/dev/null || true
  fi
done

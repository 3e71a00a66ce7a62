#!/bin/bash
# keepalived's health check of the local holdline (written by `holdline lab vrrp`).
# Usage: check-holdline.sh ADDRESS PORT. Exit 0 when holdline's /metrics answers 200 within
# 0.5 s. A holdline killed with SIGKILL refuses the connection at once; a hung one does
# not answer in time.
exec 3<>"/dev/tcp/$1/$2" || exit 1
printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
IFS= read -r -t 0.5 status <&3 || exit 1
case $status in
  "HTTP/1."*" 200 "*) exit 0 ;;
esac
exit 1

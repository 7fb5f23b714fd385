#!/bin/bash
# attnd-healthcheck: exits 0 when GET /health on the daemon in this container answers 200
# (the model is loaded and it is not draining), 1 otherwise (refused, 503, no answer in 2 s).
# The image's HEALTHCHECK and docker-compose's healthcheck run it. It needs only bash (Essential
# in every Debian image), so the runtime image carries no HTTP client. Port: $ATTND_PORT (8080).
set -u
port=${ATTND_PORT:-8080}
exec 3<>"/dev/tcp/127.0.0.1/$port" 2>/dev/null || exit 1
printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
IFS= read -r -t 2 status <&3 || exit 1
case $status in
  "HTTP/1."?" 200"*) exit 0 ;;
esac
exit 1

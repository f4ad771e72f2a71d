#!/bin/bash
# Container health check: GET /health on the local port, healthy on HTTP 200. Uses only bash
# built-ins (/dev/tcp, read), so the runtime image needs no curl or wget. The port is the one
# the server listens on (LLAMASERVE_PORT, default 8080); /health needs no API key.
exec 3<>"/dev/tcp/127.0.0.1/${LLAMASERVE_PORT:-8080}" || exit 1
printf 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
read -r -t 5 _ status _ <&3 || exit 1
[[ "$status" == 200 ]]

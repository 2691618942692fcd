#!/bin/sh
# The "service": marks that the ENTRYPOINT ran, publishes a fresh token 5 s later, and hands
# over to the container's command (Harbor's `sh -c "sleep infinity"`).
mkdir -p /run/service
date +%s > /run/service/started
(sleep 5 && head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n' > /run/service/token.tmp \
  && mv /run/service/token.tmp /run/service/token) &
exec "$@"

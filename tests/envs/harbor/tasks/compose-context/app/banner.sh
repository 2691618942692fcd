#!/bin/sh
# Reads the channel from the environment docker-compose.yaml gives the main service.
echo "app from the task root, channel ${RELEASE_CHANNEL:-unset}"

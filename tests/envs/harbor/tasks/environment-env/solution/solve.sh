#!/bin/bash
echo "${GREETING_WORD:-}, ${GREETING_TARGET:-}!" > /root/greeting.txt

#!/bin/bash
set -eu
mkdir -p /work/greeting
printf 'Put hello.txt next to this file.\n' > /work/greeting/README.txt

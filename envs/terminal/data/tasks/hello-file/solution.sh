#!/bin/bash
set -eu
echo 'Hello, skyhub!' > /work/greeting/hello.txt

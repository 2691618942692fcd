#!/bin/bash
set -e
tool stamp > /root/stamp.txt

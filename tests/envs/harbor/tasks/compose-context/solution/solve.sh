#!/bin/bash
set -e
sh /opt/app/banner.sh > /opt/app/banner.txt

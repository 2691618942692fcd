#!/bin/bash
set -e
sed -i 's/^mode=.*/mode=production/' /app/app.conf
bash /app/check.sh

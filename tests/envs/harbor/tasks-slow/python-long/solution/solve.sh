#!/usr/bin/env python3
"""Reference solution that outlives a 60 s command cap and overflows a small output cap."""

import time
from pathlib import Path

for i in range(50_000):
    print(f"progress line {i:05d} of a deliberately chatty solution")
time.sleep(70)
Path("/root/answer.txt").write_text("patience\n")
print("wrote /root/answer.txt")

#!/bin/bash
# Terminal-Bench tasks usually install uv and pytest here (network). This one runs offline:
# with pytest when the image has it, else the test file's own runner. The exit status is
# the result (Harbor's converter turns it into reward.txt), so no `set -e` here.
if python3 -c "import pytest" 2>/dev/null; then
  python3 -m pytest "$TEST_DIR/test_outputs.py" -rA
else
  python3 "$TEST_DIR/test_outputs.py"
fi

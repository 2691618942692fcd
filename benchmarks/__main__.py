"""`python -m benchmarks`: run the benchmarks and regenerate the README table (see _runner)."""

import sys

from benchmarks._runner import main

sys.exit(main())

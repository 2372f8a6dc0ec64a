"""`python -m benchmarks` (with scripts/ on the path): the same as scripts/bench."""

import sys

from benchmarks.main import main

sys.exit(main())

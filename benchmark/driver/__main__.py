"""python3 -m driver ARGS: what benchmark/benchmark.sh runs (with benchmark/ on PYTHONPATH)."""

import sys

from .main import main

sys.exit(main(sys.argv[1:]))

"""The benchmark driver: benchmark/benchmark.sh checks for python3 and runs `python3 -m driver` with its arguments.
The steps are in main.py; each module's first lines say what it holds."""

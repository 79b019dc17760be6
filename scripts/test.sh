#!/usr/bin/env bash
# The test suite, from nothing: set up .venv, then run unit, MPI (mpiexec -n 2 and -n 3) and end-to-end tests.
# Extra arguments go to pytest, e.g. ./scripts/test.sh -m "not e2e" or ./scripts/test.sh -k broadcast
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export OMP_NUM_THREADS=1
exec .venv/bin/python -m pytest -q --durations=15 "$@"

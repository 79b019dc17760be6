#!/usr/bin/env bash
# The test suite, from nothing: set up .venv, then run unit, MPI (mpiexec -n 2 and -n 3) and end-to-end tests.
# Extra arguments go to pytest, e.g. ./scripts/test.sh -m "not e2e" or ./scripts/test.sh -k broadcast
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export OMP_NUM_THREADS=1
# Two pytest processes: many end-to-end tests wait on signals, kills and time limits, so the 2-core
# machine's suite takes 0.88 of its serial time (502 s against 573 s, 2026-11-27). EVENS_TEST_PROCESSES=0: serial.
exec .venv/bin/python -m pytest -q --durations=15 -n "${EVENS_TEST_PROCESSES:-2}" "$@"

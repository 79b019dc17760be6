#!/usr/bin/env bash
# The demo search, from nothing: set up .venv, write the digits dataset, and run
#   mpiexec -n 4 evens run examples/digits.toml
# Extra arguments go to `evens run`, e.g. ./scripts/demo.sh --set search.evaluations=80
# EVENS_RANKS changes the number of MPI ranks (1 master + workers; default 4).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
if [ ! -f data/digits.h5 ]; then
    mkdir -p data
    .venv/bin/evens make-digits data/digits.h5
fi
export OMP_NUM_THREADS=1
exec .venv/bin/mpiexec -n "${EVENS_RANKS:-4}" .venv/bin/evens run examples/digits.toml "$@"

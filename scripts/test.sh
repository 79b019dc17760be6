#!/usr/bin/env bash
# The test suite, from nothing: set up .venv, then run unit, MPI (mpiexec -n 2 and -n 3) and end-to-end tests.
# Extra arguments go to pytest, e.g. ./scripts/test.sh -m "not e2e" or ./scripts/test.sh -k broadcast
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# The real-Slurm tests (tests/test_real_slurm.py) need Slurm and munge: installed here where this runs as root with
# apt (CI's fresh machine), else those tests skip and say why.
if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null && ! command -v slurmctld > /dev/null && [ -z "${EVENS_NO_SLURM:-}" ]; then
    echo "scripts/test.sh: installing slurm-wlm and munge for the real-Slurm tests (EVENS_NO_SLURM=1 skips this)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge > /dev/null 2>&1 \
        || { apt-get update -q > /dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge > /dev/null 2>&1; } \
        || echo "scripts/test.sh: could not install Slurm; the real-Slurm tests will skip" >&2
fi
export OMP_NUM_THREADS=1
# Compiled once here: the suite starts some 900 Python processes, and where PYTHONDONTWRITEBYTECODE is set (as on
# this project's machines) each would compile the package from source again (about 0.1 s of CPU a process).
.venv/bin/python -m compileall -q evolve ensemble data_bcast tests > /dev/null || true  # (a file that does not compile fails its own tests)
# Two pytest processes: many end-to-end tests wait on signals, kills and time limits, so the 2-core
# machine's suite takes 0.88 of its serial time (502 s against 573 s, 2026-11-27). EVENS_TEST_PROCESSES=0: serial.
# (loadgroup: the real-Slurm tests share one local cluster, so they run in one process; test_export's searches are made once)
exec .venv/bin/python -m pytest -q --durations=15 -n "${EVENS_TEST_PROCESSES:-2}" --dist loadgroup "$@"

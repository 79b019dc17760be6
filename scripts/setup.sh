#!/usr/bin/env bash
# Create .venv (if missing) and install evens into it with an MPI runtime (MPICH from PyPI),
# the CPU build of torch, and the test, plot, fast, export and tensorboard extras. Safe to run again: it only adds what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv
fi
# EVENS_TORCH_INDEX: the package index to take torch from, as pip's --index-url (for the CPU build on a machine
# without a GPU: https://download.pytorch.org/whl/cpu). Unset, pip's own indexes are used: from PyPI on Linux that
# is the CUDA build, several GB.
if [ -n "${EVENS_TORCH_INDEX:-}" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --index-url "$EVENS_TORCH_INDEX" \
        "$(grep -E '^torch==' requirements-dev.txt)"
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[mpich,test,plot,fast,export,tensorboard,optuna]"

"""docs/run-file.md's example reads a real run with plain h5py, and its layout table names what is there."""
import os
import re
import subprocess
import sys

import h5py
from conftest import ROOT
from test_report_export import run_dir  # noqa: F401  (fixture)


def test_the_documented_reading_code_runs_on_a_run_directory(run_dir):  # noqa: F811
    folder, state = run_dir
    with open(os.path.join(ROOT, "docs", "run-file.md")) as f:
        doc = f.read()
    code = re.search(r"```python\n(.*?)```", doc, re.S).group(1).replace('run = "runs/digits-20261122-195532"', f"run = {folder!r}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"{len(state.records)} evaluations; best ")
    with h5py.File(os.path.join(folder, "checkpoint.h5"), "r") as f:
        for path in re.findall(r"\| `(/[a-z_/<>{},]+)`", doc):
            base = path.split("{")[0].split("<")[0].rstrip("/") or "/"
            assert base in f or base == "/", path

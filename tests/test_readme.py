"""The README's commands work as written, in a fresh shell after the set-up (issue 25, defect 2).

Every line of README.md's ```bash blocks runs, in the README's order, in one bash process whose
PATH holds no virtual environment (a new shell: `mpiexec` and `evens` are found only after the
README's own `source .venv/bin/activate`), in a scratch folder laid out like the checkout
(``examples/`` copied, ``.venv`` linked). The rules:

- comment lines, and what follows ``#`` on a line, are not run;
- a block right after an ``<!-- illustrative ... -->`` comment is skipped (cluster set-up, srun, sbatch);
- ``./scripts/test.sh`` (this suite) is skipped; ``./scripts/demo.sh`` (the set-up, then the demo)
  runs as what it runs once the set-up is done: ``.venv/bin/evens make-digits data/digits.h5``, then
  ``.venv/bin/mpiexec -n 4 .venv/bin/evens run examples/digits.toml``;
- placeholders get small stand-ins: ``my.toml`` (examples/digits.toml, reading data/digits.h5),
  ``new.h5`` (the digits' test images as ``x`` at the root), ``data.h5`` (the digits data),
  ``mine.npz`` (the digits as x_train, y_train, x_val, y_val, x_test, y_test);
- budgets are made small: a new search trains 6 networks of 2 epochs, a resume goes on to 12, an ensemble
  size (``ensemble.size``, ``select --size``) is 2, and ``evens simulate`` simulates 20,000 evaluations.

Each line must exit 0; a failure names the line.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest
from conftest import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BLOCK = re.compile(r"(<!--[^>]*-->\s*\n)?```bash\n(.*?)```", re.S)
NEW_RUN, RESUMED, ENSEMBLE = 6, 12, 2


def readme_lines(text: str) -> list[str]:
    """The command lines of the README's bash blocks, in order, without comments or illustrative blocks."""
    lines = []
    for marker, body in BLOCK.findall(text):
        if "illustrative" in marker:
            continue
        for line in body.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            if line:
                lines.append(line)
    return lines


def runnable(line: str) -> str | None:
    """The line as the test runs it (see the module's rules); None to skip it."""
    if line == "./scripts/test.sh":
        return None
    if line == "./scripts/demo.sh":
        line = ".venv/bin/evens make-digits data/digits.h5 && .venv/bin/mpiexec -n 4 .venv/bin/evens run examples/digits.toml"
    if re.search(r"\bevens run\b", line):
        resume = "--resume" in line
        n = RESUMED if resume else NEW_RUN
        line = re.sub(r"search\.evaluations=\d+", f"search.evaluations={n}", line)
        if "search.evaluations=" not in line:
            line += f" --set search.evaluations={n}"
        if not resume:
            line += " --set space.epochs=2 --set search.population=4"
    if re.search(r"\bevens simulate\b", line):
        line += " --evaluations 20000"
    # an ensemble of 2: the export that follows writes and checks each member (several seconds each)
    line = re.sub(r"ensemble\.size=\d+", f"ensemble.size={ENSEMBLE}", line)
    line = re.sub(r"(\bselect\b.*--size )\d+", rf"\g<1>{ENSEMBLE}", line)
    return line


def stand_ins(folder: str) -> None:
    """The placeholders' stand-ins, made from the digits data (written first: scikit-learn's, as the demo does)."""
    from data_bcast.convert import write_digits

    os.makedirs(os.path.join(folder, "data"))
    digits = os.path.join(folder, "data", "digits-source.h5")
    write_digits(digits)
    shutil.copy(digits, os.path.join(folder, "data.h5"))
    with h5py.File(digits, "r") as f:
        arrays = {f"{k}_{split}": f[split][k][()] for split in ("train", "val", "test") for k in "xy"}
    np.savez(os.path.join(folder, "mine.npz"), **arrays)
    with h5py.File(os.path.join(folder, "new.h5"), "w") as f:
        f["x"] = arrays["x_test"][:50]
    with open(os.path.join(ROOT, "examples", "digits.toml")) as f:
        text = f.read()
    assert '"../data/digits.h5"' in text
    with open(os.path.join(folder, "my.toml"), "w") as f:
        f.write(text.replace('"../data/digits.h5"', '"data/digits.h5"'))


def fresh_shell_environment() -> dict:
    """This environment as a new login shell has it: no virtual environment on PATH, no PYTHONPATH."""
    venvs = {os.path.join(ROOT, ".venv", "bin"), os.path.dirname(sys.executable)}
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and os.path.realpath(p) not in
                                  {os.path.realpath(v) for v in venvs})
    env["OMP_NUM_THREADS"] = "1"
    return env


def test_the_rules_find_every_command_and_skip_the_illustrative_blocks():
    with open(os.path.join(ROOT, "README.md")) as f:
        lines = readme_lines(f.read())
    assert lines[0] == "./scripts/demo.sh" and "./scripts/test.sh" in lines
    assert "source .venv/bin/activate" in lines
    assert not any(line.startswith(("srun", "sbatch", "module load", "MPICC=")) for line in lines)
    assert any("--resume" in line for line in lines) and any(line.startswith("evens convert") for line in lines)
    assert runnable("mpiexec -n 4 evens run --resume runs/a --set search.evaluations=400") == \
        f"mpiexec -n 4 evens run --resume runs/a --set search.evaluations={RESUMED}"
    assert runnable("evens select runs/a --method top_k --size 7") == f"evens select runs/a --method top_k --size {ENSEMBLE}"
    assert f"--set ensemble.size={ENSEMBLE} " in runnable("mpiexec -n 4 evens run my.toml --out runs/a --set ensemble.size=7")


def test_every_readme_command_runs_as_written_in_a_fresh_shell(tmp_path):
    if not os.path.isdir(os.path.join(ROOT, ".venv")):
        pytest.skip("needs the set-up's .venv (./scripts/setup.sh)")
    folder = str(tmp_path)
    shutil.copytree(os.path.join(ROOT, "examples"), os.path.join(folder, "examples"))
    os.symlink(os.path.join(ROOT, ".venv"), os.path.join(folder, ".venv"))
    stand_ins(folder)
    with open(os.path.join(ROOT, "README.md")) as f:
        commands = [c for c in map(runnable, readme_lines(f.read())) if c is not None]
    script = ["set -eo pipefail"] + [f"echo {shlex.quote('+ ' + c)}; {c}" for c in commands]
    with open(os.path.join(folder, "readme.sh"), "w") as f:
        f.write("\n".join(script) + "\n")
    out = subprocess.run(["bash", "readme.sh"], cwd=folder, env=fresh_shell_environment(), capture_output=True, text=True,
                         timeout=600)
    ran = [line[2:] for line in out.stdout.splitlines() if line.startswith("+ ")]
    assert out.returncode == 0, f"failed: {ran[-1] if ran else '?'}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    assert ran == commands
    assert os.path.exists(os.path.join(folder, "new-predictions.h5")) and os.path.exists(os.path.join(folder, "mine.h5"))

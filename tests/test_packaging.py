"""A wheel of evens holds every package: built, installed into a fresh virtual environment, and run
from outside the repository (an editable install would hide a package left out of the wheel)."""
import glob
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest
from conftest import ROOT


@pytest.mark.slow
@pytest.mark.e2e
def test_a_wheel_installed_in_a_fresh_environment_runs_a_search(tmp_path):
    # built from a copy of what a clone holds: a build/ folder left in the repository would fill the wheel
    source = tmp_path / "source"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], capture_output=True, text=True, cwd=ROOT, check=True)
    for name in files.stdout.splitlines():
        if os.path.isfile(os.path.join(ROOT, name)):
            os.makedirs(source / os.path.dirname(name), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), source / name)
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(source)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    [wheel] = glob.glob(str(wheels / "evens-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True,
                          check=True).stdout.strip()
    # evens' dependencies come from the development environment (a path, not a site: its editable evens stays out)
    with open(os.path.join(site, "dependencies.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of the repository's may count as installed
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel],
                               capture_output=True, text=True, timeout=300, env=clean)
    assert installed.returncode == 0, installed.stderr
    work = tmp_path / "elsewhere"
    work.mkdir()
    # and so does MPICH's library, which mpi4py looks for beside the interpreter's prefix
    libraries = os.pathsep.join(p for p in (os.path.join(sys.prefix, "lib"), os.environ.get("LD_LIBRARY_PATH", "")) if p)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": "", "LD_LIBRARY_PATH": libraries}
    evens = str(venv / "bin" / "evens")

    def run(*args, timeout=300):
        return subprocess.run([evens, *args], capture_output=True, text=True, cwd=work, env=env, timeout=timeout)

    where = subprocess.run([python, "-c", "import evolve, evolve.engine.loop; print(evolve.__file__)"], capture_output=True, text=True,
                           cwd=work, env=env)
    assert where.stdout.startswith(site), where.stdout + where.stderr  # the wheel's, not the repository's
    version = run("--version")
    assert version.returncode == 0 and "0.1.0" in version.stdout + version.stderr
    assert run("make-digits", "digits.h5").returncode == 0
    search = run("run", os.path.join(ROOT, "examples", "digits.toml"), "--out", "run", "--set", "data.path=digits.h5",
                 "--set", "search.evaluations=3", "--set", "search.population=2", "--set", "space.epochs=1")
    assert search.returncode == 0, search.stderr[-2000:]
    assert "evaluations: 3 of 3" in search.stdout

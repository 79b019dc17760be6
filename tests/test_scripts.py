"""The scripts/ toolbox stays tidy: no search-path hacks, every benchmark has ``--quick``, no import cycles.

The scripts run as files (``.venv/bin/python scripts/bench/bench_x.py``), so Python puts the script's
own folder first on its module search path: a script imports its neighbours as plain modules, and
the packages (installed in the virtual environment) as usual. The import checks read the import
statements with ``ast``, so they hold in branches no run takes.
"""
import ast
import glob
import os
import subprocess
import sys

import pytest
from conftest import ROOT

SCRIPTS = os.path.join(ROOT, "scripts")
BENCHMARKS = sorted(glob.glob(os.path.join(SCRIPTS, "bench", "bench_*.py")))


def script_files(suffix: str = "") -> list[str]:
    return sorted(os.path.join(folder, name) for folder, _, names in os.walk(SCRIPTS) if "__pycache__" not in folder
                  for name in names if name.endswith(suffix))


def imported_modules(path: str) -> set[str]:
    """The top-level names of every module ``path`` imports (``import a.b`` and ``from a.b import c`` give ``a``)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def script_modules() -> dict[str, str]:
    """Every Python file under scripts/, by ``folder/module`` (relative to scripts/)."""
    return {os.path.relpath(path, SCRIPTS)[: -len(".py")]: path for path in script_files(".py")}


def test_benchmarks_are_found():
    assert len(BENCHMARKS) >= 8, BENCHMARKS


@pytest.mark.parametrize("path", script_files(), ids=lambda p: os.path.relpath(p, SCRIPTS))
def test_no_script_changes_the_module_search_path(path):
    """Neither sys.path nor a module loaded from another file's path and planted in sys.modules."""
    with open(path, errors="replace") as f:
        text = f.read()
    assert "sys.path" not in text and "spec_from_file_location" not in text and "sys.modules[" not in text


def test_every_benchmark_offers_quick():
    # all at once: most of the time is importing torch and mpi4py, and they overlap
    runs = {path: subprocess.Popen([sys.executable, path, "--help"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for path in BENCHMARKS}
    helps = {}
    for path, proc in runs.items():
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        helps[os.path.basename(path)] = (proc.returncode, out)
    for name, (returncode, out) in helps.items():
        assert returncode == 0, f"{name} --help:\n{out}"
        assert "--quick" in out, f"{name} --help names no --quick:\n{out}"


def test_scripts_import_only_their_own_folder():
    """A module of another scripts/ folder is not on a script's search path: importing one would need a path hack."""
    modules = script_modules()
    for key, path in modules.items():
        folder = os.path.dirname(key)
        for name in imported_modules(path):
            elsewhere = [k for k in modules if os.path.basename(k) == name and os.path.dirname(k) != folder]
            if elsewhere and os.path.join(folder, name) not in modules:
                pytest.fail(f"scripts/{key}.py imports {name}, which is scripts/{elsewhere[0]}.py, another folder")


def test_scripts_import_each_other_without_cycles():
    modules = script_modules()
    edges = {}
    for key in modules:  # a plain import resolves in the script's own folder
        near = {os.path.join(os.path.dirname(key), name) for name in imported_modules(modules[key])}
        edges[key] = sorted(other for other in near if other in modules and other != key)
    done, on_path = set(), []

    def visit(key):
        if key in on_path:
            pytest.fail("import cycle: " + " -> ".join(on_path[on_path.index(key):] + [key]))
        if key in done:
            return
        on_path.append(key)
        for other in edges[key]:
            visit(other)
        on_path.pop()
        done.add(key)

    for key in sorted(edges):
        visit(key)

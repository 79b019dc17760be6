"""The arrows between the packages point one way, and the search never needs torch or MPI to be imported.

Two checks: a static one that reads every module's imports with ``ast`` (so a forbidden import
fails here even in a branch no test runs), and a live one that imports the torch-free modules in
a fresh interpreter and looks at ``sys.modules``.
"""
import ast
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

PACKAGES = ("data_bcast", "ensemble", "evolve")


def modules():
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    rel = os.path.relpath(path, ROOT)[: -len(".py")].replace(os.sep, ".")
                    yield rel.removesuffix(".__init__"), path


def imported_names(module: str, path: str) -> set[str]:
    """Absolute names of everything ``module`` imports (relative imports resolved)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    package = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            names.add(prefix)
            names.update(f"{prefix}.{alias.name}" for alias in node.names)
    return names


ALL = dict(modules())
# Modules that may talk MPI themselves; everything else gets a comm passed in, or none at all.
MPI_ALLOWED = {"data_bcast.broadcast", "data_bcast.shard", "evolve.mpi_transport"}


@pytest.mark.parametrize("module", sorted(m for m in ALL if m.split(".")[0] in ("ensemble", "data_bcast")))
def test_lower_layers_never_import_the_search(module):
    assert not any(n == "evolve" or n.startswith("evolve.") for n in imported_names(module, ALL[module]))


@pytest.mark.parametrize("module", sorted(ALL))
def test_only_the_communication_layer_imports_mpi4py(module):
    uses_mpi = any(n == "mpi4py" or n.startswith("mpi4py.") for n in imported_names(module, ALL[module]))
    assert not uses_mpi or module in MPI_ALLOWED, module


TORCH_FREE = [
    "ensemble",
    "ensemble.specs",
    "ensemble.results",
    "ensemble.combine",
    "ensemble.problem",
    "ensemble.hall_of_fame",
    "ensemble.select",
    "ensemble.store",
    "ensemble.h5write",
    "evolve.ga",
    "evolve.space",
    "evolve.space_config",
    "evolve.config",
    "evolve.master",
    "evolve.records",
    "evolve.strategy",
    "evolve.protocol",
    "evolve.checkpoint",
]


def test_the_search_imports_without_torch_or_mpi():
    code = (
        "import importlib, json, sys\n"
        f"for m in {TORCH_FREE!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(m for m in ('torch', 'mpi4py.MPI') if m in sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_the_lazy_package_still_exports_its_names():
    import ensemble

    assert ensemble.NetworkSpec.__module__ == "ensemble.specs"
    assert callable(ensemble.train_and_evaluate)
    with pytest.raises(AttributeError):
        ensemble.no_such_name  # noqa: B018

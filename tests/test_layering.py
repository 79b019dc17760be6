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


def imports(module: str, path: str) -> tuple[set[str], list[tuple[str, list[str]]]]:
    """What ``module`` imports: the names of its ``import X`` lines, and each ``from PREFIX import a, b`` as
    (PREFIX, [a, b]) with a relative PREFIX resolved."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    package = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
    plain, froms = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            plain.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            froms.append((".".join(base + ([node.module] if node.module else [])), [alias.name for alias in node.names]))
    return plain, froms


def imported_names(module: str, path: str) -> set[str]:
    """Absolute names of everything ``module`` imports (relative imports resolved)."""
    plain, froms = imports(module, path)
    return plain | {prefix for prefix, _ in froms} | {f"{prefix}.{name}" for prefix, names in froms for name in names}


ALL = dict(modules())
# Modules that may talk MPI themselves; everything else gets a comm passed in, or none at all.
MPI_ALLOWED = {"data_bcast.agreement", "data_bcast.nodes", "data_bcast.shard", "data_bcast.stream", "evolve.transport.mpi_transport"}


@pytest.mark.parametrize("module", sorted(m for m in ALL if m.split(".")[0] in ("ensemble", "data_bcast")))
def test_lower_layers_never_import_the_search(module):
    assert not any(n == "evolve" or n.startswith("evolve.") for n in imported_names(module, ALL[module]))


# Which of evolve's subpackages each may import (besides itself, evolve.errors and the version in evolve's
# __init__); the lower packages ensemble/ and data_bcast/ are open to all. docs/architecture.md draws it.
EVOLVE_LAYERS = {
    "search": set(),  # genes, GA, strategies, records: pure search code
    "config": {"search"},  # the typed config holds the search space
    "transport": {"search"},  # messages and MPI; the worker decodes tasks with the space
    "engine": {"search", "config", "transport"},  # the loop, dispatch, the simulator
    "runfile": {"search", "config", "engine"},  # the checkpoint stores the engine's state
    "app": {"search", "config", "transport", "engine", "runfile"},  # the command line: everything
}


def subpackage(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if parts[0] == "evolve" and len(parts) > 2 and parts[1] in EVOLVE_LAYERS else None


def test_every_subpackage_of_evolve_has_its_layer():
    found = {name.split(".")[1] for name in ALL if name.startswith("evolve.") and subpackage(name + ".x")}
    assert found == set(EVOLVE_LAYERS)
    loose = sorted(m for m in ALL if m.startswith("evolve.") and m.count(".") == 1
                   and m.split(".")[1] not in (*EVOLVE_LAYERS, "errors", "__main__"))
    assert loose == [], "a module of evolve/ outside its subpackages"


@pytest.mark.parametrize("module", sorted(m for m in ALL if subpackage(m)))
def test_subpackages_of_evolve_import_only_those_below_them(module):
    mine = subpackage(module)
    imported = {subpackage(n) for n in imported_names(module, ALL[module])} - {None, mine}
    assert imported <= EVOLVE_LAYERS[mine], f"{module} imports evolve.{sorted(imported - EVOLVE_LAYERS[mine])}"


# evolve/app by concern, each folder importing only those below it: the commands (the leaves: each `evens` command and
# the Python API) use the run's life cycle, which uses the presentation, which uses the infrastructure under all three.
APP_LAYERS = {
    "infra": set(),  # process-level facts and primitives, user code as a guest, the run directory and its lock, logging
    "presentation": {"infra"},  # the summary's types, its text, CSV, plots, progress
    "run": {"infra", "presentation"},  # evens run: roles, preparation, the master's session, tracking, the ensemble's choice
    "commands": {"infra", "presentation", "run"},  # the parser and each command's handler; the Python API
}


def app_folder(name: str) -> str | None:
    parts = name.split(".")
    return parts[2] if parts[:2] == ["evolve", "app"] and len(parts) > 3 and parts[2] in APP_LAYERS else None


def test_every_module_of_app_is_in_a_folder_by_concern():
    app = sorted(m for m in ALL if m.startswith("evolve.app."))
    assert app and [m for m in app if app_folder(m + ".x") is None or m.count(".") != 3] == []
    assert {app_folder(m + ".x") for m in app} == set(APP_LAYERS)


@pytest.mark.parametrize("module", sorted(m for m in ALL if app_folder(m)))
def test_folders_of_app_import_only_those_below_them(module):
    mine = app_folder(module)
    imported = {app_folder(n) for n in imported_names(module, ALL[module])} - {None, mine}
    assert imported <= APP_LAYERS[mine], f"{module} imports evolve.app.{sorted(imported - APP_LAYERS[mine])}"


def test_nothing_imports_the_command_line_but_the_entry_point():
    """cli is a leaf: the stop flag, the signals and the launcher's facts live in infra/process.py, not in cli."""
    importers = sorted(m for m in ALL if m != "evolve.app.commands.cli"
                       and any(n == "evolve.app.commands.cli" or n.startswith("evolve.app.commands.cli.")
                               for n in imported_names(m, ALL[m])))
    assert importers == ["evolve.__main__"]


def folder_imports(module: str, path: str) -> list[tuple[str, str]]:
    """(folder, name) for each ``from FOLDER import name`` of ``module`` whose FOLDER is one of ours without an
    ``__init__.py`` (a namespace package: what it holds is its modules and folders, nothing else)."""
    found = []
    for prefix, names in imports(module, path)[1]:
        folder = os.path.join(ROOT, *prefix.split("."))
        if prefix.split(".")[0] in PACKAGES and os.path.isdir(folder) and not os.path.exists(os.path.join(folder, "__init__.py")):
            found += [(prefix, name) for name in names]
    return found


@pytest.mark.parametrize("module", sorted(ALL))
def test_what_is_imported_from_a_folder_is_there(module):
    """``from evolve.app import api`` names a module that must exist in that folder (a move of modules between
    folders leaves no import behind that only fails when its branch runs)."""
    missing = [f"{prefix}.{name}" for prefix, name in folder_imports(module, ALL[module])
               if f"{prefix}.{name}" not in ALL and not os.path.isdir(os.path.join(ROOT, *prefix.split("."), name))]
    assert missing == [], f"{module} imports {missing}, which do not exist"


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
    "ensemble.inputs",
    "evolve.search.ga",
    "evolve.search.space",
    "evolve.search.space_config",
    "evolve.search.records",
    "evolve.search.strategy",
    "evolve.search.early_stop",
    "evolve.config.schema",
    "evolve.engine.loop",
    "evolve.engine.dispatch",
    "evolve.engine.simulator",
    "evolve.transport.protocol",
    "evolve.transport.wire",
    "evolve.runfile.checkpoint",
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


def test_evens_predict_checks_its_input_without_torch():
    """A rank of ``evens predict`` imports torch only once the run and the input are known to be good: bad input is
    refused on every rank without loading it (seconds sooner, as tests/test_predict.py's bad inputs are)."""
    code = "import json, sys\nimport evolve.app.commands.predict\nprint(json.dumps('torch' in sys.modules))\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) is False


def test_the_lazy_package_still_exports_its_names():
    import ensemble

    assert ensemble.NetworkSpec.__module__ == "ensemble.specs"
    assert callable(ensemble.train_and_evaluate)
    with pytest.raises(AttributeError):
        ensemble.no_such_name  # noqa: B018


ROLE_BRANCHES = {"evolve.app.run.driver", "evolve.app.commands.predict"}  # where evens asks which rank it is


def compares_a_rank(path: str) -> bool:
    """Does the module compare a rank (``comm.rank == 0``, ``rank != ROOT``) anywhere?"""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    named = lambda node: (isinstance(node, ast.Attribute) and node.attr == "rank") or (isinstance(node, ast.Name) and node.id == "rank")  # noqa: E731
    return any(isinstance(node, ast.Compare) and any(map(named, [node.left, *node.comparators])) for node in ast.walk(tree))


@pytest.mark.parametrize("module", sorted(m for m in ALL if m.startswith("evolve")))
def test_roles_branch_in_one_place(module):
    """Nothing in evolve/ below the two role-branching modules asks which rank it is (the data plane's
    collectives, in data_bcast/, know their root; that is communication, not a role)."""
    assert module in ROLE_BRANCHES or not compares_a_rank(ALL[module]), f"{module} asks which rank it is"

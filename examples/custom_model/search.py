"""The same search from Python: mpiexec -n 4 python examples/custom_model/search.py  (from the repository's root).

The builder is passed as a function; it lives in a module (resnet1d.py), not in this script, because
every rank and, later, evens predict import it by name. Arguments are KEY=VALUE overrides, as
``evens run --set`` takes them (``search.evaluations=8``), and ``out=DIR`` for the run directory.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # resnet1d.py lies beside this script (every rank runs this line)

from resnet1d import build  # noqa: E402

from evolve import run_search_from  # noqa: E402
from evolve.config.schema import parse_value  # noqa: E402

if __name__ == "__main__":  # every rank runs this script; the guard keeps an import of it from starting a search
    overrides = {key: parse_value(value) for key, _, value in (arg.partition("=") for arg in sys.argv[1:])}
    out = overrides.pop("out", None)
    run_dir = run_search_from(os.path.join(HERE, "signals.toml"), builder=build, overrides=overrides, out=out)
    if run_dir is not None:  # rank 0
        print(f"search.py: the run is in {run_dir}")

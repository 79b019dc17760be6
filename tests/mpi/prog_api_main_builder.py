"""A builder defined in the launching script itself is refused in one line (it cannot be imported by name)."""
import sys

from torch import nn

from evolve import run_search_from


def build(genes, sample_shape, outputs):
    return nn.Linear(sample_shape[-1], outputs)


if __name__ == "__main__":
    try:
        run_search_from(sys.argv[1], builder=build, out=sys.argv[2])
    except Exception as exc:  # noqa: BLE001 -- the test reads the message
        print(f"{type(exc).__name__}: {exc}", flush=True)

"""Fuzz a run file: flip 4 random bytes of RUN_DIR/checkpoint.h5, N times, and load each copy.

    .venv/bin/python scripts/tools/fuzz_run_file.py RUN_DIR [N]      # e.g. a demo run, N = 150

Prints counts of loads that gave the intact content ("unchanged"), that were refused (by the error
type), and that loaded CHANGED content without complaint (what checksums must prevent).
"""
import collections
import os
import random
import shutil
import sys
import tempfile

from ensemble.store import EnsembleError
from evolve.errors import EvensError
from evolve.runfile import checkpoint

src = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 150
def digest(path):
    s, info = checkpoint.load(os.path.join(path, "checkpoint.h5"))
    parts = [repr([(r.id, r.status, r.fitness, r.metrics, tuple(r.genome)) for r in s.records]), repr(info.config), repr(s.rng.getstate()), repr([(p.id, tuple(p.genome)) for p in s.pending])]
    for m in s.hall_of_fame:
        parts.append(m.val_pred.tobytes()); parts.append(m.test_pred.tobytes())
        for k in sorted(m.weights or {}): parts.append(m.weights[k].tobytes())
    parts.append(repr(s.selection))
    return hash(tuple(parts))
good = digest(src)
data = open(os.path.join(src, "checkpoint.h5"), "rb").read()
rng = random.Random(0)
c = collections.Counter()
work = tempfile.mkdtemp(prefix="fuzz_run_")
for i in range(n):
    shutil.rmtree(work, ignore_errors=True); shutil.copytree(src, work)
    b = bytearray(data); off = rng.randrange(len(b) - 4); b[off:off+4] = bytes(rng.randrange(256) for _ in range(4))
    open(os.path.join(work, "checkpoint.h5"), "wb").write(b)
    try:
        c["unchanged" if digest(work) == good else "CHANGED"] += 1
    except (EvensError, EnsembleError, ValueError, OSError, KeyError) as e:
        c["refused:" + type(e).__name__] += 1
    except Exception as e:
        c["other:" + type(e).__name__] += 1
print(dict(c))
shutil.rmtree(work, ignore_errors=True)

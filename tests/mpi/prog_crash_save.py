"""A plain subprocess (no MPI): checkpoint a growing search, and die like kill -9 at the K-th durable step.

Usage: prog_crash_save.py PATH K
Every os.fsync, os.replace and os.remove in the checkpoint code counts as a step; at step K the
process ends at once with os._exit (no cleanup, no finally blocks), as a SIGKILL would leave it.
Before each checkpoint it prints "saving N" (the records it is about to commit) and after it "saved N".
"""
import os
import sys

from checkpoint_fixture import growing_saves  # (the test puts the tests folder on PYTHONPATH)

from evolve.runfile import checkpoint, segments

path, crash_at = sys.argv[1], int(sys.argv[2])
steps = {"n": 0}


def counted(real):
    def step(*a, **k):
        steps["n"] += 1
        if steps["n"] == crash_at:
            sys.stdout.flush()
            os._exit(9)
        return real(*a, **k)

    return step


for module in (checkpoint, segments):
    module.os.fsync = counted(os.fsync)
    module.os.replace = counted(os.replace)
    module.os.remove = counted(os.remove)

for n in growing_saves(path):
    print(f"saved {n}", flush=True)
print("done", flush=True)

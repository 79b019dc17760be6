"""A plain subprocess (no MPI): checkpoint a growing search, and die like kill -9 at the K-th durable step.

Usage: prog_crash_save.py PATH K
       prog_crash_save.py --serve      (then, on stdin, lines of "PATH K" pairs separated by ";")
Every os.fsync, os.replace and os.remove in the checkpoint code counts as a step; at step K the
process ends at once with os._exit (no cleanup, no finally blocks), as a SIGKILL would leave it.
Before each checkpoint it prints "saving N" (the records it is about to commit) and after it "saved N".

With --serve, the imports are made once and each "PATH K" is run by a forked child of this process whose
output goes to PATH + ".out"; the children of one line run together, and for each the line answered holds
its exit status, in order ("9 0": the first died at its step, the second got past the last one).
"""
import os
import sys

from checkpoint_fixture import growing_saves  # (the test puts the tests folder on PYTHONPATH)

from evolve.runfile import checkpoint, segments

steps = {"n": 0, "at": 0}


def counted(real):
    def step(*a, **k):
        steps["n"] += 1
        if steps["n"] == steps["at"]:
            sys.stdout.flush()
            os._exit(9)
        return real(*a, **k)

    return step


for module in (checkpoint, segments):
    module.os.fsync = counted(os.fsync)
    module.os.replace = counted(os.replace)
    module.os.remove = counted(os.remove)


def run(path: str, crash_at: int) -> None:
    steps["at"] = crash_at
    for n in growing_saves(path):
        print(f"saved {n}", flush=True)
    print("done", flush=True)


def child(path: str, crash_at: int) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:
        out = os.open(path + ".out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        run(path, crash_at)
        code = 0
    except BaseException as e:  # a failure the test must see: its one line in the output, status 3
        print(f"{type(e).__name__}: {e}", flush=True)
        code = 3
    os._exit(code)


if sys.argv[1:] == ["--serve"]:
    for line in sys.stdin:
        pids = [child(path, int(k)) for path, k in (pair.split() for pair in line.split(";"))]
        print(" ".join(str(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])) for pid in pids), flush=True)
else:
    run(sys.argv[1], int(sys.argv[2]))

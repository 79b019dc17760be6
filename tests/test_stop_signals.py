"""The stop signals are counted as the drain needs them (evolve.app.infra.process.StopFlag): copies of one signal
that reach a process together count once, a third signal ends it even inside a call that never returns to
Python (an MPI collective a peer never joins), and a caller gets its own handlers back."""
import os
import signal
import subprocess
import sys
import textwrap
import time

from conftest import ROOT, alive, mpiexec


def run_script(code: str, timeout: float = 60, ranks: int = 0, **popen):
    command = [sys.executable, "-c", textwrap.dedent(code)]
    if ranks:
        command = [mpiexec(), "-n", str(ranks), *command]
    return subprocess.Popen(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)


def test_copies_of_a_signal_that_arrive_together_count_once():
    """As `kill -TERM -- -1`, a container's stop or a time limit do: the master's own SIGTERM, then mpiexec's and a
    proxy's copies. Counted once, the drain goes on (before: the second copy ended it, the third the master)."""
    proc = run_script("""
        import os, signal, time
        from evolve.app.infra.process import StopFlag
        stop = StopFlag()
        for _ in range(3):
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)
        print(stop(), stop.signum == signal.SIGTERM)
    """)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.split() == ["1", "True"], out + err


def test_a_signal_after_the_window_counts_and_a_third_ends_the_process():
    proc = run_script("""
        import os, signal, sys, time
        from evolve.app.infra.process import StopFlag
        stop = StopFlag(duplicate_seconds=0.3)
        for expected in (1, 2):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.6)
            print(stop(), flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
        print("still here", flush=True)
    """)
    out, err = proc.communicate(timeout=60)
    assert out.split() == ["1", "2"], out + err
    assert proc.returncode == 128 + signal.SIGTERM
    assert err.strip().splitlines() == ["evens: a third signal (SIGTERM): ending now, without a checkpoint"], err


def test_a_third_signal_ends_a_rank_stuck_in_an_mpi_call():
    """Rank 0 waits in a barrier that rank 1 never joins: no Python signal handler can run there. Three signals
    (each after the window) end it within seconds; before, only SIGKILL did."""
    proc = run_script("""
        import time
        from evolve.app.infra.process import StopFlag
        stop = StopFlag(duplicate_seconds=0.3)
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        print(f"ready {comm.rank}", flush=True)
        if comm.rank == 0:
            comm.Barrier()
        else:
            time.sleep(120)
    """, ranks=2, start_new_session=True)
    try:
        while proc.stdout.readline().strip() != "ready 0":  # its StopFlag is made and MPI is up
            assert proc.poll() is None, proc.communicate()
        pid = _rank_zero_pid(proc.pid)
        time.sleep(1)  # into the barrier
        for _ in range(3):
            os.kill(pid, signal.SIGTERM)
            time.sleep(0.8)
        deadline = time.monotonic() + 20
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(pid), "the rank stuck in MPI_Barrier outlived three signals"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)


def test_close_puts_back_the_handlers_found():
    proc = run_script("""
        import signal
        from evolve.app.infra.process import STOP_SIGNALS, StopFlag
        mine = lambda signum, frame: None
        signal.signal(signal.SIGINT, mine)
        found = [signal.getsignal(s) for s in STOP_SIGNALS]
        stop = StopFlag()
        assert [signal.getsignal(s) for s in STOP_SIGNALS] != found
        stop.close()
        print([signal.getsignal(s) for s in STOP_SIGNALS] == found, signal.set_wakeup_fd(-1))
    """)
    out, err = proc.communicate(timeout=60)
    assert out.split() == ["True", "-1"], out + err


def _rank_zero_pid(launcher: int, seconds: float = 60) -> int:
    """The process of rank 0 under the launcher ``launcher``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for pid in _descendants(launcher):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            if b"PMI_RANK=0" in env:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"-c" in f.read().split(b"\0"):
                        return pid
        time.sleep(0.2)
    raise AssertionError("rank 0 did not start")


def _descendants(pid: int) -> list[int]:
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except OSError:
                continue
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found

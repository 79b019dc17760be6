"""A worker rank's trainings, run in a training process of its own (``train.isolation = "process"``).

:class:`TrainerProcess` starts :mod:`evolve.transport.trainer_process`, hands it the node's copy of
the data (a descriptor, :mod:`data_bcast.memory`) and the set-up, and then evaluates tasks there.
When that process dies (a signal, an exit, the out-of-memory killer) the evaluation is ``crashed``
with the cause (the signal's name or the exit status, and its last line on stderr), a fresh process
is started and the rank takes its next task: the MPI job goes on. A training past its time limit
(``search.eval_timeout_seconds``) plus :data:`KILL_GRACE` is killed, even inside one kernel, and is
``timeout``; the training's own check between batches stops it politely first. A training the master
ends the job during (``end_requested``, asked every :data:`END_POLL_SECONDS` of the wait) is killed with
its process group and reaped, and the evaluation raises :class:`~evolve.transport.protocol.Ended`.

The start method is a fresh interpreter (``subprocess``, which forks and at once executes), never a
fork that goes on running Python: forking a process after MPI_Init is unsafe on some RDMA networks
(InfiniBand, Slingshot), and after CUDA is initialised everywhere. The process imports nothing of
MPI and its environment has no MPI launcher variables (:func:`trainer_environment`). It starts once
per worker, not once per training, while the data is broadcast (see evolve.app.run.driver).
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Callable

import numpy as np

from data_bcast.layout import unpack_arrays
from ensemble.results import Evaluation, failed_evaluation

from .forkserver import ForkedProcess, ForkServer
from .protocol import Ended, Task
from .trainer_process import read_message, status_kb, write_message
from .wire import WireError, unpack_result

WATCH_SECONDS = 0.25  # with a memory limit, how often the rank looks at its training process's memory
KILL_GRACE = 5.0  # seconds past a training's time limit before its process is killed
END_POLL_SECONDS = 0.1  # while a training runs, how often the rank asks whether the master has ended the job (end_requested)
START_SECONDS = 600.0  # for a training process to start and set up (importing torch, initialising CUDA)
# The launcher's variables: a process that has them may take itself for an MPI rank (mpi4py, or a
# library the user's model imports, would initialise MPI and join the job).
MPI_VARIABLES = ("PMI_", "PMIX_", "HYDRA_", "MPIR_", "OMPI_", "MPICH_", "I_MPI_", "SLURM_PMI")


def own_resident_bytes(pid: int, shared_data: int = 0) -> int:
    """The resident memory of ``pid`` that is its own, in bytes: RssAnon, and its shared memory (RssShmem: what
    ``share_memory_()`` or /dev/shm hold) past ``shared_data``, the node's data copy it maps; 0 where unknown."""
    return (status_kb(pid, "RssAnon") << 10) + max(0, (status_kb(pid, "RssShmem") << 10) - shared_data)


def remove_torch_shared_memory(pid: int) -> None:
    """The /dev/shm files torch's shared tensors of the ended process ``pid`` left (named ``torch_<pid>_...``)."""
    for path in glob.glob(f"/dev/shm/torch_{int(pid)}_*"):
        with contextlib.suppress(OSError):
            os.remove(path)


class TrainerError(RuntimeError):
    """The training process could not start or set up (one line: why)."""


def trainer_environment(environ: dict | None = None) -> dict:
    """``environ`` (default: this process's) without the MPI launcher's variables."""
    environ = dict(os.environ if environ is None else environ)
    return {k: v for k, v in environ.items() if not k.startswith(MPI_VARIABLES)}


class TrainerProcess:
    """One training process for this rank, started again whenever it dies. ``setup`` is the set-up
    message's content (see :mod:`evolve.transport.trainer_process`) less the data's descriptor,
    ``data_fd`` the descriptor it is handed."""

    def __init__(self, setup: dict, data_fd: int, server: ForkServer | None = None):
        self.setup, self.data_fd = setup, data_fd
        self.server = server  # the node's fork server (evolve.transport.forkserver); None: a fresh interpreter each start
        self.proc: subprocess.Popen | ForkedProcess | None = None
        self.to_child = self.from_child = -1
        self.device: dict = {}
        self.last_line = ""  # its last line on stderr: said when it dies
        self.starts = 0
        self.memory_limit = int(float(setup.get("max_host_memory_gb", 0.0)) * (1 << 30))  # bytes; 0: none
        self.over_memory = ""  # why the watchdog killed the process, if it did
        # Asked while the rank waits for the process (never waiting itself): True when the master has ended the job
        # (MPIWorkerChannel.end_requested); the process is then killed and Ended raised. None: never asked.
        self.end_requested: Callable[[], bool] | None = None

    # --- starting -------------------------------------------------------------------------------

    def start(self) -> dict:
        """Start the process and wait until it is set up; the device it trains on (``describe_device``).
        Raises :class:`TrainerError` with its reason if it cannot. A process started before is ended first."""
        self._end()
        self.over_memory = ""
        from_rank, to_child = os.pipe()
        from_child, to_rank = os.pipe()
        fds = (from_rank, to_rank, self.data_fd)
        try:
            self.proc = self._forked(fds) if self.server is not None else None
            if self.proc is None:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "evolve.transport.trainer_process", str(from_rank), str(to_rank), str(os.getpid())],
                    pass_fds=fds, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, env=trainer_environment(), close_fds=True,
                    process_group=0)  # a group of its own, killed whole (see _end)
        finally:
            os.close(from_rank)
            os.close(to_rank)
        self.to_child, self.from_child = to_child, from_child
        self.starts += 1
        self.last_line = ""
        threading.Thread(target=self._forward_stderr, args=(self.proc.stderr,), daemon=True).start()
        write_message(to_child, b"S", json.dumps({**self.setup, "data": {**self.setup["data"], "fd": self.data_fd}}).encode())
        message = self._wait(time.monotonic() + START_SECONDS)
        if message is None or message[0] != b"R":
            if isinstance(self.proc, ForkedProcess):  # (it could not take the rank's cores, say): fresh interpreters from now on
                self._without_server(f"a training process forked by the fork server did not start ({self._death()})")
                return self.start()
            raise TrainerError(f"the training process did not start: {self._death()}")
        ready = json.loads(message[1])
        if "error" in ready:
            self._end()
            raise TrainerError(ready["error"])
        self.device = ready["device"]
        return self.device

    def _forked(self, fds: tuple[int, int, int]) -> ForkedProcess | None:
        """The process, forked by the node's fork server; None (and no server from now on) if the server is gone."""
        stderr_r, stderr_w = os.pipe()
        try:
            proc = self.server.start(trainer_environment(), (*fds, stderr_w))
        except OSError as exc:
            os.close(stderr_r)
            self._without_server(f"the fork server is gone ({exc})")
            return None
        finally:
            os.close(stderr_w)
        proc.stderr = os.fdopen(stderr_r, "rb")
        return proc

    def _without_server(self, why: str) -> None:
        """Start fresh interpreters from now on, saying ``why``."""
        print(f"evens: {why}; training processes start as fresh interpreters", file=sys.stderr)
        self.server = None

    def _forward_stderr(self, stream) -> None:
        """What the process writes to stderr goes on to the rank's; its last line is kept."""
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            sys.stderr.write(line)
            sys.stderr.flush()
            if line.strip():
                self.last_line = line.strip()[:300]

    # --- evaluating -----------------------------------------------------------------------------

    def evaluate(self, task: Task) -> Evaluation:
        """Train ``task`` in the process; a death or a hard timeout is an evaluation too (and the next task starts a new process)."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        limit = float(task.watch.get("time_limit", 0) or 0)
        started = time.monotonic()
        deadline = started + limit + KILL_GRACE if limit > 0 else None
        self.last_line = ""  # what it says while training this task is what explains a death
        write_message(self.to_child, b"T", json.dumps(task.plain()).encode())
        message = self._wait(deadline)
        if message is None:
            seconds = time.monotonic() - started
            if self.over_memory:
                ev = failed_evaluation(self.over_memory, "crashed", seconds)
            elif deadline is not None and time.monotonic() >= deadline and self.proc.poll() is None:  # alive, past the deadline
                self._end()
                ev = failed_evaluation(f"killed after {seconds:.0f} s: past its time limit of {limit:g} s", "timeout", seconds)
            else:
                ev = failed_evaluation(f"its training process died: {self._death()}", "crashed", seconds)
            return ev  # (the next task starts a new process: the result goes back now, not after torch's import)
        return self._result(task, message)

    def _result(self, task: Task, message: tuple[bytes, bytearray]) -> Evaluation:
        kind, body = message
        try:
            if kind != b"E":
                raise WireError(f"a message of kind {kind!r} where a result was due")
            ident, ev, offer = unpack_result(body, len(body))
            if ident != task.id:
                raise WireError(f"the result of evaluation {ident}, not {task.id}")
            if offer:
                payload = self._wait(None)
                if payload is None or payload[0] != b"P":
                    raise WireError("a result without the payload it offered")
                ev.take_payload(unpack_arrays(offer, np.frombuffer(payload[1], dtype=np.uint8)))
            return ev
        except WireError as exc:  # a process that says what it should not is ended; the next task starts another
            self._end()
            return failed_evaluation(f"its training process sent a bad message ({exc})", "crashed")

    def _wait(self, deadline: float | None) -> tuple[bytes, bytearray] | None:
        """The process's next message; None if it died, or ``deadline`` (time.monotonic) passed. Raises :class:`Ended`
        (the process killed and reaped) if the master ends the job meanwhile."""
        while True:
            wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
            if self.memory_limit:
                wait = min(wait, WATCH_SECONDS)
            if self.end_requested is not None:
                wait = min(wait, END_POLL_SECONDS)
            ready, _, _ = select.select([self.from_child], [], [], wait)
            if ready:
                return read_message(self.from_child)  # (None: it died while it wrote)
            if self.end_requested is not None and self.end_requested():
                self._end()  # (its process group with it)
                self.proc = None
                raise Ended("the master ended the job during this training")
            if self.proc.poll() is not None or (deadline is not None and time.monotonic() >= deadline) or self._over_memory():
                return None

    def _over_memory(self) -> bool:
        """The watchdog of ``train.max_host_memory_gb``: kill the process if its own resident memory (anonymous and
        shared, not the node's data it maps: :func:`own_resident_bytes`) is past the limit."""
        if not self.memory_limit:
            return False
        resident = own_resident_bytes(self.proc.pid, int(self.setup["data"]["size"]))
        if resident <= self.memory_limit:
            return False
        self._end()
        self.over_memory = (f"memory: its training process held {resident / (1 << 30):.2f} GB, past "
                            f"train.max_host_memory_gb = {self.memory_limit / (1 << 30):g}")
        return True

    # --- ending ---------------------------------------------------------------------------------

    def _death(self) -> str:
        """How the process ended, in words (it has ended, or is ended now)."""
        try:
            code = self.proc.wait(timeout=5)  # (its pipe may end a moment before it does)
        except subprocess.TimeoutExpired:
            code = self._end()
        if code is not None and code < 0:
            try:
                cause = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                cause = f"killed by signal {-code}"
        else:
            cause = f"exit status {code}"
        time.sleep(0.05)  # its last words on stderr, still in the pipe
        return cause + (f" (last said: {self.last_line})" if self.last_line else "")

    def _end(self) -> int | None:
        """Kill the process (if alive), reap it and close the pipes; its exit status."""
        code = None
        if self.proc is not None:
            alive = self.proc.poll() is None
            # Its process group: what a network's code started (a builder's subprocess, a data loader's workers) ends
            # with it and lets go of the rank's pipes. (A group whose last member has gone keeps no id to reuse.)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            if alive:
                self.proc.kill()
            code = self.proc.wait()
            remove_torch_shared_memory(self.proc.pid)
        for fd in (self.to_child, self.from_child):
            if fd >= 0:
                os.close(fd)
        self.to_child = self.from_child = -1
        return code

    def close(self) -> None:
        """Ask the process to stop (it finishes nothing more), and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                write_message(self.to_child, b"Q")
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._end()
        self.proc = None

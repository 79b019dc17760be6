"""What every process of an evens job knows and how it ends: the stop signals and their count, what the
launcher says (rank, size, an MPI that does not match it), an MPI command run so that a rank that fails takes
the job with it, and a standard output whose reader went away.

The command line (:mod:`evolve.app.commands.cli`), ``evens run``'s roles (:mod:`evolve.app.run.driver`), the master's
session and the Python API all use these; this module imports none of them.
"""
from __future__ import annotations

import math
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback

# ending_signals raises nowhere in this module (its own handler and trace functions run here)
SIGNALS_WAIT_HERE = True

ABORT_GRACE_SECONDS = 0.5  # between writing why a rank fails and aborting the job
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


# Copies of one stop signal reach the master within this many seconds and count once: a container's stop,
# `kill -TERM -- -1` or a batch script's time limit signals every process, and mpiexec (and each proxy)
# forwards its own copy on top of the master's.
DUPLICATE_SECONDS = 2.0


class StopFlag:
    """Counts SIGTERM (Slurm's preemption or time limit), SIGUSR1 (Slurm's early warning, with
    ``--signal=USR1@120``) and SIGINT: the first drains the search (see :func:`run_search`), the
    second ends the drain; a third ends the process (exit 128 + the signal's number), even one stuck
    in a call that never returns to Python. A signal within :data:`DUPLICATE_SECONDS` of the last one
    counted is a copy of it, not counted.

    The signals are counted by a thread that reads the interpreter's wakeup descriptor, which the C
    signal handler writes at once: a main thread inside an MPI call or a user's code runs no Python
    signal handler until it comes back.

    ``evens run`` makes it before mpi4py starts MPI: MPICH's MPI_Init installs a SIGUSR1 handler of
    its own that passes the signal on only to a handler that was there before it, and a signal while
    the job starts up (the broadcast, the devices) must not be lost or end the job unsaved.
    :meth:`close` puts back the handlers (and wakeup descriptor) it found, for a caller that goes on.
    """

    def __init__(self, duplicate_seconds: float = DUPLICATE_SECONDS) -> None:
        self.signum, self.count = 0, 0
        self.duplicate_seconds = duplicate_seconds
        self._last = -math.inf
        self._previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
        self._read, self._write = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(self._write, False)  # (set_wakeup_fd wants a descriptor that never blocks)
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            signal.signal(sig, _counted_elsewhere)
        self._watcher = threading.Thread(target=self._watch, name="evens-stop-signals", daemon=True)
        self._watcher.start()

    def __call__(self) -> int:
        return self.count

    def _watch(self) -> None:
        while True:
            try:
                numbers = os.read(self._read, 64)
            except OSError:
                return
            if not numbers:  # closed
                return
            for signum in numbers:
                self.note(signum, time.monotonic())

    def note(self, signum: int, now: float) -> None:
        """One stop signal that came at ``now`` (monotonic seconds)."""
        if signum not in _STOP_NUMBERS or now - self._last < self.duplicate_seconds:
            return
        self._last, self.signum = now, signum
        self.count += 1
        if self.count >= 3:
            os.write(2, f"evens: a third signal ({signal.Signals(signum).name}): ending now, without a checkpoint\n".encode())
            os._exit(128 + signum)

    def close(self) -> None:
        """Put back the signal handlers and the wakeup descriptor found at the start (main thread only)."""
        if self._write < 0:
            return
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._write)
        self._write = -1
        self._watcher.join(5.0)
        os.close(self._read)


_STOP_NUMBERS = {int(sig) for sig in STOP_SIGNALS}


def _counted_elsewhere(signum, frame) -> None:
    """A stop signal's Python handler: the :class:`StopFlag`'s thread counts it (through the wakeup descriptor)."""


# Launchers tell each process its rank in the environment; read only to print usage errors once.
_RANK_VARIABLES = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "MV2_COMM_WORLD_RANK")


def launcher_rank() -> int:
    for name in _RANK_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


# Set by launchers for every process they start: how many they started (MPICH/Intel MPI/srun's PMI,
# Open MPI, MVAPICH, and srun itself, whatever its MPI plugin: SLURM_STEP_NUM_TASKS is the step's, not
# the allocation's SLURM_NTASKS, which a single process in a batch script also sees).
_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS")


def launcher_size() -> int:
    """How many processes the launcher says it started (1 if no launcher says)."""
    for name in _SIZE_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 1:
            return int(value)
    return 1


def mismatched_launcher(comm) -> str | None:
    """The error for a job whose launcher started several processes that MPI sees each alone: mpi4py
    was built against another MPI than the launcher's, so every process would run a search of its own."""
    started = launcher_size()
    if comm.size != 1 or started == 1:
        return None
    from evolve.transport.mpi_transport import library_name

    library = library_name()
    if os.environ.get("SLURM_STEP_NUM_TASKS") and not any(os.environ.get(n) for n in _SIZE_VARIABLES[:3]):
        return (f"srun started {started} processes, but MPI sees each one alone: srun's MPI plugin does not match "
                f"mpi4py's MPI ({library}); give srun the plugin it needs (--mpi=pmi2 for PyPI's MPICH; srun --mpi=list "
                "lists them) or build mpi4py against the site's MPI (docs/cluster.md)")
    return (f"the launcher started {started} processes, but MPI sees each one alone: mpi4py uses another MPI "
            f"({library}) than the launcher's; launch with that MPI's mpiexec or srun, or build mpi4py against "
            "the launcher's MPI (docs/cluster.md)")


def collective(command) -> int:
    """Run an MPI command on every rank: a rank that fails unexpectedly takes the job with it."""
    from evolve.transport.mpi_transport import abort, world  # imports mpi4py, which starts MPI: only for collective commands

    mismatch = mismatched_launcher(world())
    if mismatch is not None:  # every process is alone: no abort reaches the others, and none must run
        if launcher_rank() == 0:
            print(f"evens: error: {mismatch}", file=sys.stderr, flush=True)
        return 2
    try:
        return command()
    except BaseException as exc:  # KeyboardInterrupt too: a rank that leaves must take the job with it
        comm = world()
        if isinstance(exc, BrokenPipeError) and closed_pipes():  # the output's reader went away (`| head`): quietly
            code = pipe_closed(exc)
            if comm.size > 1:
                abort(comm, code)
            return code
        interrupted = isinstance(exc, KeyboardInterrupt)
        if interrupted:
            message = f"evens: interrupted on rank {comm.rank} on {socket.gethostname()}\n"
        else:
            message = f"evens: internal error on rank {comm.rank} on {socket.gethostname()}:\n{traceback.format_exc()}"
        sys.stderr.write(message)  # in one piece, so that it is not torn by the abort
        sys.stderr.flush()
        code = 130 if interrupted else 1
        if comm.size > 1:
            # The launcher forwards this rank's output through a pipe; an abort at once can kill the
            # job before the message is through, and the user would not learn why the job ended.
            time.sleep(ABORT_GRACE_SECONDS)
            abort(comm, code)  # never leave the other ranks waiting
        return code


# The status of a process that SIGPIPE ended, as a shell reports `yes | head`'s `yes`: a reader that went away
# (`evens report RUN | head`) ends the command as it ends the Unix tools, quietly, and a script can still tell.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


def closed_pipes() -> list[int]:
    """Standard output and error where they are pipes whose reader has gone (poll marks such a pipe's writing end
    POLLERR): a BrokenPipeError from anywhere else (a trainer's pipe) is a bug, with its traceback."""
    poll = select.poll()
    for fd in (1, 2):
        poll.register(fd, 0)  # POLLERR is always reported
    return [fd for fd, events in poll.poll(0) if events & select.POLLERR]


def pipe_closed(exc: BrokenPipeError) -> int:
    """After a write to a closed standard output (or error): it goes to /dev/null, so that the interpreter's last
    flush at exit does not raise again with a traceback of its own; returns :data:`EXIT_BROKEN_PIPE`."""
    closed = closed_pipes()
    if not closed:
        raise exc
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in closed:
        os.dup2(devnull, fd)
    os.close(devnull)
    return EXIT_BROKEN_PIPE


class SignalEnded(BaseException):
    """SIGTERM or SIGHUP during a command that writes a file (convert, make-*), raised where the command is so that
    its temporary file is removed on the way out (a BaseException, as KeyboardInterrupt is: no ``except Exception``
    takes it for a failure of the data)."""

    def __init__(self, signum: int):
        super().__init__(f"ended by {signal.Signals(signum).name}")


# evens' own packages (evolve/, ensemble/, data_bcast/), beside each other wherever evens is installed
_OWN_CODE = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                               package, "") for package in ("evolve", "ensemble", "data_bcast"))


class ending_signals:
    """``with ending_signals() as ending:`` SIGTERM and SIGHUP raise :class:`SignalEnded` in the block and SIGINT
    KeyboardInterrupt, so that a writer's ``finally`` removes its temporary file; ``ending.signum`` says which came.
    Once the caller has caught it (it sets ``ending.caught``), further signals are only noted.

    The exception is raised only in evens' own code, and not in a module that sets ``SIGNALS_WAIT_HERE``
    (data_bcast/exclusive.py, where a temporary file made, renamed or removed halfway would stay; data_bcast/h5file.py,
    where an h5py object could stay open past its file; this module). Python drops an
    exception raised inside a weakref callback or a ``__del__``, which h5py runs many of, and h5py's file driver
    fails in odd ways when one lands there; a signal that finds the process elsewhere is raised at the next line of
    evens' own code that runs (a trace function, set only then). The handlers found are put back after. A signal
    that was ignored (nohup, a background job) stays ignored; off the main thread, where Python cannot set
    handlers, nothing changes."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)

    def __init__(self) -> None:
        self.signum, self.caught = 0, False
        self._previous: dict = {}
        self._tracing = False

    def _exception(self) -> BaseException:
        return KeyboardInterrupt() if self.signum == signal.SIGINT else SignalEnded(self.signum)

    def _handle(self, signum, frame) -> None:
        if self.caught or self.signum:
            self.signum = self.signum or signum
            return
        self.signum = signum
        if _raisable(frame):
            raise self._exception()
        self._tracing, self._prior_trace = True, sys.gettrace()  # (a coverage tool's or debugger's, put back after)
        sys.settrace(self._call)
        while frame is not None:  # the frames already running: evens' own among them raise at their next line
            if _raisable(frame):
                frame.f_trace = self._line
            frame = frame.f_back

    def _call(self, frame, event, arg):
        return self._line if _raisable(frame) else None

    def _line(self, frame, event, arg):
        if event == "line" and not self.caught and _raisable(frame):
            self._stop_tracing()
            raise self._exception()
        return self._line

    def _stop_tracing(self) -> None:
        if self._tracing:
            self._tracing = False
            sys.settrace(self._prior_trace)

    def __enter__(self) -> "ending_signals":
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                if signal.getsignal(sig) != signal.SIG_IGN:
                    self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        self.caught = True
        self._stop_tracing()
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set outside Python


def _raisable(frame) -> bool:
    """Is ``frame`` evens' own code, where an exception from a signal unwinds as any other would?"""
    return frame is not None and frame.f_code.co_filename.startswith(_OWN_CODE) and not frame.f_globals.get("SIGNALS_WAIT_HERE")

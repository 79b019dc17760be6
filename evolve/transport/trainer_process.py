"""The training process: where a worker rank's networks are built and trained, apart from the rank.

A worker rank starts one (``python -m evolve.transport.trainer_process``) and hands it, besides two
pipes, the descriptor of its node's copy of the data (:mod:`data_bcast.memory`), which it maps
read-only: the data is never copied per process. The rank stays an MPI process that never runs model
code; this process never calls MPI (it never imports mpi4py, and starts with the MPI launcher's
variables taken out of its environment, see :func:`evolve.transport.isolation.trainer_environment`).
If it dies (a signal, an exit, the out-of-memory killer), the rank records the evaluation as
``crashed`` and starts another (:class:`evolve.transport.isolation.TrainerProcess`).

Messages on the pipes are frames of a kind byte, a length and that many bytes (:func:`write_message`):

* rank -> trainer: ``S`` the set-up (JSON: the data's descriptor, size and array specs, the problem, the
  device and training settings, the rank's ``sys.path``), then ``T`` a task (JSON: ``Task.plain()``)
  at a time; ``Q`` or the pipe's end stops it.
* trainer -> rank: ``R`` ready (JSON: the device it trains on, as ``describe_device`` says, or the
  error that stopped it), then for each task ``E`` its result (:func:`evolve.transport.wire.pack_result`)
  and, if the result offers its predictions and weights, ``P`` their buffer (``pack_arrays``).

Nothing is pickled either way. Stop signals (SIGTERM, SIGINT, SIGUSR1: Slurm signals every process
of a step, and Ctrl-C the whole process group) are ignored here: the rank decides, and a drain lets
the training finish. The process leads a process group of its own, and dies with its rank (a thread
waits on the rank's pidfd), taking that group with it: what a network's code started ends too.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import struct
import sys

_FRAME = struct.Struct("<cQ")
PR_SET_NAME = 15


def write_message(fd: int, kind: bytes, payload: bytes | memoryview = b"") -> None:
    """One frame: ``kind`` (one byte), the payload's length, the payload."""
    view = memoryview(_FRAME.pack(kind, len(payload)) + bytes(payload)) if len(payload) < 1 << 16 else None
    if view is None:  # a large payload (weights) is not copied into a new bytes object
        _write_all(fd, memoryview(_FRAME.pack(kind, len(payload))))
        view = memoryview(payload).cast("B")
    _write_all(fd, view)


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view):]


def read_message(fd: int) -> tuple[bytes, bytearray] | None:
    """The next frame as (kind, payload); None if the pipe ended (cleanly or in the middle of a frame)."""
    head = _read_exactly(fd, _FRAME.size)
    if head is None:
        return None
    kind, length = _FRAME.unpack(head)
    payload = _read_exactly(fd, length)
    return None if payload is None else (kind, payload)


def _read_exactly(fd: int, n: int) -> bytearray | None:
    buffer = bytearray(n)
    view, got = memoryview(buffer), 0
    while got < n:
        chunk = os.readv(fd, [view[got:]])
        if chunk == 0:
            return None
        got += chunk
    return buffer


def die_with_parent(parent: int) -> None:
    """End, with the processes this one starts, when the rank that started it dies; now if it already has."""
    if os.getppid() != parent:
        os._exit(1)
    die_with_rank(parent)


def _set_up(setup: dict):
    """The data on this process's device, from the set-up message; (evaluate, the device's description)."""
    for folder in reversed(setup["sys_path"]):  # the rank's module search path (model.path added), before its own
        if folder not in sys.path:
            sys.path.insert(0, folder)
    import warnings

    from data_bcast.layout import unpack_arrays
    from data_bcast.memory import mapped

    # The data is mapped read-only and training never writes to it: torch's warning about taking a
    # read-only array without a copy says nothing here.
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    import torch

    from ensemble.device import choose_device, describe_device
    from ensemble.problem import problem_from_dict
    from ensemble.train import DeviceData
    from evolve.transport.worker import trainer_for

    memory = mapped(setup["data"]["fd"], setup["data"]["size"])
    arrays = unpack_arrays(setup["data"]["specs"], memory.buffer)  # (the layout the broadcast gave them)
    d, t = setup["device"], setup["train"]
    torch.set_num_threads(d["threads"])  # (the rank read its share of the node's cores: evolve.app.infra.local)
    device = choose_device(d["local_index"], d["prefer"], d["workers_per_gpu"])
    data = DeviceData.from_arrays(arrays, problem_from_dict(setup["problem"]), device, t["precision"], t["loss"], t["class_weights"])
    limit_memory(setup.get("max_host_memory_gb", 0.0))
    return memory_errors_crash(trainer_for(data, t["split_seed"])), describe_device(device)


def limit_memory(gigabytes: float) -> None:
    """``train.max_host_memory_gb``: from now on this process may ask for at most that much more data
    memory (RLIMIT_DATA, which counts what is reserved, not what is resident: the rank watches the
    resident part, see evolve.transport.isolation). A request past it fails at once, as MemoryError."""
    if gigabytes > 0:
        import resource

        limit = (status_kb("self", "VmData") << 10) + int(gigabytes * (1 << 30))
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def status_kb(pid: int | str, field: str) -> int:
    """A field in kB of /proc/PID/status (VmData, RssAnon, ...); 0 where unknown."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def memory_errors_crash(evaluate):
    """``evaluate``, with a training that runs out of memory (host, or CUDA) ending as ``crashed`` with
    "memory" and what it asked for, rather than as a network's ``error``."""
    from ensemble.results import failed_evaluation

    def guarded(task):
        try:
            return evaluate(task)
        except MemoryError as exc:
            return failed_evaluation(f"memory: {type(exc).__name__} {str(exc)[:200]}".strip(), "crashed")
        except RuntimeError as exc:  # torch's allocators: "can't allocate memory", CUDA's OutOfMemoryError
            text = str(exc)
            if "out of memory" in text.lower() or "can't allocate memory" in text:
                return failed_evaluation(f"memory: {text.splitlines()[0][:300]}", "crashed")
            raise

    return guarded


def serve_tasks(read_fd: int, write_fd: int, data_fd: int | None = None) -> int:
    """Set up from the first message, then train each task as it comes; returns the exit status. ``data_fd``: the
    node's data here, if not at the descriptor the set-up names (a process forked by the fork server)."""
    from data_bcast.layout import array_specs, pack_arrays
    from evolve.transport.protocol import Task, evaluate_safely
    from evolve.transport.wire import pack_result

    message = read_message(read_fd)
    if message is None or message[0] != b"S":
        return 1
    try:
        setup = json.loads(message[1])
        if data_fd is not None:
            setup["data"]["fd"] = data_fd
        evaluate, device = _set_up(setup)
    except Exception as exc:  # the rank reports it as its start-up error, in one line
        write_message(write_fd, b"R", json.dumps({"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}).encode())
        return 1
    write_message(write_fd, b"R", json.dumps({"device": device}).encode())
    while (message := read_message(read_fd)) is not None and message[0] == b"T":
        task = Task(**json.loads(message[1]))
        ev = evaluate_safely(evaluate, task)
        arrays = ev.payload()
        write_message(write_fd, b"E", pack_result(task.id, ev, array_specs(arrays) if arrays else None))
        if arrays:
            write_message(write_fd, b"P", memoryview(pack_arrays(arrays)[1]))
    return 0


def serve_forked(fds: list[int], env: dict, rank: int, cwd: str | None = None, cpus: list[int] | None = None) -> int:
    """A training process the fork server (evolve.transport.forkserver) forked for the rank ``rank``: with its
    descriptors ``fds`` (from the rank, to the rank, the node's data, its stderr), its environment ``env``, working
    folder ``cwd`` and cores ``cpus`` (the rank's affinity); it dies with that rank (not with the server, its parent).
    Returns the exit status (4: it could not take the rank's cores)."""
    from_rank, to_rank, data_fd, stderr_fd = fds
    with contextlib.suppress(OSError):  # a process group of its own, as a fresh interpreter's (the server does it too)
        os.setpgid(0, 0)
    try:  # its name in top and ps -o comm (its command line stays the server's)
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, b"evens-trainer")
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass
    os.dup2(stderr_fd, 2)
    os.close(stderr_fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    if cwd:
        os.chdir(cwd)
    if cpus:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError as exc:  # (a cgroup that holds the server to other cores): the rank starts a fresh interpreter
            print(f"evens: a forked training process cannot run on its rank's cores {cpus}: {exc}", file=sys.stderr)
            return 4
    os.environ.clear()
    os.environ.update(env)
    die_with_rank(rank)
    ignore_stop_signals()
    return serve_tasks(from_rank, to_rank, data_fd)


def die_with_rank(rank: int) -> None:
    """End this process the moment the process ``rank`` (not its parent) ends; now if it has (a thread waits on its pidfd)."""
    import select
    import threading

    try:
        pidfd = os.pidfd_open(rank)
    except ProcessLookupError:
        os._exit(1)

    def watch() -> None:
        select.select([pidfd], [], [])
        if os.getpgid(0) == os.getpid():  # this process leads its group (the rank made it so): end it whole
            os.killpg(0, signal.SIGKILL)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-rank", daemon=True).start()


def ignore_stop_signals() -> None:
    """Ignore SIGTERM, SIGINT and SIGUSR1 (Slurm signals every process of a step, Ctrl-C the process group): the rank
    decides when to stop, and a drain lets trainings end."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_IGN)


def main(argv: list[str]) -> int:
    read_fd, write_fd, parent = (int(a) for a in argv[:3])
    die_with_parent(parent)
    ignore_stop_signals()
    return serve_tasks(read_fd, write_fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

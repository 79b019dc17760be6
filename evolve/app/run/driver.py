"""``evens run``: the one place that decides who is the master and who is a worker.

Every rank runs :func:`run`. Rank 0 (the master) validates the config and the run directory
(:mod:`evolve.app.run.prepare`), reads the data and broadcasts it; every rank then sets itself up, and
all ranks agree on the first error before anyone goes on, so bad input ends the whole job at once
with one message. After that the master runs the search (:mod:`evolve.app.run.session`) and the
workers serve it. With a single rank, the master trains in-process.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import time
from typing import TYPE_CHECKING

from data_bcast.agreement import first_error
from data_bcast.broadcast import SharedDataset, broadcast_dataset, located
from data_bcast.h5file import DataError
from data_bcast.reader import read_array
from ensemble.problem import Problem, problem_for
from evolve.app.infra.local import affinity, ranks_sharing, trainer_threads, usable_cores
from evolve.app.infra.log import LOG, setup_logging
from evolve.app.infra.process import STOP_SIGNALS, StopFlag
from evolve.app.infra.user_code import user_code_problem
from evolve.app.run.prepare import Prepared, check_same_data, prepare
from evolve.app.run.session import EXIT_RESUMABLE, MASTER, run_master, say
from evolve.config.schema import Config, config_from_dict
from evolve.errors import EvensError, debug_traceback
from evolve.search.presets import DataFacts
from evolve.transport import forkserver
from evolve.transport.isolation import TrainerError, TrainerProcess, trainer_environment
from evolve.transport.mpi_transport import MPIWorkerChannel, world
from evolve.transport.worker import serve, trainer_for

if TYPE_CHECKING:
    from ensemble.train import DeviceData


def data_problem(comm, data: SharedDataset, metric: str = "auto") -> Problem:
    """What the data asks to learn, the same on every rank. A regression's standardisation is fitted
    on the whole training split: in shard mode a node holds only part of it, so the master reads
    the split's targets and gives every rank the problem (a collective then; the same branch on all)."""
    if data.shard is None or data.plan.kind != "regression":
        return problem_for(data.plan.kind, data.arrays["train/y"], data.plan.num_classes, metric)
    problem, error = None, None
    if comm.rank == MASTER:
        try:
            problem = problem_for("regression", read_array(data.plan, "train/y"), metric=metric)
        except DataError as exc:
            error = str(exc)
    problem, error = comm.bcast((problem, error), root=MASTER)
    if error:
        raise DataError(error)
    return problem


def data_description(data: SharedDataset, folds: int = 0) -> DataFacts:
    """What a preset is chosen and scaled by (the whole training split, in shard mode too, and the folds it is cut into)."""
    return DataFacts(tuple(data.plan.sample_shape), data.plan.kind, int(data.plan.spec("train/y").shape[0]), folds)


def setup_trainer(config: Config, data: SharedDataset, problem: Problem, local_index: int, sharing: int) -> DeviceData:
    """Pick this rank's device and threads and put the data there (a GPU copy, or the shared host copy)."""
    from ensemble.train import DeviceData  # (here: a rank that only serves a training process imports no torch)
    from evolve.app.infra.local import take_device

    device = take_device(config.train.device, local_index, sharing, config.train.threads, config.train.workers_per_gpu)
    return DeviceData.from_arrays(data.arrays, problem, device, config.train.precision, config.train.loss, config.train.class_weights)


def described(trainer_data: DeviceData | None) -> dict | None:
    """The device this rank trains on (``describe_device``), or None if it trains nothing."""
    if trainer_data is None:
        return None
    from ensemble.device import describe_device

    return describe_device(trainer_data.device)


def start_trainer_process(config: Config, data: SharedDataset, problem: Problem, local_index: int, sharing: int,
                          token: str = "") -> TrainerProcess:
    """This rank's training process (``train.isolation = "process"``), set up as :func:`setup_trainer` sets
    up the rank itself, forked by the node's fork server where ``train.fork_server`` wants one (``token``: the job's,
    naming the server); raises TrainerError with its reason."""
    t = config.train
    setup = {
        "sys_path": list(sys.path),
        "data": {"size": data.memory.size, "specs": data.specs()},
        "problem": problem.to_dict(),
        "device": {"prefer": t.device, "local_index": local_index, "workers_per_gpu": t.workers_per_gpu,
                   "threads": trainer_threads(sharing, t.threads)},
        "train": {"precision": t.precision, "loss": t.loss, "class_weights": t.class_weights, "split_seed": config.data.split_seed},
        "max_host_memory_gb": t.max_host_memory_gb,
    }
    server = forkserver.reach(token, trainer_environment()) if token and forkserver.wanted(t.fork_server, t.device) else None
    trainer = TrainerProcess(setup, data.memory.fd, server)
    trainer.start()
    return trainer


def run(config_path: str | None, overrides: list[str], out: str | None = None, resume: str | None = None, quiet: bool = False,
        verbose: bool = False, status_seconds: float = 60.0, stop: StopFlag | None = None) -> int:
    """Collective over the world: run or resume a search. Returns the exit code."""
    return run_search(config_path, overrides, out, resume, quiet, verbose, status_seconds, stop)[0]


def run_search(config_path: str | None, overrides: list[str], out: str | None = None, resume: str | None = None, quiet: bool = False,
               verbose: bool = False, status_seconds: float = 60.0, stop: StopFlag | None = None) -> tuple[int, str | None]:
    """:func:`run`, with the run directory the master used (None on the workers, and where none was made).

    ``stop`` counts the stop signals; make it before mpi4py starts MPI (:class:`~evolve.app.infra.process.StopFlag`
    says why). Without one, the signals are counted from here on."""
    stop = StopFlag() if stop is None else stop
    comm = world()
    setup_logging(comm.rank == MASTER, comm.rank, quiet, verbose)
    started = time.time()
    is_master = comm.rank == MASTER
    prepared, error = None, None
    if is_master:
        try:
            prepared = prepare(config_path, overrides, out, resume)
            prepared.status_seconds = status_seconds
        except EvensError as exc:
            debug_traceback()
            error = located(str(exc))
    config_dict, error = comm.bcast((prepared.config.to_dict() if prepared else None, error), root=MASTER)
    if error:
        return _fail(is_master, error), None
    try:
        code = _run_prepared(comm, config_dict, prepared, started, quiet, stop)
    finally:
        if is_master:
            prepared.release()
    # Every rank ends with the master's status (a worker's serve returns 0 after a stop too), so that
    # run_search_from raises the same error everywhere; a rank that did not return normally aborted the job.
    code = comm.bcast(code if is_master else None, root=MASTER)
    return code, prepared.run_dir if is_master else None


def _run_prepared(comm, config_dict: dict, prepared: Prepared | None, started: float, quiet: bool, stop: StopFlag) -> int:
    is_master = comm.rank == MASTER
    config = config_from_dict(config_dict)
    error = first_error(comm, user_code_problem(config, check=is_master, run=is_master or config.train.isolation != "process"), MASTER)  # before any data moves
    if error:
        return _fail(is_master, error)
    if comm.bcast(stop() if is_master else None, root=MASTER):  # the master's signals decide, as in the search
        return _stopped_starting(is_master, stop, prepared)
    try:
        # config.data has data_bcast's LoadOptions' fields; the master trains only when alone
        data = broadcast_dataset(comm, config.data.path if is_master else None, config.data, root=MASTER, root_trains=comm.size == 1,
                                 handable=config.train.isolation == "process")
    except DataError as exc:
        debug_traceback()
        return _fail(is_master, str(exc))
    code = _run_roles(comm, config, data, prepared, started, quiet, stop)
    # Freeing the communicators is collective: only on a normal return. After an exception the
    # CLI aborts the job instead, and a collective here would wait for ranks that never come.
    data.close()
    return code


def _failure(exc: Exception) -> str:
    """A rank's start-up failure in one line: ours as they say it, anything else (a device that fails) with its type."""
    debug_traceback()
    return str(exc) if isinstance(exc, (EvensError, DataError, TrainerError)) else f"{type(exc).__name__}: {exc}"


def _run_roles(comm, config: Config, data: SharedDataset, prepared: Prepared | None, started: float, quiet: bool, stop: StopFlag) -> int:
    is_master = comm.rank == MASTER
    error, space, trainer_data, trainer = None, None, None, None
    # Workers on the master's node count from 0 after it, so they take GPUs 0, 1, ...
    local_index = data.node_rank - (1 if data.root_here else 0)
    trains = not is_master or comm.size == 1
    # Collective on the node: the training ranks that may run on this rank's cores divide them (all the node's
    # where none is bound, one where srun binds each task to cores of its own)
    mine = affinity() if trains else None
    sharing = ranks_sharing(mine, data.node_comm.allgather(mine))
    token = comm.bcast(os.urandom(8).hex() if is_master else None, root=MASTER)  # names each node's fork server for this job
    try:
        problem = data_problem(comm, data, config.search.metric)
        if is_master:
            config, chosen = config.resolved(data_description(data, config.data.fold_count))  # a preset's space is made from the data
            prepared.config, prepared.preset = config, chosen or prepared.preset
            space = config.space.for_data(data.plan.sample_shape, data.plan.kind)
            if prepared.info is not None:
                check_same_data(prepared.info, data, problem)
    except Exception as exc:
        error = _failure(exc)
    # A run the master refuses (a preset that does not fit, other data than the run's) ends every rank here, before
    # any starts its trainer (torch, and its device: seconds a rank)
    refused = comm.bcast(located(error) if is_master and error else None, root=MASTER)
    if refused:
        return _fail(is_master, refused)
    try:
        if error is None and not is_master and config.train.isolation == "process":
            trainer = start_trainer_process(config, data, problem, max(local_index, 0), sharing, token)
        elif error is None and (not is_master or comm.size == 1):
            trainer_data = setup_trainer(config, data, problem, max(local_index, 0), sharing)
    except Exception as exc:  # a device that fails to start, say
        error = _failure(exc)
    device = trainer.device if trainer is not None else described(trainer_data)
    binding = None if device is None else dict(device, rank=comm.rank, host=socket.gethostname(), cores=usable_cores())
    gathered = comm.gather((error and located(error), binding), root=MASTER)
    device_lines: list[str] = []
    if is_master:
        error = next((e for e, _ in gathered if e), None)  # the first rank's, saying where
        if error is None:  # the bindings are checked together; a bad one's message names its ranks and host
            found = [b for _, b in gathered if b is not None]
            from ensemble.device import check_bindings

            error, device_lines = check_bindings(found, config.train.workers_per_gpu, {b["host"]: b["cores"] for b in found})
            prepared.devices = found
    error = comm.bcast(error if is_master else None, root=MASTER)
    if error:
        if trainer is not None:
            _close_trainer(trainer)
        return _fail(is_master, error)
    if is_master:
        for line in device_lines:
            say(line)
        for b in prepared.devices or []:
            LOG.debug(f"rank {b['rank']} on {b['host']}: {b['device']} {b['name']} {b['uuid']} ({b['threads']} threads)")
        return run_master(comm, config, data, problem, prepared, space, trainer_data, started, quiet, stop)
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)  # the master decides when to stop
    channel = MPIWorkerChannel(comm, MASTER)
    if trainer is None:
        serve(channel, trainer_for(trainer_data, config.data.split_seed))
    else:
        trainer.end_requested = channel.end_requested  # the master may end the job mid-training (MPIMasterTransport.end)
        try:
            serve(channel, trainer.evaluate)
        finally:
            _close_trainer(trainer)
    channel.say_ended()  # (where the master ended the job: this rank's training processes and fork server are gone)
    return 0


SERVER_END_SECONDS = 5.0  # at a rank's end, how long the rank that started its node's fork server waits for it to end


def _close_trainer(trainer: TrainerProcess) -> None:
    """End this rank's training process and let go of its node's fork server; the rank that started the server waits
    for it to end: nothing this rank started outlives it."""
    trainer.close()
    if trainer.server is not None:
        trainer.server.close(wait=SERVER_END_SECONDS)


def _stopped_starting(is_master: bool, stop: StopFlag, prepared: Prepared | None) -> int:
    """A signal came before any data moved: end now, with the run as it was (a new run's directory is
    released as never used), and say how to go on. A later signal is the search's: it checkpoints first."""
    if is_master:
        then = (f"the run is as it was; continue with: evens run --resume {prepared.run_dir}" if prepared.state is not None
                else "nothing was written; start the run again")
        say(f"stopped by signal {stop.signum} during start-up, before the data was broadcast; {then} "
            f"(exit status {EXIT_RESUMABLE}: resumable)")
    return EXIT_RESUMABLE


def _fail(is_master: bool, message: str) -> int:
    if is_master:
        say(f"error: {message}")
    return 2

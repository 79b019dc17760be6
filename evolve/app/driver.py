"""``evens run``: the one place that decides who is the master and who is a worker.

Every rank runs :func:`run`. Rank 0 (the master) validates the config and the
run directory, reads the data and broadcasts it; every rank then sets itself up,
and all ranks agree on the first error before anyone goes on, so bad input ends
the whole job at once with one message. After that the master runs the search
and the workers serve it. With a single rank, the master trains in-process.
"""
from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import dataclass, replace

import numpy as np
import torch

from data_bcast.broadcast import SharedDataset, broadcast_dataset, located
from data_bcast.h5file import DataError, first_line
from data_bcast.reader import read_array
from ensemble.device import check_bindings, describe_device
from ensemble.problem import Problem, problem_for
from ensemble.train import DeviceData

from .. import __version__, checkpoint
from ..checkpoint import CHECKPOINT_NAME, RunInfo
from ..config import Config, apply_overrides, config_from_dict, load_config
from ..errors import ConfigError, EvensError, RunDirError, debug_traceback
from ..ga import GAParams
from ..master import HungWorker, SearchSettings, SearchState, run_search
from ..mpi_transport import MPIMasterTransport, MPIWorkerChannel, abort, world
from ..protocol import InProcessTransport
from ..space import SearchSpace
from ..worker import serve, trainer_for
from .local import take_device, usable_cores
from .log import LOG, setup_logging
from .progress import Progress
from .report import format_summary, summarize
from .rundir import SUMMARY_NAME, Claim, checkpoint_path, claim_default_run_dir, claim_run_dir, write_json
from ..tempfiles import remove_stale
from .runlock import RunLock
from .selection import SelectionCache

MASTER = 0
# The exit status of a job stopped by a signal (Slurm's time limit, preemption, or its early warning
# with --signal) after its checkpoint was written: "resume me". EX_TEMPFAIL of sysexits.h; a batch
# script tests for it to requeue (scripts/slurm/).
EXIT_RESUMABLE = 75
# The exit status of a job that gave up on a worker that stopped answering (see search.hang_seconds),
# after its checkpoint was written; a resume redoes that worker's network once (docs/reliability.md).
EXIT_HUNG = 69
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
DEVICES_NAME = "devices.json"  # each worker's rank, host, device and GPU UUID, for the latest session


@dataclass
class Prepared:
    """What the master decided before any data moved."""

    config: Config
    run_dir: str
    lock: RunLock  # held until the job ends: one job per run directory
    claim: Claim | None = None  # a new run's claim on its directory
    state: SearchState | None = None  # None for a new run
    info: RunInfo | None = None
    devices: list[dict] | None = None  # each worker's rank, host, device, name and UUID
    status_seconds: float = 60.0  # between status lines in batch output (evens run --status-seconds)

    def release(self) -> None:
        """Let the run directory go; a new run that never wrote a checkpoint leaves it as it was."""
        if self.claim is not None:
            self.claim.release()
        else:
            self.lock.release()


def say(message: str) -> None:
    """A line for the user, from the master (``evens: message`` on standard error)."""
    if message.startswith("error: "):
        LOG.error(message)
    elif message.startswith("warning: "):
        LOG.warning(message)
    else:
        LOG.info(message)
    for handler in LOG.handlers:
        handler.flush()


def prepare(config_path: str | None, overrides: list[str], out: str | None, resume: str | None) -> Prepared:
    """Validate the command line's config and run directory (master only).

    A new run claims its directory here (see :func:`claim_run_dir`), a resumed run locks its
    own; :func:`run` releases either when the job ends (a new run that never wrote a checkpoint
    leaves the directory as it found it).
    """
    if resume is None:
        if config_path is None:
            raise ConfigError("evens run needs a CONFIG file, or --resume RUN_DIR")
        config = _absolute_data_path(load_config(config_path, overrides))
        claim = claim_default_run_dir(config_path) if out is None else claim_run_dir(out)
        return Prepared(config, claim.path, claim.lock, claim)
    if out is not None and os.path.abspath(out) != os.path.abspath(resume):
        raise RunDirError("--out and --resume name different directories; a resumed run stays in its own")
    path = checkpoint_path(resume)
    lock = RunLock.acquire(resume)
    try:
        for folder in (resume, checkpoint.segments_folder(path)):  # what a killed writer left: ours to clear now
            if os.path.isdir(folder):
                remove_stale(folder)
        return _prepare_resume(config_path, overrides, resume, path, lock)
    except BaseException:
        lock.release()
        raise


def _absolute_data_path(config: Config) -> Config:
    """The config with an absolute data path, so that a resume from another directory finds the same file."""
    return replace(config, data=replace(config.data, path=os.path.abspath(config.data.path)))


def _prepare_resume(config_path: str | None, overrides: list[str], resume: str, path: str, lock: RunLock) -> Prepared:
    state, info = checkpoint.load(path)
    if config_path is not None:
        config = _absolute_data_path(load_config(config_path, overrides))
    else:
        try:
            config = config_from_dict(apply_overrides(info.config, overrides))
        except ConfigError as exc:
            raise ConfigError(f"{resume}: {exc}") from None
    stored = config_from_dict(info.config)
    if config.space != stored.space or list(info.gene_names) != list(config.space.names):
        raise ConfigError(f"{resume}: the search space differs from the run's; a resumed run keeps its space")
    for key in ("mode", "second_objective"):
        now, then = getattr(config.search, key), getattr(stored.search, key)
        if now != then:
            raise ConfigError(f"{resume}: search.{key} is {now!r}, but the run's is {then!r}; a resumed run keeps its {key.replace('_', ' ')}")
    return Prepared(config, resume, lock, None, state, info)


def data_problem(comm, data: SharedDataset) -> Problem:
    """What the data asks to learn, the same on every rank. A regression's standardisation is fitted
    on the whole training split: in shard mode a node holds only part of it, so the master reads
    the split's targets and gives every rank the problem (a collective then; the same branch on all)."""
    if data.shard is None or data.plan.kind != "regression":
        return problem_for(data.plan.kind, data.arrays["train/y"], data.plan.num_classes)
    problem, error = None, None
    if comm.rank == MASTER:
        try:
            problem = problem_for("regression", read_array(data.plan, "train/y"))
        except DataError as exc:
            error = str(exc)
    problem, error = comm.bcast((problem, error), root=MASTER)
    if error:
        raise DataError(error)
    return problem


def data_facts(data: SharedDataset, problem: Problem) -> dict:
    plan = data.plan
    return {
        "path": plan.path,
        "sample_shape": list(plan.sample_shape),
        "x_dtype": plan.spec("train/x").dtype,
        "sizes": {s: plan.spec(f"{s}/y").shape[0] for s in ("train", "val", "test")},
        "problem": problem.to_dict(),
        "fingerprint": data.stats.get("fingerprint"),  # CRC-32s of every array sent (data_bcast.broadcast.fingerprint)
    }


def check_same_data(info: RunInfo, data: SharedDataset, problem: Problem) -> None:
    facts = data_facts(data, problem)
    for key in ("sample_shape", "sizes"):
        if facts[key] != info.data[key]:
            raise DataError(f"{facts['path']}: {key} is {facts[key]}, but the run was made with {info.data[key]}")
    if facts["problem"]["kind"] != info.data["problem"]["kind"]:
        raise DataError(f"{facts['path']}: a {facts['problem']['kind']} dataset, but the run is {info.data['problem']['kind']}")
    then = info.data.get("fingerprint")
    if then and facts["fingerprint"] and facts["fingerprint"] != then:  # runs from before fingerprints have none
        raise DataError(f"{facts['path']}: the data differs from the run's (fingerprint {facts['fingerprint']}, the run's {then}); "
                        "a resumed run trains on the same data (same file, split fractions and split seed)")
    if not (np.array_equal(data.arrays["val/y"], info.val_y) and np.array_equal(data.arrays["test/y"], info.test_y)):
        raise DataError(f"{facts['path']}: the val/test labels differ from the run's; this is not the same data")
    if facts["problem"] != info.data["problem"]:
        raise DataError(f"{facts['path']}: the training targets differ from the run's ({facts['problem']} against {info.data['problem']})")


def setup_trainer(config: Config, data: SharedDataset, problem: Problem, local_index: int, ranks_here: int) -> DeviceData:
    """Pick this rank's device and threads and put the data there (a GPU copy, or the shared host copy)."""
    device = take_device(config.train.device, local_index, ranks_here, config.train.threads, config.train.workers_per_gpu)
    return DeviceData.from_arrays(data.arrays, problem, device, config.train.precision)


class StopFlag:
    """Counts SIGTERM (Slurm's preemption or time limit), SIGUSR1 (Slurm's early warning, with
    ``--signal=USR1@120``) and SIGINT: the first drains the search (see :func:`run_search`), the
    second ends the drain; a third acts as usual (ends the process)."""

    def __init__(self) -> None:
        self.signum, self.count = 0, 0
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        self.signum = signum
        self.count += 1
        if self.count >= 2:
            for sig in STOP_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)

    def __call__(self) -> int:
        return self.count


def run(config_path: str | None, overrides: list[str], out: str | None = None, resume: str | None = None, quiet: bool = False,
        verbose: bool = False, status_seconds: float = 60.0) -> int:
    """Collective over the world: run or resume a search. Returns the exit code."""
    comm = world()
    setup_logging(comm.rank, quiet, verbose)
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
        return _fail(is_master, error)
    try:
        return _run_prepared(comm, config_dict, prepared, started, quiet)
    finally:
        if is_master:
            prepared.release()


def _run_prepared(comm, config_dict: dict, prepared: Prepared | None, started: float, quiet: bool) -> int:
    is_master = comm.rank == MASTER
    config = config_from_dict(config_dict)
    try:
        data = broadcast_dataset(
            comm,
            config.data.path if is_master else None,
            val_fraction=config.data.val_fraction,
            test_fraction=config.data.test_fraction,
            seed=config.data.split_seed,
            root=MASTER,
            chunk_bytes=config.data.chunk_mb << 20,
            read_threads=config.data.read_threads,
            shared=config.data.shared_memory,
            allow_external=config.data.allow_external,
            mode=config.data.mode,
            root_trains=comm.size == 1,  # the master trains only when alone
        )
    except DataError as exc:
        debug_traceback()
        return _fail(is_master, str(exc))
    code = _run_roles(comm, config, data, prepared, started, quiet)
    # Freeing the shared window is collective: only on a normal return. After an exception the
    # CLI aborts the job instead, and a collective here would wait for ranks that never come.
    data.close()
    return code


def _run_roles(comm, config: Config, data: SharedDataset, prepared: Prepared | None, started: float, quiet: bool) -> int:
    is_master = comm.rank == MASTER
    error, space, trainer_data = None, None, None
    # Workers on the master's node count from 0 after it, so they take GPUs 0, 1, ...
    local_index = data.node_rank - (1 if data.root_here else 0)
    ranks_here = data.node_size - (1 if data.root_here and comm.size > 1 else 0)
    try:
        problem = data_problem(comm, data)
        if is_master:
            space = config.space.for_sample_shape(data.plan.sample_shape)
            if prepared.info is not None:
                check_same_data(prepared.info, data, problem)
        if not is_master or comm.size == 1:
            trainer_data = setup_trainer(config, data, problem, max(local_index, 0), ranks_here)
        elif is_master:
            torch.set_num_threads(1)
    except (EvensError, DataError) as exc:
        debug_traceback()
        error = str(exc)
    except Exception as exc:  # a device that fails to start, say
        error = f"{type(exc).__name__}: {exc}"
    binding = None
    if trainer_data is not None:
        binding = dict(describe_device(trainer_data.device), rank=comm.rank, host=socket.gethostname(), cores=usable_cores())
    gathered = comm.gather((error and located(error), binding), root=MASTER)
    device_lines: list[str] = []
    if is_master:
        error = next((e for e, _ in gathered if e), None)  # the first rank's, saying where
        if error is None:  # the bindings are checked together; a bad one's message names its ranks and host
            found = [b for _, b in gathered if b is not None]
            error, device_lines = check_bindings(found, config.train.workers_per_gpu, {b["host"]: b["cores"] for b in found})
            prepared.devices = found
    error = comm.bcast(error if is_master else None, root=MASTER)
    if error:
        return _fail(is_master, error)
    if is_master:
        for line in device_lines:
            say(line)
        for b in prepared.devices or []:
            LOG.debug(f"rank {b['rank']} on {b['host']}: {b['device']} {b['name']} {b['uuid']} ({b['threads']} threads)")
        return _master(comm, config, data, problem, prepared, space, trainer_data, started, quiet)
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)  # the master decides when to stop
    serve(MPIWorkerChannel(comm, MASTER), trainer_for(trainer_data))
    return 0


def _master(
    comm, config: Config, data: SharedDataset, problem: Problem, prepared: Prepared, space: SearchSpace, trainer_data, started: float, quiet: bool
) -> int:
    run_dir, state, info = prepared.run_dir, prepared.state, prepared.info
    stats = data.stats
    say(
        f"data {data.plan.path}: {stats['bytes'] / 1e6:.1f} MB read in {stats.get('read_seconds', 0):.2f} s, "
        f"broadcast to {comm.size} ranks in {stats.get('broadcast_seconds', 0):.2f} s"
        + (f"; shard mode: each of {data.shard.count} nodes holds about {data.shard.total_rows // data.shard.count} "
           f"of the {data.shard.total_rows} training rows" if data.shard else "")
    )
    if state is None:
        state = SearchState.fresh(config.search.seed, config.ensemble.candidates)
        info = RunInfo(
            config=config.to_dict(),
            gene_names=list(config.space.names),
            data=data_facts(data, problem),
            val_y=data.arrays["val/y"].copy(),
            test_y=data.arrays["test/y"].copy(),
            version=__version__,
        )
    else:
        info.config = config.to_dict()
        say(f"resuming {run_dir}: {len(state.records)} evaluations done, {len(state.pending)} to redo")
    info.sessions += 1
    wall_before = info.wall_seconds
    path = os.path.join(run_dir, CHECKPOINT_NAME)
    choose = SelectionCache(info)
    journal = None

    def save(s: SearchState) -> None:
        info.wall_seconds = wall_before + (time.time() - started)
        s.selection = choose(s.hall_of_fame)  # the ensemble in every checkpoint is ready to use
        try:
            checkpoint.save(path, s, info)
            if journal is not None:
                journal.reset()  # the checkpoint holds what it noted
        except OSError as exc:  # a full disk, a quota, a file system gone read-only
            raise RunDirError(f"{path}: cannot write the checkpoint ({exc.strerror or first_line(exc)}); "
                              f"the run keeps its previous checkpoint; continue with: evens run --resume {run_dir}") from None
        prepared.lock.heartbeat()

    if comm.size == 1:
        transport = InProcessTransport(trainer_for(trainer_data), 1)
    else:
        transport = MPIMasterTransport(comm, MASTER)
    settings = SearchSettings(
        budget=config.search.evaluations,
        ga=GAParams(
            population=config.search.population,
            tournament=config.search.tournament,
            crossover_prob=config.search.crossover_prob,
            mutation_prob=config.search.mutation_prob,
            mutation_eta=config.search.mutation_eta,
        ),
        candidates=config.ensemble.candidates,
        seed=config.search.seed,
        checkpoint_seconds=config.search.checkpoint_seconds,
        mode=config.search.mode,
        objective=config.search.second_objective,
        early_stopping=config.search.early_stopping,
        warmup=config.search.early_stopping_warmup,
        eval_timeout=config.search.eval_timeout_seconds,
        drain_seconds=config.search.drain_seconds,
        hang_seconds=config.search.hang_seconds,
        prefetch=config.search.prefetch,
    )
    say(f"searching with {len(transport.workers)} worker(s), budget {settings.budget} evaluations; run directory {run_dir}")
    write_json(os.path.join(run_dir, DEVICES_NAME), {"session": info.sessions, "workers": prepared.devices or []})
    stop = StopFlag()
    progress = Progress(settings.budget, len(state.records), problem.metric, quiet=quiet, every=prepared.status_seconds,
                        workers=len(transport.workers))
    try:
        save(state)
        journal = checkpoint.InFlightLog(path)
        finished = run_search(state, transport, space, settings, checkpoint=save, on_result=progress, should_stop=stop,
                              journal=journal, say=say)
        progress.close()
        save(state)
    except RunDirError as exc:
        progress.close()
        say(f"error: {located(str(exc))}")
        if comm.size > 1:
            abort(comm, 2)  # the workers may be mid-training: nothing more can be recorded
        return 2
    except HungWorker as exc:
        progress.close()
        host = next((b["host"] for b in prepared.devices or [] if b["rank"] == exc.worker), "an unknown host")
        say(f"error: worker rank {exc.worker} on {host} has not answered for {exc.seconds:.0f} s, past its training's time limit "
            f"of {settings.eval_timeout:g} s plus search.hang_seconds = {settings.hang_seconds:g} (evaluation {exc.ident}); "
            f"ending the job")
        try:
            save(state)
        except RunDirError as failed:
            say(f"error: {located(str(failed))}")
        else:
            say(f"checkpoint saved with {len(state.records)} evaluations; evaluation {exc.ident} is redone once on resume; "
                f"continue with: evens run --resume {run_dir} (exit status {EXIT_HUNG})")
        if comm.size > 1:
            abort(comm, EXIT_HUNG)  # a stopped process cannot take part in a clean end
        return EXIT_HUNG
    finally:
        if journal is not None:
            journal.close()
    if not finished:
        out = len(state.pending)
        say(f"stopped by signal {stop.signum}; checkpoint saved with {len(state.records)} evaluations"
            f"{f', {out} to redo' if out else ''}; continue with: evens run --resume {run_dir} "
            f"(exit status {EXIT_RESUMABLE}: resumable)")
        code = EXIT_RESUMABLE
        if comm.size > 1:
            if state.workers_busy:
                abort(comm, code)  # workers are mid-training; the checkpoint has what they held
            transport.stop()  # every worker is idle: a normal end, which frees MPI's shared memory
        return code
    summary = summarize(state, info, run_dir)
    write_json(os.path.join(run_dir, SUMMARY_NAME), summary)
    print(format_summary(summary), flush=True)
    transport.stop()
    return 0


def _fail(is_master: bool, message: str) -> int:
    if is_master:
        say(f"error: {message}")
    return 2

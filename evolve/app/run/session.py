"""The master's session of ``evens run``: start or continue the search, checkpoint it, and end it.

:func:`run_master` runs on rank 0 once the data is everywhere and every rank is set up. It decides
the exit status: 0 (done), :data:`EXIT_RESUMABLE` (stopped by a signal, checkpointed),
:data:`EXIT_HUNG` (a worker stopped answering) or 2 (the run directory cannot be written).
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import replace

from data_bcast.broadcast import SharedDataset, located
from data_bcast.h5file import first_line
from ensemble.problem import Problem
from evolve import __version__
from evolve.app.infra.log import LOG
from evolve.app.infra.process import StopFlag
from evolve.app.infra.rundir import DEVICES_NAME, SUMMARY_NAME, write_json
from evolve.app.presentation.progress import Progress
from evolve.app.presentation.report import summarize
from evolve.app.presentation.report_text import describe_space, format_summary
from evolve.app.run.prepare import AUTO_FOLDS_UNDER, Prepared, choice_labels, data_facts
from evolve.app.run.reselect import SelectionCache
from evolve.app.run.tracking import open_tracker
from evolve.config.schema import Config, SearchConfig
from evolve.engine import memory
from evolve.engine.evaluations import FoldPlan
from evolve.engine.loop import HungWorker, run_search
from evolve.engine.state import SearchState
from evolve.errors import RunDirError
from evolve.runfile import checkpoint, proposed
from evolve.runfile.checkpoint import CHECKPOINT_NAME, RunInfo
from evolve.runfile.genomes import GenomeFile, genomes_path, open_for
from evolve.runfile.proposed import ProposedLog
from evolve.search.records import networks
from evolve.search.space import SearchSpace
from evolve.transport.mpi_transport import END_SECONDS, MPIMasterTransport, abort
from evolve.transport.protocol import InProcessTransport
from evolve.transport.worker import trainer_for

# The exit status of a job stopped by a signal (Slurm's time limit, preemption, or its early warning
# with --signal) after its checkpoint was written: "resume me". EX_TEMPFAIL of sysexits.h; a batch
# script tests for it to requeue (scripts/slurm/).
EXIT_RESUMABLE = 75
# The exit status of a job that gave up on a worker that stopped answering (see search.hang_seconds),
# after its checkpoint was written; a resume redoes that worker's network once (docs/reliability.md).
EXIT_HUNG = 69
MASTER = 0  # the rank of the master


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


class Checkpointer:
    """Writes the run's checkpoints: the search state with the ensemble chosen from it now, then lets go of the
    records it committed, empties the in-flight log (the checkpoint holds what it noted) and refreshes the job lock."""

    def __init__(self, prepared: Prepared, info: RunInfo, started: float):
        self.path = os.path.join(prepared.run_dir, CHECKPOINT_NAME)
        self.prepared, self.info, self.started = prepared, info, started
        self.wall_before = info.wall_seconds
        self.choose = SelectionCache(info)
        self.journal: checkpoint.InFlightLog | None = None
        self.genomes: GenomeFile | None = None
        self.proposed: ProposedLog | None = None

    def __call__(self, state: SearchState, let_go: bool = True) -> None:
        """Checkpoint ``state``; with ``let_go``, the records it committed leave memory (the search, built from them, no
        longer needs them; the first checkpoint of a session comes before it is built)."""
        self.info.wall_seconds = self.wall_before + (time.time() - self.started)
        state.selection = self.choose(state.hall_of_fame)  # the ensemble in every checkpoint is ready to use
        try:
            for side in (self.genomes, self.proposed):  # what this checkpoint counts on in the side files, on disk first
                if side is not None:
                    side.sync()
            checkpoint.save(self.path, state, self.info)
            if let_go:
                state.let_go()  # the run file holds the history now: the master keeps none of it (issue 34)
            if self.journal is not None:
                self.journal.reset()
        except OSError as exc:  # a full disk, a quota, a file system gone read-only
            raise RunDirError(f"{self.path}: cannot write the checkpoint ({exc.strerror or first_line(exc)}); the run keeps its "
                              f"previous checkpoint; continue with: evens run --resume {self.prepared.run_dir}") from None
        self.prepared.lock.heartbeat()

    def open_journal(self) -> checkpoint.InFlightLog:
        self.journal = checkpoint.InFlightLog(self.path)
        return self.journal

    def open_genomes(self, state: SearchState, space: SearchSpace, search: SearchConfig) -> GenomeFile | None:
        """With ``search.promotion``, the file of the paused networks' genomes (evolve.runfile.genomes): the one the
        checkpoint's memory names, on a resume that carries on from that memory, else a new one."""
        if not search.promotion:
            return None
        self.genomes = open_for(genomes_path(self.path), memory.part(memory.carried(state) or {}, "halving"), len(space))
        return self.genomes

    def open_proposed(self, state: SearchState) -> ProposedLog:
        """The file the checkpoints append the networks proposed to (evolve.runfile.proposed): the one the checkpoint's
        memory names, on a resume that carries on from that memory, else a new one."""
        self.proposed = proposed.open_for(proposed.proposed_path(self.path), memory.part(memory.carried(state) or {}, "strategy"))
        return self.proposed

    def close(self) -> None:
        for opened in (self.journal, self.genomes, self.proposed):
            if opened is not None:
                opened.close()


class _DrainBySignal:
    """``config.search`` as the search loop reads it when a drain begins: after SIGTERM its
    ``drain_seconds`` is ``term_drain_seconds``, so that the checkpoint is written before Slurm's
    SIGKILL (KillWait after SIGTERM); after SIGUSR1 (the early warning) or SIGINT, ``drain_seconds``."""

    def __init__(self, search: SearchConfig, stop: StopFlag):
        self._search, self._stop = search, stop

    def __getattr__(self, name: str):
        return getattr(self._search, name)

    @property
    def drain_seconds(self) -> float:
        return self._search.term_drain_seconds if self._stop.signum == signal.SIGTERM else self._search.drain_seconds


def run_master(comm, config: Config, data: SharedDataset, problem: Problem, prepared: Prepared, space: SearchSpace, trainer_data,
               started: float, quiet: bool, stop: StopFlag) -> int:
    """Search until the budget is spent or a signal stops it (``stop`` counts the signals since the job
    started: one that came during start-up stops the search before it sends anything); returns the exit status."""
    _say_data(comm, data)
    _say_choice(config, data, problem)
    state, info = _session_state(config, data, problem, prepared)
    transport = InProcessTransport(trainer_for(trainer_data, config.data.split_seed), 1) if comm.size == 1 else MPIMasterTransport(comm, MASTER)
    budget = config.search.evaluations
    say(f"searching with {len(transport.workers)} worker(s), budget {budget} evaluations; run directory {prepared.run_dir}")
    write_json(os.path.join(prepared.run_dir, DEVICES_NAME), {"session": info.sessions, "workers": prepared.devices or []})
    save = Checkpointer(prepared, info, started)
    # (a resume without its history counts its networks from the account: with promotion, a network is several records)
    done = state.tally.networks if state.dropped and state.tally is not None else networks(state.records) + state.dropped
    progress = Progress(budget, done, problem.metric_key, higher_is_better=problem.higher_is_better, quiet=quiet,
                        every=prepared.status_seconds, workers=len(transport.workers), choose=save.choose,
                        rows="oof" if config.data.fold_count else "val")
    track = open_tracker(config, prepared.run_dir, space, problem, state, say, info.test_y)  # [track]: TensorBoard, or nothing
    try:
        save(state, let_go=False)
        searched = replace(config, search=_DrainBySignal(config.search, stop))
        finished = run_search(state, transport, space, searched, checkpoint=track.checkpoints(save), on_result=track.results(progress),
                              should_stop=stop, journal=save.open_journal(), say=say, validation=(problem, info.val_y),
                              folds=fold_plan(config, data, problem), genomes=save.open_genomes(state, space, config.search),
                              proposed=save.open_proposed(state))
        progress.close()
        save(state)
        track.ensemble(state, always=True)  # the session's last
    except RunDirError as exc:
        progress.close()
        say(f"error: {located(str(exc))}")
        _end_workers(comm, transport, config, 2, busy=True)  # they may be mid-training: nothing more can be recorded
        return 2
    except HungWorker as exc:
        progress.close()
        track.close()  # before the job is aborted
        return _hung(comm, exc, state, save, config, prepared)
    finally:
        save.close()
        track.close()  # what it holds written, at a stop too
    if not finished:
        return _stopped(comm, state, stop, transport, prepared, config)
    summary = summarize(state, info, prepared.run_dir, state.tally)  # (a Pareto front's members are read from the history)
    write_json(os.path.join(prepared.run_dir, SUMMARY_NAME), summary.to_dict())
    print(format_summary(summary), flush=True)
    transport.stop()
    return 0


def fold_plan(config: Config, data: SharedDataset, problem: Problem) -> FoldPlan | None:
    """How the run cross-validates (``data.folds``), or None."""
    if not config.data.fold_count:
        return None
    return FoldPlan.of(config.data.fold_count, data.arrays["train/y"], data.arrays["test/y"], problem, config.data.split_seed,
                       config.ensemble.refit)


def _say_choice(config: Config, data: SharedDataset, problem: Problem) -> None:
    """What networks and the ensemble are chosen on, and how far to trust it: all training rows out of fold,
    or a val split (a small one said so, with the standard error of an accuracy measured on it)."""
    rows = {s: data.plan.spec(f"{s}/y").shape[0] for s in ("train", "val")}
    if config.data.fold_count:
        say(f"cross-validation: {config.data.fold_count} folds of the {rows['train']} training rows; networks are scored, and the "
            f"ensemble chosen, on their out-of-fold predictions over all {rows['train']} (data.folds)")
        return
    n, source = rows["val"], "the file's own val split" if data.plan.sources["val"] == "file" else "held out of train"
    if problem.kind == "classification" and n < AUTO_FOLDS_UNDER:
        say(f"validation: {n} rows ({source}); an accuracy measured on them has a standard error of up to "
            f"{0.5 / n ** 0.5:.3f}, so networks closer than that are told apart by chance"
            + ("; data.folds = 5 would choose on every training row instead" if data.plan.sources["val"] != "file" else ""))


def _say_data(comm, data: SharedDataset) -> None:
    stats = data.stats
    say(
        f"data {data.plan.path}: {stats['bytes'] / 1e6:.1f} MB read in {stats.get('read_seconds', 0):.2f} s, "
        f"broadcast to {comm.size} ranks in {stats.get('broadcast_seconds', 0):.2f} s"
        + (f"; shard mode: each of {data.shard.count} nodes holds about {data.shard.total_rows // data.shard.count} "
           f"of the {data.shard.total_rows} training rows" if data.shard else "")
    )


def _session_state(config: Config, data: SharedDataset, problem: Problem, prepared: Prepared) -> tuple[SearchState, RunInfo]:
    """A new run's empty state and facts, or a resumed run's, with this session counted."""
    state, info = prepared.state, prepared.info
    if state is None:
        state = SearchState.fresh(config.search.seed, config.ensemble.candidates)
        info = RunInfo(config=config, gene_names=list(config.space.names), data=data_facts(data, problem),
                       val_y=choice_labels(data, config).copy(), test_y=data.arrays["test/y"].copy(), version=__version__,
                       preset=prepared.preset)
        say(f"search space: {describe_space(info.preset)}")
    else:
        info.config = config
        say(f"resuming {prepared.run_dir}: {state.recorded} evaluations done, {len(state.pending)} to redo")
    info.sessions += 1
    return state, info


def _hung(comm, exc: HungWorker, state: SearchState, save: Checkpointer, config: Config, prepared: Prepared) -> int:
    host = next((b["host"] for b in prepared.devices or [] if b["rank"] == exc.worker), "an unknown host")
    search = config.search
    say(f"error: worker rank {exc.worker} on {host} has not answered for {exc.seconds:.0f} s, past its training's time limit "
        f"of {search.eval_timeout_seconds:g} s plus search.hang_seconds = {search.hang_seconds:g} (evaluation {exc.ident}); "
        f"ending the job")
    try:
        save(state)
    except RunDirError as failed:
        say(f"error: {located(str(failed))}")
    else:
        say(f"checkpoint saved with {state.recorded} evaluations; evaluation {exc.ident} is redone once on resume; "
            f"continue with: evens run --resume {prepared.run_dir} (exit status {EXIT_HUNG})")
    if comm.size > 1:
        abort(comm, EXIT_HUNG)  # a stopped process cannot take part in a clean end
    return EXIT_HUNG


def _stopped(comm, state: SearchState, stop: StopFlag, transport, prepared: Prepared, config: Config) -> int:
    out = len(state.pending)
    say(f"stopped by signal {stop.signum}; checkpoint saved with {state.recorded} evaluations"
        f"{f', {out} to redo' if out else ''}; continue with: evens run --resume {prepared.run_dir} "
        f"(exit status {EXIT_RESUMABLE}: resumable)")
    _end_workers(comm, transport, config, EXIT_RESUMABLE, busy=state.workers_busy > 0)  # the checkpoint has what they held
    return EXIT_RESUMABLE


def _end_workers(comm, transport, config: Config, code: int, busy: bool) -> None:
    """End the workers with the job, whose exit status is ``code``, cleanly where they can take part: every rank then
    finalizes MPI (which frees its shared memory) and the launcher returns once all have, with nothing of the job left.
    Idle workers are stopped. Workers that may be ``busy`` training are told to end now where they train in processes
    of their own (each kills its training, lets its fork server end and says so: MPIMasterTransport.end); else, or if
    one has not answered within END_SECONDS (hung), the job ends with MPI_Abort: its ranks, and the processes that die
    with them, end after the launcher has returned."""
    if comm.size == 1:
        return
    if not busy:
        transport.stop()
        return
    if config.train.isolation == "process":
        silent = transport.end(END_SECONDS)
        if not silent:
            return
        say(f"warning: worker rank{'s' if len(silent) > 1 else ''} {', '.join(map(str, silent))} did not end within "
            f"{END_SECONDS:g} s; ending the job with MPI_Abort")
    abort(comm, code)  # (with train.isolation = "none" a training runs in its rank, which cannot end it midway)

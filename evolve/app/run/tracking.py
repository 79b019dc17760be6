"""``[track] tensorboard``: every evaluation and the ensemble, for TensorBoard, in RUN_DIR/tensorboard/.

The master writes two kinds of TensorBoard run (a run is a folder); ``tensorboard --logdir RUN_DIR/tensorboard``::

    search/        the search over time, at step = evaluations recorded (a resume goes on from its count):
                   each result's evaluation/<metric>, evaluation/fitness, evaluation/seconds, evaluation/epochs and
                   evaluation/id; best/val_<metric> (the best so far) and status/<status> (how many so far); and, at each
                   checkpoint whose ensemble changed and at the end, ensemble/val_<metric>, ensemble/test_<metric>,
                   ensemble/members, ensemble/picks and its members as a table (text ensemble/table)
    trials/000017/ one per evaluation, for the HParams dashboard (its table and parallel coordinates): the active
                   genes, decoded as the CSV shows them, and the status as hyperparameters; the metrics at step
                   epochs_done; the validation curve by epoch (curve/val_<metric>)

The step is the count of evaluations recorded, not the id: results arrive out of id order. A session
killed between checkpoints (SIGKILL, a lost node) has written evaluations that the checkpoint its resume
starts from does not hold; that resume goes on at the step after the checkpoint's count, and first
removes what is not in the run: it cuts each of evens' own search files before its first point past that
count (or before a record the kill cut short), and removes the trials of the evaluations the checkpoint
did not record (those to redo, and ids from its next id on; a trial's folder only if nothing else is in
it; the writer thread does this before it writes, while the search goes on: about 1 s per 100,000
evaluations the search files hold). TensorBoard started after the resume then shows each evaluation
once, with either of its loaders (the data server, which ``tensorboard --logdir`` uses when it is
installed, or the Python one). For a TensorBoard left running across the kill, which holds the lost
points already, each session's file opens with a SessionLog START at its first step: the Python loader
(``--load_fast=false``) drops what it holds from that step on (a series only the lost evaluations had
stays listed, empty); the data server ignores it, and drops a series' points only when an earlier step
of that series comes, so it shows a lost point of a series the resumed session has not written again
until it is restarted. Both loaders read a run's files in the order of their names: a session's file is
named to come after the others', also on a host whose clock is behind.

The search loop only hands each result to a writer thread (1 us); the thread makes the events and
writes them (about 80 us of CPU per evaluation, besides the file system's own time). It writes the
event files itself rather than through torch.utils.tensorboard's SummaryWriter, which took 0.4 to
0.8 ms of the loop's thread per evaluation for the same events: it checksums every record with
tensorboard's pure-Python CRC-32C (google-crc32c's C here, when installed), and its ``add_hparams``
puts an experiment in every trial, so that TensorBoard shows only the genes of the first trial it
reads. A failure to write (a full disk) is said once and ends the tracking, never the search.
"""
from __future__ import annotations

import itertools
import math
import os
import queue
import socket
import threading
import time
from collections import Counter
from typing import Callable, NamedTuple

from ensemble.hall_of_fame import standing
from ensemble.problem import Problem
from evolve.app.run.tb_events import Events
from evolve.config.schema import Config
from evolve.engine.state import SearchState
from evolve.errors import ConfigError
from evolve.search.records import Record
from evolve.search.space import SearchSpace

FOLDER = "tensorboard"  # in the run directory
CLOSE_SECONDS = 10.0  # at the end of a session, how long the writer may take to write what it still holds
_SESSIONS = itertools.count()  # a session's own file name, also for two in one process in one second (as TensorFlow names them)
SUCCESS = ("ok", "stopped")  # the statuses HParams shows as a session that succeeded (stopped early is a result, not a failure)


def check_trackers(config: Config) -> None:
    """A :class:`ConfigError` in one line if the config turns on a tracker that cannot be imported (the master
    checks before any data moves, so every rank ends at once)."""
    if config.track.tensorboard:
        try:
            Events.imports()
        except ImportError as exc:
            raise ConfigError(f"track.tensorboard is on, but tensorboard cannot be imported ({exc}): pip install tensorboard, "
                              "or the extra: pip install 'evens[tensorboard]'") from None


def open_tracker(config: Config, run_dir: str, space: SearchSpace, problem: Problem, state: SearchState, say: Callable[[str], None],
                 test_y=None):
    """The session's tracker: a :class:`TensorBoardTracker` writing into ``run_dir``, or :class:`Untracked` when off.
    ``state`` holds what earlier sessions recorded (a resume counts on from it: from its records, or where it read
    no history, from its account and hall of fame; ``test_y``: the run's test labels, for its members' test scores)."""
    if not config.track.tensorboard:
        return Untracked()
    keep = 4 * max(state.hall_of_fame.capacity, config.ensemble.candidates)  # (a resume may ask for more candidates)
    return TensorBoardTracker(os.path.join(run_dir, FOLDER), space, problem, state, say, test_y, keep)


def _carried_over(state: SearchState, problem: Problem, test_y) -> tuple[float, Counter, dict[int, tuple]]:
    """What a session's tracker carries on from: the best fitness so far, the count of each status, and the metrics of
    the networks that may be ensemble members (:class:`_Members`), from the records or from the account and the
    hall of fame."""
    if state.records or state.tally is None:
        records = state.records
        best = max((r.fitness for r in records if r.status == "ok"), default=-math.inf)
        return best, Counter(r.status for r in records), {r.id: (r.fitness, r.loss, r.metrics) for r in records if r.status == "ok"}
    tally = state.tally
    best = tally.best.fitness if tally.best is not None else -math.inf
    members = {}
    for m in state.hall_of_fame.members:
        metrics = {f"val_{problem.metric_key}": m.fitness if problem.higher_is_better else -m.fitness}
        if test_y is not None and m.test_pred is not None:
            test = problem.scores(m.test_pred, test_y, user=False).get(problem.metric_key)  # (never a user's code here)
            if test is not None:
                metrics[f"test_{problem.metric_key}"] = test
        members[m.id] = (m.fitness, m.loss, metrics)
    return best, Counter(tally.statuses), members


class _Members:
    """The metrics of the best successful networks (by the hall of fame's standing), which an ensemble's table shows:
    at least the best ``keep``, whatever the history's length."""

    def __init__(self, keep: int, kept: dict[int, tuple]):
        self.keep = max(1, keep)
        self._kept = dict(kept)  # id -> (fitness, loss, metrics)
        self._trim()

    def add(self, ident: int, fitness: float, loss: float, metrics: dict) -> None:
        self._kept[ident] = (fitness, loss, metrics)
        if len(self._kept) > 2 * self.keep:
            self._trim()

    def _trim(self) -> None:
        best = sorted(self._kept.items(), key=lambda item: standing(item[1][0], item[1][1], item[0]))[: self.keep]
        self._kept = dict(best)

    def metrics(self, ident: int) -> dict:
        return self._kept[ident][2] if ident in self._kept else {}


class Untracked:
    """No tracker: the callbacks as they are."""

    def results(self, then):
        return then

    def checkpoints(self, then):
        return then

    def ensemble(self, state: SearchState, always: bool = False) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardTracker:
    """Sends each result and each new ensemble to TensorBoard, through a writer thread.

    Enter it through the search loop's callbacks: ``on_result=tracker.results(progress)``,
    ``checkpoint=tracker.checkpoints(save)``; ``ensemble(state, always=True)`` after the session's last
    checkpoint; ``close()`` at the end of the session, whatever its end (it waits :data:`CLOSE_SECONDS` at most).
    """

    def __init__(self, folder: str, space: SearchSpace, problem: Problem, state: SearchState, say: Callable[[str], None], test_y=None,
                 keep: int | None = None):
        self.folder = folder
        self._best, statuses, members = _carried_over(state, problem, test_y)
        self._selection = None
        self.sent = 0  # items queued; the writer counts those it wrote
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._writer = _Writer(folder, space, problem, statuses, _Members(keep or 4 * state.hall_of_fame.capacity, members), say,
                               _Kept(state.recorded, state.next_id, frozenset(p.id for p in state.pending)))
        self._thread = threading.Thread(target=self._writer.run, args=(self._queue,), name="evens-tensorboard", daemon=True)
        self._thread.start()

    def results(self, then: Callable[[Record, SearchState], None]) -> Callable[[Record, SearchState], None]:
        """``then`` (the progress display), and the result sent to TensorBoard."""
        def on_result(record: Record, state: SearchState) -> None:
            then(record, state)
            if record.status == "ok" and record.fitness > self._best:
                self._best = record.fitness
            if not self._writer.failed:
                self._queue.put((record, state.recorded, self._best))
                self.sent += 1
        return on_result

    def checkpoints(self, then: Callable[[SearchState], None]) -> Callable[[SearchState], None]:
        """``then`` (the checkpoint, which chooses the ensemble), and the ensemble sent if it changed."""
        def checkpoint(state: SearchState) -> None:
            then(state)
            self.ensemble(state)
        return checkpoint

    def ensemble(self, state: SearchState, always: bool = False) -> None:
        """The stored ensemble (``state.selection``), sent if it differs from the last one sent (or ``always``: a session's last)."""
        selection = state.selection
        if selection is not None and (always or selection != self._selection) and not self._writer.failed:
            self._selection = selection
            self._queue.put((selection, state.recorded))
            self.sent += 1

    def close(self) -> None:
        """Write what is queued, then close the files; the search's end and a stop's both come here."""
        if not self._thread.is_alive():
            return
        self._queue.put(None)
        self._thread.join(CLOSE_SECONDS)
        if self._thread.is_alive():
            self._writer.say(f"warning: tensorboard: {self.sent - self._writer.written} results and ensembles were still unwritten "
                             f"after {CLOSE_SECONDS:g} s; {self.folder} lacks them")


class _Kept(NamedTuple):
    """What the run holds as a session starts (its checkpoint's): the rest of what the runs show was written by a session
    killed before it saved it."""

    recorded: int  # evaluations recorded: the search's points at later steps are lost
    next_id: int  # evaluations from this id on were never recorded
    redone: frozenset  # the ids that were out (or came back after the checkpoint): redone, not recorded


class _Writer:
    """The writer thread's side: events made from results and ensembles, written to the runs' files."""

    def __init__(self, folder: str, space: SearchSpace, problem: Problem, statuses: Counter, members: _Members, say: Callable[[str], None],
                 kept: _Kept):
        self.folder, self.space, self.say, self.kept = folder, space, say, kept
        self.key, self.higher = problem.metric_key, problem.higher_is_better
        self.members = members  # an ensemble's members' own metrics, for its table
        self.statuses = statuses
        self.failed = False
        self.written = 0
        self.search = None

    def run(self, results: queue.SimpleQueue) -> None:
        try:
            self.events = Events()
            for run in ("search", "trials"):
                os.makedirs(os.path.join(self.folder, run), exist_ok=True)
            self.forget_lost()
            search = os.path.join(self.folder, "search")
            name = f"events.out.tfevents.{_stamp(search)}.{socket.gethostname()}.{os.getpid()}.{next(_SESSIONS)}.evens"
            self.search = open(os.path.join(search, name), "ab")
            self.search.write(self.events.file_version() + self.events.session_log_start(self.kept.recorded + 1))
            self.search.flush()
            while True:
                batch = [results.get()]
                while True:  # what came meanwhile, then one flush: TensorBoard sees it at once, at one write per batch
                    try:
                        batch.append(results.get_nowait())
                    except queue.Empty:
                        break
                for item in batch:
                    if item is None:
                        self.search.close()
                        return
                    if isinstance(item[0], Record):
                        self.result(*item)
                    else:
                        self.ensemble(*item)
                    self.written += 1
                self.search.flush()
        except Exception as exc:  # a full disk, a folder gone: the search goes on without TensorBoard
            self.failed = True
            self.say(f"warning: tensorboard: {type(exc).__name__}: {exc}; {self.folder} gets nothing more from this session")
            if self.search is not None:
                self.search.close()

    def forget_lost(self) -> None:
        """Remove what a session killed before its checkpoint wrote past it (see the module's doc): evens' own files only."""
        kept = self.kept
        search = os.path.join(self.folder, "search")
        for name in sorted(os.listdir(search)):
            if name.startswith("events.out.tfevents.") and name.endswith(".evens"):
                path = os.path.join(search, name)
                length = self.events.kept_length(path, kept.recorded)
                if length is not None:
                    os.truncate(path, length)
        trials = os.path.join(self.folder, "trials")
        for name in os.listdir(trials):
            if not (name.isascii() and name.isdigit() and name == f"{int(name):06d}"):
                continue
            ident = int(name)
            if ident >= kept.next_id or ident in kept.redone:
                folder = os.path.join(trials, name)
                try:
                    os.remove(os.path.join(folder, f"events.out.tfevents.{name}.evens"))
                except FileNotFoundError:
                    pass
                try:
                    os.rmdir(folder)
                except OSError:  # something else is in it: not evens' to remove
                    pass

    def shown(self, fitness: float) -> float:
        """A fitness in the metric's own units (fitness is minus the metric where lower is better)."""
        return fitness if self.higher else -fitness

    def result(self, record: Record, step: int, best: float) -> None:
        if record.status == "ok":
            self.members.add(record.id, record.fitness, record.loss, record.metrics)
        self.statuses[record.status] += 1
        values = {f"evaluation/{name}": v for name, v in record.metrics.items()}
        values.update({"evaluation/fitness": record.fitness, "evaluation/seconds": record.seconds, "evaluation/epochs": record.epochs_done,
                       "evaluation/id": record.id, f"best/val_{self.key}": self.shown(best),
                       f"status/{record.status}": self.statuses[record.status]})
        when = record.finished or time.time()
        self.search.write(self.events.scalars(step, when, values))
        self.trial(record, when)

    def trial(self, record: Record, when: float) -> None:
        """The evaluation's own run: its genes and status (HParams), metrics and curve. A redone evaluation's replaces it."""
        folder = os.path.join(self.folder, "trials", f"{record.id:06d}")
        try:
            os.mkdir(folder)
        except FileExistsError:  # redone after a job died
            pass
        hparams = {"status": record.status, **self.space.decode(record.genome)}
        metrics = {**record.metrics, "seconds": record.seconds, "epochs": record.epochs_done}
        e = self.events
        parts = [e.file_version(), e.session_start(record.started or when, hparams), e.scalars(record.epochs_done, when, metrics)]
        parts.append(e.curve(when, f"curve/val_{self.key}", [self.shown(f) for f in record.curve]))
        parts.append(e.session_end(when, record.status in SUCCESS))
        with open(os.path.join(folder, f"events.out.tfevents.{record.id:06d}.evens"), "wb", buffering=0) as f:
            f.write(b"".join(parts))

    def ensemble(self, selection, step: int) -> None:
        picks, key = selection.picks, self.key
        values = {f"ensemble/val_{key}": selection.curve_val[picks - 1], "ensemble/members": len(selection.ids), "ensemble/picks": picks}
        if len(selection.curve_test) >= picks:
            values[f"ensemble/test_{key}"] = selection.curve_test[picks - 1]
        now = time.time()
        self.search.write(self.events.scalars(step, now, values))
        rows = [f"| network | weight | val {key} | test {key} |", "| --- | --- | --- | --- |"]
        for ident, weight in zip(selection.ids, selection.weights):
            metrics = self.members.metrics(ident)
            rows.append(f"| #{ident} | {weight:.3f} | {_number(metrics.get(f'val_{key}'))} | {_number(metrics.get(f'test_{key}'))} |")
        caption = (f"{selection.method}, {picks} picks of {len(selection.ids)} networks: val {key} {_number(values[f'ensemble/val_{key}'])}"
                   + (f", test {_number(values[f'ensemble/test_{key}'])}" if f"ensemble/test_{key}" in values else ""))
        self.search.write(self.events.text(step, now, "ensemble/table", caption + "\n\n" + "\n".join(rows)))


def _stamp(folder: str) -> int:
    """A session file's time in its name: now, or past the latest of the folder's event files if that is not earlier
    (a host whose clock is behind, or two sessions in one second), so that the file comes last by name."""
    parts = [name.split(".")[3] for name in os.listdir(folder) if name.startswith("events.out.tfevents.") and name.count(".") >= 4]
    return max([int(time.time())] + [int(part) + 1 for part in parts if part.isascii() and part.isdigit()])


def _number(value) -> str:
    return "-" if value is None else f"{value:.4g}"

"""``evens predict``: apply a run's ensemble to an HDF5 file, on one process or spread over MPI ranks.

::

    evens predict runs/a new.h5 --out predictions.h5             # new.h5 has a dataset x at its root
    mpiexec -n 3 evens predict runs/a data.h5 --split test --out p.h5

Rank 0 alone opens files. It reads the run file, checks the input against the
ensemble, and sends each rank its share of the members (round robin: with 5
members on 2 ranks, 3 and 2) with their weights as one raw buffer. Then it
streams the input in batches: each batch goes to every rank with ``Bcast``, every
rank runs its members on its own device, and one ``Allreduce`` of the weighted
sums (probabilities and entropies, or means; then disagreement or spread)
completes the ensemble's answer; rank 0 writes it. Every error is found on rank 0
or agreed on by all ranks, so each rank exits with status 2 and one line.

The output is written to a hidden temporary file, renamed into place when complete. SIGTERM or
SIGHUP (Slurm's cancel or time limit, a closed terminal) is agreed on like an error at the next
batch: every rank ends with status 128 + the signal, and rank 0 removes the unfinished file. A
second one ends the process at once. SIGINT is Python's KeyboardInterrupt, which removes it too.
"""
from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import dataclass

import h5py
import numpy as np

from data_bcast.broadcast import first_error, located
from data_bcast.h5file import DataError, first_line, open_hdf5
from ensemble.combine import ensemble_prediction
from ensemble.hall_of_fame import Member
from ensemble.inputs import EVAL_BATCH, as_input, check_inputs
from ensemble.problem import problem_from_dict
from ensemble.references import UserCodeError, is_reference
from ensemble.store import EnsembleError, StoredEnsemble, chosen_members, read_chosen, run_file
from evolve.errors import EvensError, debug_traceback
from evolve.runfile.tempfiles import exclusive_temp
from evolve.transport.mpi_transport import node_rank, recv_arrays, send_arrays, sum_over_ranks, world

ROOT = 0
TAG_MEMBERS, TAG_WEIGHTS = 21, 22
MAX_BATCH_BYTES = 256 << 20  # a batch broadcast to every rank stays below this
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class PredictError(EvensError):
    """Bad input to ``evens predict``: one line, exit status 2 on every rank."""


@dataclass
class Job:
    """What rank 0 found and every rank needs: sizes, and the ensemble's facts."""

    rows: int
    batch: int
    problem: dict
    sample_shape: tuple[int, ...]
    x_dtype: str
    shares: list[list[int]]  # member ids per rank


def locate_input(path: str, split: str | None) -> tuple[str, str | None]:
    """The names of x (and of y, if there is one beside it) in the input file; an error otherwise."""
    with open_hdf5(path, "input file") as f:
        if split is not None:
            if split not in f or not isinstance(f[split], h5py.Group):
                groups = [k for k in f if isinstance(f[k], h5py.Group)]
                raise PredictError(f"{path}: no group '{split}' (groups: {', '.join(groups) or 'none'})")
            base = f"{split}/"
        else:
            base = ""
            if "x" not in f:
                groups = [k for k in f if isinstance(f[k], h5py.Group)]
                hint = f"; name a group with --split ({', '.join(groups)})" if groups else ""
                raise PredictError(f"{path}: no dataset 'x' at its root{hint}")
        if f"{base}x" not in f or not isinstance(f[f"{base}x"], h5py.Dataset):
            raise PredictError(f"{path}: no dataset '{base}x'")
        y = f"{base}y"
        has_y = y in f and isinstance(f[y], h5py.Dataset) and f[y].shape[:1] == f[f"{base}x"].shape[:1]
        return f"{base}x", (y if has_y else None)


def check_output(out: str, force: bool, protected: list[str]) -> None:
    """OUT may be written: a new file in an existing folder, or an existing one with --force; never an input."""
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        raise PredictError(f"{out}: the folder {folder} does not exist")
    if os.path.exists(out):
        if any(os.path.samefile(out, p) for p in protected if os.path.exists(p)):
            raise PredictError(f"{out}: is one of the inputs; choose another --out")
        if not force:
            raise PredictError(f"{out}: already exists; use --force to replace it")
        if not os.path.isfile(out):
            raise PredictError(f"{out}: exists and is not a file")


def plan_job(run_dir: str, input_path: str, out: str, split: str | None, batch_size: int, force: bool, ranks: int):
    """Rank 0: check everything before any rank does work. Returns (job, stored ensemble, x name, y name)."""
    if batch_size < 1:
        raise PredictError(f"--batch-size must be at least 1, got {batch_size}")
    stored = read_chosen(run_dir)
    chosen = chosen_members(stored, run_dir, need_weights=True)
    x_name, y_name = locate_input(input_path, split)
    with h5py.File(input_path, "r") as f:
        x = f[x_name]
        check_inputs(x.shape, x.dtype, stored.sample_shape, stored.x_dtype, where=f"{input_path}: {x_name}")
        rows = int(x.shape[0])
    row_bytes = int(np.prod(stored.sample_shape)) * np.dtype(stored.x_dtype).itemsize  # as broadcast
    if rows == 0:
        raise PredictError(f"{input_path}: {x_name} has no samples")
    check_output(out, force, [input_path, run_file(run_dir)])
    batch = max(1, min(batch_size, MAX_BATCH_BYTES // max(1, row_bytes)))
    ids = [m.id for m, _ in chosen]
    job = Job(rows, batch, stored.problem.to_dict(), stored.sample_shape, stored.x_dtype, [ids[r::ranks] for r in range(ranks)])
    return job, stored, chosen, x_name, y_name


def share_members(comm, job: Job, stored: StoredEnsemble | None, chosen) -> list[tuple[Member, float]]:
    """Collective: rank 0 sends each rank its members (specs as a header, weights as one buffer)."""
    if comm.rank == ROOT:
        weight = {m.id: w for m, w in chosen}
        share = [[(stored.hall_of_fame.by_id(i), weight[i]) for i in ids] for ids in job.shares]
        for rank in range(comm.size):
            if rank != ROOT:
                header = {"members": [(m.id, w, m.network, m.training) for m, w in share[rank]]}
                arrays = {f"{m.id}/{name}": a for m, _ in share[rank] for name, a in m.weights.items()}
                send_arrays(comm, header, arrays, rank, TAG_MEMBERS, TAG_WEIGHTS)
        return share[ROOT]
    header, arrays = recv_arrays(comm, ROOT, TAG_MEMBERS, TAG_WEIGHTS)
    members = []
    for ident, w, network, training in header["members"]:
        prefix = f"{ident}/"
        weights = {name[len(prefix):]: a for name, a in arrays.items() if name.startswith(prefix)}
        members.append((Member(id=ident, fitness=0.0, network=network, training=training, val_pred=None, test_pred=None, weights=weights), w))
    return members


class EndingSignals:
    """SIGTERM and SIGHUP while predicting, noted here and agreed on by the ranks (see the module's
    docstring); a rank that ended on its own at once could leave rank 0 inside a collective, where no
    handler runs, and its temporary file behind."""

    def __init__(self) -> None:
        self.signum = 0
        self._previous = {sig: signal.signal(sig, self._note) for sig in ENDING_SIGNALS}

    def _note(self, signum, frame) -> None:
        if self.signum:  # the second: at once
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        self.signum = signum

    def error(self) -> str | None:
        return _ended_by(self.signum) if self.signum else None

    @staticmethod
    def status(error: str) -> int:
        """The exit status of an agreed ``error``: 128 + the signal that ended the job, else 2."""
        return next((128 + sig for sig in ENDING_SIGNALS if error.startswith(_ended_by(sig))), 2)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set outside Python


def _ended_by(signum: int) -> str:
    return f"ended by {signal.Signals(signum).name}; the unfinished output was removed"


def run_predict(run_dir: str, input_path: str, out: str, split: str | None = None, batch_size: int = EVAL_BATCH,
                device: str = "auto", force: bool = False, model_path: str | None = None) -> tuple[int, str]:
    """Collective over the world. Returns (exit status, the line to print on rank 0)."""
    comm = world()
    ending = EndingSignals()
    try:
        return _plan_and_predict(comm, ending, run_dir, input_path, out, split, batch_size, device, force, model_path)
    finally:
        ending.restore()


def _plan_and_predict(comm, ending, run_dir, input_path, out, split, batch_size, device, force, model_path) -> tuple[int, str]:
    job = stored = chosen = x_name = y_name = writer = None
    error = None
    if model_path is not None:  # every rank imports the members' builders from it
        from ensemble.builders import BuilderError, add_model_path

        try:
            add_model_path(model_path)
        except BuilderError as exc:
            error = str(exc)
    if comm.rank == ROOT and error is None:
        try:
            job, stored, chosen, x_name, y_name = plan_job(run_dir, input_path, out, split, batch_size, force, comm.size)
            writer = Writer(out, job, keep_exact=y_name is not None)  # here, so that a folder we cannot write is an agreed error
        except (EvensError, EnsembleError, DataError) as exc:
            debug_traceback()
            error = str(exc)
    error = first_error(comm, error or ending.error(), ROOT)
    if error:
        if writer is not None:
            writer.discard()
        return ending.status(error), f"error: {error}"
    try:
        return _predict(comm, ending, job, stored, chosen, x_name, y_name, writer, run_dir, input_path, out, device)
    finally:
        if writer is not None:
            writer.discard()  # a no-op once the file is in place


def _predict(comm, ending, job, stored, chosen, x_name, y_name, writer, run_dir, input_path, out, device) -> tuple[int, str]:
    from ensemble.predict import build_ensemble  # torch: here, once the input and the run are known to be good
    from evolve.app.infra.local import take_device

    job = comm.bcast(job, root=ROOT)
    mine = share_members(comm, job, stored, chosen)
    made_with = comm.bcast(stored.made_with if comm.rank == ROOT else None, root=ROOT)  # named if a builder is not importable
    problem = problem_from_dict(job.problem)
    ensemble, error = None, None
    try:
        local, here = node_rank(comm)
        say = (lambda line: print(line, file=sys.stderr)) if comm.rank == ROOT else (lambda line: None)  # noqa: E731
        ensemble = build_ensemble(problem, job.sample_shape, job.x_dtype, mine, take_device(device, local, here), say=say,
                                  made_with=made_with)
    except (EnsembleError, ValueError, RuntimeError) as exc:
        debug_traceback()
        error = f"{run_file(run_dir)}: {first_line(exc)}"  # a member's spec or weights, as the run file holds them
    error = first_error(comm, error or ending.error(), ROOT)
    if error:
        return ending.status(error), f"error: {error}"
    source = h5py.File(input_path, "r") if comm.rank == ROOT else None
    try:
        error = stream(comm, job, ensemble, source, x_name, writer, where=f"{input_path}: {x_name}", ending=ending)
        if error:
            return ending.status(error), f"error: {error}"
        if writer is None:
            return 0, ""
        scores, why_not = writer.score(problem, source[y_name]) if y_name is not None else (None, "")
        writer.finish(run_dir, input_path, x_name, ensemble, chosen, scores)
    finally:
        if source is not None:
            source.close()
    sel = stored.selection
    line = (f"wrote {out}: {job.rows} predictions from an ensemble of {len(chosen)} networks "
            f"({sel.method}, {sel.picks} picks) on {comm.size} rank(s)")
    if scores:
        line += "; against " + y_name + ": " + ", ".join(f"{k} {v:.6g}" for k, v in scores.items())
    elif why_not:
        line += f"; {y_name} not scored: {why_not}"
    return 0, line


def stream(comm, job: Job, ensemble, source: h5py.File | None, x_name: str, writer: Writer | None, where: str,
           ending: EndingSignals) -> str | None:
    """Collective: the input, batch by batch, through every rank's members; returns the error, if any.

    Rank 0 reads a batch and checks it (NaN, infinities) and every rank learns the verdict before
    the batch itself is broadcast, so a bad row ends every rank at the same batch; so does a signal.
    """
    allreduce = sum_over_ranks(comm) if comm.size > 1 else None
    for start in range(0, job.rows, job.batch):
        rows = min(job.batch, job.rows - start)
        xb, error = None, None
        if comm.rank == ROOT:
            try:
                xb = as_input(source[x_name][start : start + rows], job.x_dtype, where=where)
            except (EnsembleError, OSError) as exc:
                debug_traceback()
                error = located(str(exc))
        error = comm.bcast(error, root=ROOT)
        if error:
            return error
        if comm.rank != ROOT:
            xb = np.empty((rows,) + tuple(job.sample_shape), dtype=job.x_dtype)
        comm.Bcast(xb, root=ROOT)
        try:  # this rank's members, locally: a failure here must not leave peers in the reduction
            preds, error = ensemble.member_predictions(xb), None
        except (EnsembleError, RuntimeError, MemoryError, ValueError) as exc:  # damaged weights, out of memory
            debug_traceback()
            preds, error = None, first_line(exc)
        error = first_error(comm, error or ending.error(), ROOT)
        if error:
            return error
        answer = ensemble.combine_batch(preds, rows, allreduce)
        if writer is not None:
            writer.write(start, answer)
    return None


class Writer:
    """Rank 0's output: a hidden temporary file in OUT's folder, renamed into place only when complete."""

    def __init__(self, out: str, job: Job, keep_exact: bool):
        self.out = out
        self.rows = job.rows
        # With labels or targets beside x, the prediction is also kept in double precision, to score it
        # exactly as reports do (N x outputs doubles; without labels nothing is kept in memory).
        self.keep_exact = keep_exact
        self._exact: np.ndarray | None = None
        folder = os.path.dirname(os.path.abspath(out))
        self.tmp = ""
        try:
            self.tmp = exclusive_temp(out)  # unpredictable, created exclusively, never through a planted symlink
            self.file = h5py.File(self.tmp, "w")
        except OSError as exc:
            if self.tmp and os.path.exists(self.tmp):
                os.remove(self.tmp)
            raise PredictError(f"{out}: cannot write in {folder} ({exc.strerror or first_line(exc)})") from None

    def write(self, start: int, answer: dict[str, np.ndarray]) -> None:
        for name, values in answer.items():
            if name not in self.file:
                dtype = np.int64 if values.dtype.kind in "iu" else np.float32
                self.file.create_dataset(name, shape=(self.rows,) + values.shape[1:], dtype=dtype)
            self.file[name][start : start + len(values)] = values
        if not self.keep_exact:
            return
        scored = answer["probabilities"] if "probabilities" in answer else answer["mean"]
        if self._exact is None:
            self._exact = np.empty((self.rows,) + scored.shape[1:])
        self._exact[start : start + len(scored)] = scored

    def score(self, problem, y: h5py.Dataset) -> tuple[dict[str, float] | None, str]:
        """The ensemble's scores against ``y``, or (None, why ``y`` cannot be scored)."""
        want = (self.rows,) + problem.target_shape
        if y.shape != want:
            return None, f"it has shape {y.shape}, not {want}"
        if problem.kind == "classification":
            if y.dtype.kind not in "iu":
                return None, f"it holds {y.dtype}, not class labels"
            labels = y[...]
            if labels.min() < 0 or labels.max() >= problem.num_classes:
                return None, f"its labels are not all in 0..{problem.num_classes - 1}"
        else:
            if y.dtype.kind != "f":
                return None, f"it holds {y.dtype}, not float targets"
            labels = y[...]
            if not np.isfinite(labels).all():
                return None, "it holds NaN or infinite targets"
        combined = {"probabilities": self._exact} if problem.kind == "classification" else {"mean": self._exact}
        prediction = ensemble_prediction(problem, combined)
        if is_reference(problem.metric):  # the run's own metric: the user's code, imported by name
            print(f"evens: importing {problem.metric.split(':')[0]} (the run's metric {problem.metric})", file=sys.stderr, flush=True)
            try:
                return problem.scores(prediction, labels), ""
            except UserCodeError as exc:
                return problem.scores(prediction, labels, user=False), f"its own metric not scored ({exc})"
        return problem.scores(prediction, labels), ""

    def finish(self, run_dir, input_path, x_name, ensemble, chosen, scores) -> None:
        self.file.attrs.update(
            format="evens-predictions",
            run=os.path.abspath(run_dir),
            input=os.path.abspath(input_path),
            x=x_name,
            members=json.dumps([m.id for m, _ in chosen]),
            weights=json.dumps([w for _, w in chosen]),
            problem=ensemble.problem.kind,
        )
        for name, value in (scores or {}).items():
            self.file.attrs[name] = value
        self.file.close()
        os.replace(self.tmp, self.out)
        self.tmp = None

    def discard(self) -> None:
        """Remove the temporary file, unless it is already in place."""
        if self.tmp is None:
            return
        self.file.close()
        if os.path.exists(self.tmp):
            os.remove(self.tmp)

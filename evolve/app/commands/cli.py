"""The ``evens`` command line.

::

    mpiexec -n 4 evens run examples/digits.toml --set search.evaluations=40
    evens run --resume runs/digits-20261122-101500 --set search.evaluations=80
    evens report runs/digits-20261122-101500 --json
    evens select runs/digits-20261122-101500 --method top_k --size 7
    mpiexec -n 2 evens predict runs/digits-20261122-101500 new.h5 --out predictions.h5
    evens export runs/digits-20261122-101500 --format onnx --out exported/
    evens make-digits data/digits.h5
    evens make-diabetes data/diabetes.h5
    evens make-signals data/signals.h5
    evens convert my_data.npz my_data.h5

Each command is a row of :data:`COMMANDS`: a function that adds its parser and options, and one that runs it.
The parser (:func:`build_parser`) and the dispatch (:func:`main`) both come from that table, in its order.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

from evolve import __version__, errors
from evolve.app.infra.process import StopFlag, collective, ending_signals, launcher_rank, pipe_closed
from evolve.errors import EvensError, debug_traceback


class Parser(argparse.ArgumentParser):
    """Usage errors are printed by rank 0 only; every rank exits with status 2."""

    def error(self, message: str):
        if launcher_rank() == 0:
            self.print_usage(sys.stderr)
            print(f"evens: error: {message}", file=sys.stderr)
        sys.exit(2)


class Command(NamedTuple):
    """One ``evens`` command: ``add(sub, name)`` adds its parser to the subparsers and returns it; ``handle(args)``
    runs it and returns the exit status."""

    name: str
    add: Callable[..., Parser]
    handle: Callable[[argparse.Namespace], int]
    collective: bool = False  # every rank runs it, through collective(), which reports its errors; else one process


def _add_run(sub, name: str) -> Parser:
    run = sub.add_parser(name, help="run or resume a search (launch with mpiexec or srun)")
    run.add_argument("config", nargs="?", help="TOML config file (optional with --resume)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a config key, e.g. search.evaluations=40")
    run.add_argument("--out", help="new run directory (default: runs/<config>-<time>)")
    run.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its checkpoint")
    run.add_argument("--quiet", action="store_true", help="warnings and errors only: no progress output")
    run.add_argument("--verbose", action="store_true", help="also every evaluation, each worker's device, and workers' own logs")
    run.add_argument("--status-seconds", type=float, default=60.0, metavar="S",
                     help="between status lines when the output is not a terminal (default 60)")
    return run


def _run(args) -> int:
    stop = StopFlag()  # before collective imports mpi4py, which starts MPI

    def on_every_rank() -> int:
        from evolve.app.run import driver

        return driver.run(args.config, args.overrides, out=args.out, resume=args.resume, quiet=args.quiet, verbose=args.verbose,
                          status_seconds=args.status_seconds, stop=stop)

    return collective(on_every_rank)


def _add_report(sub, name: str) -> Parser:
    rep = sub.add_parser(name, help="summarise a run directory: top networks, failures, the ensemble; CSV and figures")
    rep.add_argument("run_dir")
    rep.add_argument("--json", action="store_true", help="print one JSON object")
    rep.add_argument("--top", type=int, default=10, help="networks in the table of the best (default 10)")
    rep.add_argument("--csv", metavar="FILE", help="also write one row per evaluation to FILE ('-' for standard output)")
    rep.add_argument("--plot", metavar="DIR", help="also write PNG figures into DIR (needs matplotlib: evens[plot])")
    rep.add_argument("--force", action="store_true", help="replace an existing --csv FILE or figures")
    return rep


def _report(args) -> int:
    from evolve.app.presentation.report import report

    text = report(args.run_dir, as_json=args.json, top=args.top, csv_path=args.csv, plot_dir=args.plot, force=args.force)
    if text is not None:  # (None: the CSV went to standard output)
        print(text)
    return 0


def _add_status(sub, name: str) -> Parser:
    st = sub.add_parser(name, help="what a running or finished search is doing (safe while a job writes it)")
    st.add_argument("run_dir")
    st.add_argument("--json", action="store_true", help="print one JSON object")
    return st


def _status(args) -> int:
    from evolve.app.commands.status import status_command

    print(status_command(args.run_dir, as_json=args.json))
    return 0


def _add_select(sub, name: str) -> Parser:
    sel = sub.add_parser(name, help="choose a run's ensemble again from its hall of fame, without training")
    sel.add_argument("run_dir")
    sel.add_argument("--method", choices=("greedy", "top_k"), help="default: the run's ensemble.method")
    sel.add_argument("--size", type=int, help="picks (greedy) or members (top_k); default: the run's ensemble.size")
    sel.add_argument("--criterion", choices=("auto", "accuracy", "loss", "metric"),
                     help="what greedy selection maximises on the validation split (loss: log-loss, for calibrated probabilities); "
                          "default: the run's ensemble.criterion")
    sel.add_argument("--bags", type=int, help="greedy selection pooled over this many random halves (0: once, on all); "
                                              "default: the run's ensemble.bags")
    sel.add_argument("--json", action="store_true", help="print the new summary as one JSON object")
    sel.add_argument("--model-path", metavar="DIR", help="a run whose search.metric is your function: a folder to import its module from")
    return sel


def _select(args) -> int:
    from evolve.app.presentation.report_text import format_summary
    from evolve.app.run.reselect import reselect

    summary = reselect(args.run_dir, args.model_path, method=args.method, size=args.size, criterion=args.criterion, bags=args.bags)
    print(json.dumps(summary.to_dict(), indent=2, sort_keys=True) if args.json else format_summary(summary))
    return 0


def _add_predict(sub, name: str) -> Parser:
    pred = sub.add_parser(name, help="apply a run's ensemble to new data (one process, or members spread over mpiexec ranks)")
    pred.add_argument("run_dir")
    pred.add_argument("input", help="HDF5 file with a dataset x at its root, or a file in the data format with --split")
    pred.add_argument("--out", required=True, help="HDF5 file to write (refused if it exists, unless --force)")
    pred.add_argument("--split", help="read x (and y, if present) from this group of INPUT, e.g. test")
    pred.add_argument("--batch-size", type=int, default=4096, help="samples per batch (default 4096)")
    pred.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default: a GPU per rank if there are any")
    pred.add_argument("--force", action="store_true", help="replace OUT if it exists")
    pred.add_argument("--model-path", metavar="DIR", help="a run made with a model builder: a folder to import the builder's module from")
    return pred


def _predict(args) -> int:
    def on_every_rank() -> int:
        from evolve.app.commands.predict import run_predict

        code, line = run_predict(args.run_dir, args.input, args.out, args.split, args.batch_size, args.device, args.force,
                                 args.model_path)
        if line and launcher_rank() == 0:
            print(f"evens: {line}", file=sys.stderr if code else sys.stdout, flush=True)
        return code

    return collective(on_every_rank)


def _add_export(sub, name: str) -> Parser:
    exp = sub.add_parser(name, help="write a run's ensemble for plain PyTorch (.pt2) or ONNX Runtime, with a JSON manifest")
    exp.add_argument("run_dir")
    exp.add_argument("--format", dest="file_format", choices=("pt2", "onnx"), required=True,
                     help="pt2: torch.export archives (torch.export.load); onnx: ONNX models (needs evens[export])")
    exp.add_argument("--out", required=True, metavar="DIR", help="a new or empty folder to write (nothing is replaced)")
    exp.add_argument("--model-path", metavar="DIR", help="a run made with a model builder: a folder to import the builder's module from")
    return exp


def _export(args) -> int:
    try:  # a signal ends an export in one line, as predict's: 128 + the signal, its temporary folder removed
        from ensemble.export import MANIFEST, ExportEnded, export_ensemble

        try:
            manifest = export_ensemble(args.run_dir, args.out, args.file_format, args.model_path)
        except ExportEnded as exc:  # SIGTERM, SIGHUP
            print(f"evens: error: {exc}", file=sys.stderr)
            return exc.status
    except KeyboardInterrupt:
        print("evens: interrupted", file=sys.stderr)
        return 130
    missing = ", ".join(f"#{m['id']}" for m in manifest["missing"])
    left_out = f"; left out {missing}, the others' weights renormalised to sum to 1" if missing else ""
    print(f"wrote {args.out}: {len(manifest['members'])} member(s) as {args.file_format} and {MANIFEST}{left_out}")
    return 0


def _add_simulate(sub, name: str) -> Parser:
    sim = sub.add_parser(name, help="project how many workers a search keeps busy (a simulation: nothing is trained)")
    sim.add_argument("config", help="TOML config: its search mode, population and space are simulated")
    sim.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    sim.add_argument("--workers", type=int, required=True)
    sim.add_argument("--task-seconds", type=float, required=True, help="median training time (lognormal)")
    sim.add_argument("--sigma", type=float, default=0.5, help="lognormal shape of training times (default 0.5)")
    sim.add_argument("--evaluations", type=int, help="default: five per worker")
    sim.add_argument("--master-us", type=float, help="the master's CPU per result in microseconds (default: measured here)")
    # (a lambda: argparse names its type in the error, "invalid <lambda> value")
    sim.add_argument("--hours", type=lambda text: [float(h) for h in text.split(",")], default=[12.0, 72.0],
                     help="campaign lengths to project the master's memory, the run file and a resume for (default 12,72)")
    sim.add_argument("--json", action="store_true")
    return sim


def _simulate(args) -> int:
    from evolve.app.commands.simulate import simulate_command

    print(simulate_command(args))
    return 0


_CONVERT_KEYS = """keys of the .npz (any case: x_train or X_train; split first works too: train_x):
  train  x_train, y_train   or just x, y      also x_training
  val    x_val, y_val       optional          also x_valid, x_validation
  test   x_test, y_test     optional          also x_testing
  A split needs both x and y. A split left out is held out of train when evens runs
  (data.val_fraction, data.test_fraction, data.split_seed). Other keys are an error
  unless --ignore-extra. DST is never replaced without --force.
x: (N, ...) numbers, stored as float32 (uint8 kept as bytes); NaN and infinities are refused.
  A table is (N, F); a series (N, C, L), channels first: a univariate one (N, 1, L). Series
  of different lengths must be padded (or truncated) to one length first.
y: integers or strings are class labels: labels other than 0..C-1 are written as class
  indices 0..C-1 in sorted order, and the original labels as the dataset classes.
  Floats are regression targets, kept as they are."""


def _add_convert(sub, name: str) -> Parser:
    conv = sub.add_parser(name, help="convert an .npz file (x_train, y_train, ...) to the evens HDF5 format",
                          epilog=_CONVERT_KEYS, formatter_class=argparse.RawDescriptionHelpFormatter)
    conv.add_argument("src", help="an .npz file, as numpy.savez writes")
    conv.add_argument("dst", help="the HDF5 file to write")
    conv.add_argument("--force", action="store_true", help="replace DST if it exists")
    conv.add_argument("--ignore-extra", action="store_true", help="leave out keys that name no split instead of refusing them")
    return conv


def _convert(args) -> int:
    from data_bcast.convert import npz_to_h5

    return _writing(args.dst, lambda: npz_to_h5(args.src, args.dst, overwrite=args.force, ignore_extra=args.ignore_extra, say=print))


def _writing(dst: str, write: Callable[[], dict]) -> int:
    """Run ``write`` (a dataset writer, which returns the rows of each split, and removes its temporary file on any
    exception) and say what it wrote. A signal ends it in one line with 128 + the signal: nothing written, or, where
    the writer had renamed the file into place before the signal could stop it, the file written whole."""
    before, counts = _identity(dst), {}
    with ending_signals() as ending:
        try:
            counts = write()
        except BaseException:
            if not ending.signum:
                raise
        finally:
            ending.caught = True
    name = signal.Signals(ending.signum).name if ending.signum else ""
    if name and _identity(dst) == before:
        print(f"evens: error: {dst}: ended by {name}; nothing was written", file=sys.stderr)
    elif name:
        print(f"evens: {dst}: written whole before {name} could stop it", file=sys.stderr)
    else:
        print(f"wrote {dst}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 128 + ending.signum if name else 0


def _identity(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


def _add_make(sub, name: str, what: str) -> Parser:
    demo = sub.add_parser(name, help=f"{what} as an evens dataset")
    demo.add_argument("dst")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--force", action="store_true", help="replace DST if it exists")
    return demo


def _make(writer: str, args) -> int:
    """A demo dataset, written by WRITER: "module.function" in data_bcast, imported only when the command runs."""
    import importlib

    from data_bcast.h5file import DataError

    module, function = writer.split(".")
    write = getattr(importlib.import_module(f"data_bcast.{module}"), function)
    folder = os.path.dirname(os.path.abspath(args.dst))
    try:
        os.makedirs(folder, exist_ok=True)  # `evens make-digits data/digits.h5` on a fresh clone
    except OSError as exc:
        raise DataError(f"{args.dst}: cannot create the folder {folder} ({exc.strerror})") from None
    return _writing(args.dst, lambda: write(args.dst, seed=args.seed, overwrite=args.force))


def _demo(name: str, what: str, writer: str) -> Command:
    """``evens make-NAME DST``: WHAT, as an evens dataset, by WRITER (see :func:`_make`)."""
    return Command(f"make-{name}", partial(_add_make, what=what), partial(_make, writer))


# The commands, in the order `evens --help` lists them. A new command: its adder and handler, and a row here.
COMMANDS: tuple[Command, ...] = (
    Command("run", _add_run, _run, collective=True),
    Command("report", _add_report, _report),
    Command("status", _add_status, _status),
    Command("select", _add_select, _select),
    Command("predict", _add_predict, _predict, collective=True),
    Command("export", _add_export, _export),
    Command("simulate", _add_simulate, _simulate),
    Command("convert", _add_convert, _convert),
    _demo("digits", "write scikit-learn's bundled digits (classification, 10 classes)", "convert.write_digits"),
    _demo("diabetes", "write scikit-learn's bundled diabetes data (regression)", "convert.write_diabetes"),
    _demo("signals", "generate 1-D signals (2 x 128 samples, 5 classes of motifs at random places among distractors)",
          "synthetic.write_signals"),
    _demo("shapes", "generate small images (1 x 16 x 16, 6 classes of shapes at random places, angles and sizes)",
          "synthetic.write_shapes"),
)


def build_parser() -> Parser:
    parser = Parser(prog="evens", description="Evolutionary search for neural networks across MPI ranks, averaged into an ensemble.")
    parser.add_argument("--version", action="version", version=f"evens {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        command.add(sub, command.name).add_argument("--debug", action="store_true", help="show the traceback behind an error message")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The entry point of every command; a closed standard output ends any of them quietly (see :func:`pipe_closed`)."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # inside the try: the output held in the buffer meets the closed pipe here
        return code
    except BrokenPipeError as exc:
        return pipe_closed(exc)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    errors.DEBUG = args.debug
    command = next(c for c in COMMANDS if c.name == args.command)
    if command.collective:
        return command.handle(args)
    from data_bcast.h5file import DataError
    from ensemble.references import UserCodeError
    from ensemble.store import EnsembleError

    try:
        return command.handle(args)
    except (EvensError, DataError, EnsembleError, UserCodeError) as exc:
        debug_traceback()
        print(f"evens: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Export a run's ensemble for use without evens: one file per member and a JSON manifest.

::

    from ensemble.export import export_ensemble
    manifest = export_ensemble("runs/a", "exported/", "onnx")   # or "pt2"

Each member is written as evens applies it (:class:`Applied`): it takes ``x`` as stored in the
data file (the run's dtype, float32 or uint8), scales uint8 by 1/255 and runs the network, whose
own first layer standardises the inputs where its spec says so, and gives the member's
*prediction*: class probabilities (softmax) or values in the targets' units (de-standardised).
The ensemble is then the weighted mean of the members' outputs, as :func:`ensemble.combine.combine`
computes it; ``manifest.json`` holds the weights, the problem, the input's shape and dtype, and how
to combine (docs/export.md). ``pt2`` is ``torch.export``'s archive (``torch.export.load``), ``onnx``
an ONNX model for ONNX Runtime; both take a batch of any size.

Every member is captured with ``torch.export`` (non-strict), written, read back and compared with
the network on a few random inputs. A member that fails (a user's network whose forward pass
branches on tensor values, say, or one whose batch size is fixed) is left out with one line naming
it and why; the rest are written with their weights renormalised to sum to 1, and the manifest lists
what is missing with the weight it had. Nothing is exported when no member can be.

The folder is filled under a hidden temporary name beside it and renamed into place when complete,
so it is never seen half-written, and it never replaces anything: ``out`` must be new or empty, and not
a symbolic link. Each member is serialised in memory and written by Python, so a full disk is an
OSError (never a C++ abort): the folder's failure, not the member's, and nothing is published. SIGTERM,
SIGHUP and SIGINT remove the temporary folder too (:class:`ExportEnded`, KeyboardInterrupt). Where the export goes
and how the folder is made, published or removed is :mod:`ensemble.export_folder`.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import logging
import os
import signal
import sys
import warnings
from typing import Callable

import numpy as np
import torch
from torch import nn

from .export_folder import EndingSignals, ExportEnded, check_destination, discard, ended, partial_folder, publish, write_new
from .predict import Ensemble, build_ensemble, read_members
from .problem import Problem
from .references import first_line
from .store import EnsembleError, StoredEnsemble

FORMATS = ("pt2", "onnx")
FORMAT = "evens-export"
FORMAT_VERSION = 1  # any change to the manifest's meaning bumps it
MANIFEST = "manifest.json"
INPUT = "x"
TRACE_ROWS, CHECK_ROWS = 2, 3  # the batch a member is captured with, and another that checks its batch is free
TOLERANCE = 1e-4  # an exported member's largest difference from the network, relative to its outputs' size (at least 1)
ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")


class Applied(nn.Module):
    """A member as ``evens predict`` applies it: ``x`` in the run's dtype in, the member's prediction out
    (the same operations as :func:`ensemble.train.as_float` and :meth:`ensemble.train.Head.predictions`)."""

    def __init__(self, model: nn.Module, problem: Problem):
        super().__init__()
        self.model = model
        self.classification = problem.kind == "classification"
        if not self.classification:
            self.register_buffer("mean", torch.tensor(problem.mean, dtype=torch.float32))
            self.register_buffer("scale", torch.tensor(problem.scale, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.uint8:
            x = x.float() / 255.0
        out = self.model(x).float()
        return torch.softmax(out, dim=1) if self.classification else out * self.scale + self.mean


class Bagged(nn.Module):
    """A folded member (``data.folds``) as ``evens predict`` applies it: its fold networks' predictions added in
    fold order and divided once, in float32, as :func:`ensemble.folds.bagged` does."""

    def __init__(self, folds: list[nn.Module]):
        super().__init__()
        self.folds = nn.ModuleList(folds)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.folds[0](x)
        for fold in self.folds[1:]:
            out = out + fold(x)
        return out / len(self.folds)


def applied(models: list[nn.Module], problem: Problem) -> nn.Module:
    """A member's networks as one module: ``x`` in, the member's prediction out."""
    each = [Applied(model, problem) for model in models]
    return (each[0] if len(each) == 1 else Bagged(each)).eval()


def check_format(file_format: str) -> None:
    """EnsembleError unless ``file_format`` is known and what it needs is installed."""
    if file_format not in FORMATS:
        raise EnsembleError(f"unknown export format {file_format!r} (known: {', '.join(FORMATS)})")
    if file_format == "onnx":
        missing = [name for name in ONNX_PACKAGES if not _importable(name)]
        if missing:
            raise EnsembleError(f"exporting to ONNX needs {', '.join(missing)}: pip install 'evens[export]'")


def _importable(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def example_inputs(sample_shape: tuple[int, ...], x_dtype: str, rows: int, seed: int) -> torch.Tensor:
    """Random inputs of the run's shape and dtype: the capture's example, and the check's data."""
    generator = torch.Generator().manual_seed(seed)
    shape = (rows, *sample_shape)
    if x_dtype == "uint8":
        return torch.randint(0, 256, shape, generator=generator, dtype=torch.uint8)
    return torch.randn(shape, generator=generator)


@contextlib.contextmanager
def _quietly():
    """torch.export and the ONNX exporter print graphs, warnings and log lines; a failure's reason is its exception."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        disabled = logging.root.manager.disable
        logging.disable(logging.CRITICAL)
        try:
            yield
        finally:
            logging.disable(disabled)


@contextlib.contextmanager
def _cudnn_flags_as_torch_starts():
    """torch.export reads cuDNN's legacy TF32 flag, which raises once the new API has set a cuDNN flag to "ieee"
    (as :func:`ensemble.train.set_precision` does, so in any process that trained). An export runs on the CPU,
    where the flags do not matter: they are torch's defaults while it runs, and restored after."""
    flags = [getattr(torch.backends.cudnn, name, None) for name in ("conv", "rnn")]
    if any(not hasattr(flag, "fp32_precision") for flag in flags):  # torch < 2.9: no such flags
        yield
        return
    saved = [flag.fp32_precision for flag in flags]
    for flag in flags:
        flag.fp32_precision = "tf32"
    try:
        yield
    finally:
        for flag, value in zip(flags, saved):
            flag.fp32_precision = value


def export_member(applied: Applied, sample_shape: tuple[int, ...], x_dtype: str, file_format: str) -> tuple[bytes, dict]:
    """One member serialised in memory and checked: read back from those bytes, it must give the network's outputs
    on random inputs. Returns the file's bytes and what the manifest says of it beyond its name; raises with the
    reason it cannot be exported. Nothing touches the disk here, so the disk's failures are the caller's."""
    example = example_inputs(sample_shape, x_dtype, TRACE_ROWS, seed=0)
    check = example_inputs(sample_shape, x_dtype, CHECK_ROWS, seed=1)
    with _quietly(), _cudnn_flags_as_torch_starts(), torch.no_grad():
        program = torch.export.export(applied, (example,), dynamic_shapes=({0: torch.export.Dim("batch")},), strict=False)
        program.example_inputs = None  # random numbers: nothing the archive needs to carry
        if file_format == "pt2":
            buffer = io.BytesIO()
            torch.export.save(program, buffer)
            data = buffer.getvalue()
            got = torch.export.load(io.BytesIO(data)).module()(check).numpy()
            extra = {"torch": torch.__version__}
        else:
            data, got, extra = _onnx(program, check, output_name(applied.classification))
        want = applied(check).numpy()
    if got.shape != want.shape:
        raise EnsembleError(f"read back, it gives outputs of shape {got.shape}, not {want.shape}")
    apart = np.abs(got.astype(np.float64) - want)
    apart[np.isnan(got) & np.isnan(want)] = 0.0  # NaN where the network gives NaN too
    worst = float(np.max(apart, initial=0.0))
    if not worst <= TOLERANCE * max(1.0, float(np.nanmax(np.abs(want), initial=0.0))):
        raise EnsembleError(f"read back, it differs from the network by {worst:.3g} on random inputs")
    return data, extra


def reason(exc: BaseException) -> str:
    """Why a member cannot be exported, in one line (torch.export's two usual refusals said plainly)."""
    name = type(exc).__name__
    text = str(exc)
    if name == "GuardOnDataDependentSymNode":
        return f"its forward pass branches on tensor values, which torch.export cannot capture ({first_line(exc)[:160]})"
    if "marked batch as dynamic but your code specialized it" in text:
        return "its forward pass fixes the batch size (torch.export could not keep the batch dimension free)"
    return text if isinstance(exc, EnsembleError) else f"{name}: {first_line(exc)[:300]}"


def output_name(classification: bool) -> str:
    return "probabilities" if classification else "values"


def _onnx(program, check: torch.Tensor, output: str) -> tuple[bytes, np.ndarray, dict]:
    """``program`` as an ONNX model's bytes (one model, weights inside, its batch dimension named), and its
    outputs for ``check``."""
    import onnxruntime
    from onnxscript import ir

    onnx_program = torch.onnx.export(program, input_names=[INPUT], output_names=[output], dynamo=True, verbose=False)
    graph = onnx_program.model.graph
    for value in (*graph.inputs, *graph.outputs):
        if isinstance(value.shape[0], ir.SymbolicDim):
            value.shape = ir.Shape(["batch", *value.shape[1:]])
    data = onnx_program.model_proto.SerializeToString()  # over protobuf's 2 GB: a ValueError, this member's
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = session.run(None, {INPUT: check.numpy()})[0]
    return data, got, {"opset": int(onnx_program.model.opset_imports[""])}


def export_ensemble(run: str, out: str, file_format: str, model_path: str | None = None,
                    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> dict:
    """Export the ensemble of ``run`` (a run directory or run file) into the new or empty folder ``out``.

    Returns the manifest written. ``say`` takes the lines about importing a user's builder and about
    members left out. EnsembleError in one line when nothing can be exported, or ``out`` cannot be
    written (refused before any member is captured, or a full disk on the way: then nothing is published);
    :class:`ExportEnded` or KeyboardInterrupt on a signal, with nothing left behind.
    """
    check_format(file_format)
    check_destination(out)
    stored, chosen = read_members(run, model_path)
    signals, folder, made = None, "", []
    try:
        signals = EndingSignals()  # held: a signal while the folder is made would leave it behind unnamed
        folder, made = partial_folder(out)  # the place is tried as it will be used, before any user code runs
        signals.release()
        ensemble = build_ensemble(stored.problem, stored.sample_shape, stored.x_dtype, chosen, torch.device("cpu"), stored.selection, say,
                                  stored.made_with)
        networks = {m.id: m.network for m, _ in chosen}
        written, missing = _export_members(ensemble, stored, networks, folder, file_format, say)
        if not written:
            raise EnsembleError(f"{run}: no member of the ensemble could be exported to {file_format} (each is named above)")
        manifest = build_manifest(run, file_format, stored, written, missing)
        write_new(os.path.join(folder, MANIFEST), (json.dumps(manifest, indent=2) + "\n").encode())
        signals.hold()
        publish(folder, out)
    except BaseException as exc:
        waiting = 0
        if signals is not None:
            signals.hold()
            if folder:
                discard(folder, made)
            waiting = signals.restore()
        if waiting and not isinstance(exc, (ExportEnded, KeyboardInterrupt)):  # a signal during the cleanup says how it ends
            raise ended(waiting) from None
        if isinstance(exc, OSError):  # a full disk, say: the folder's failure, and nothing was published
            raise EnsembleError(f"{out}: cannot write the export ({exc.strerror or first_line(exc)}); nothing was written") from None
        raise
    waiting = signals.restore()
    if waiting:  # came while the folder was published: it acts now, as the caller's handler would have it act
        signal.raise_signal(waiting)
    return manifest


def _export_members(ensemble: Ensemble, stored: StoredEnsemble, networks: dict[int, dict], folder: str, file_format: str,
                    say: Callable[[str], None]) -> tuple[list[dict], list[dict]]:
    """Write each member into ``folder``: what the manifest says of those written, and of those left out."""
    written, missing = [], []
    for member in ensemble.members:
        name, network = f"member-{member.id}.{file_format}", networks[member.id]
        try:
            data, extra = export_member(applied(member.models, stored.problem), stored.sample_shape, stored.x_dtype, file_format)
        except SystemExit as exc:  # a user's forward pass that calls sys.exit: an error in one line, as a builder's is
            raise EnsembleError(f"member #{member.id} ({_network_name(network)}) called sys.exit({exc.code!r}) while it was "
                                f"exported to {file_format}; nothing was written") from None
        except Exception as exc:  # noqa: BLE001 -- torch.export's and the user's code: this member's failure, in one line
            why = reason(exc)
            say(f"evens: warning: member #{member.id} ({_network_name(network)}) cannot be exported to {file_format}, left out: {why}")
            missing.append({"id": member.id, "network": network, "run_weight": member.weight, "reason": why})
            continue
        write_new(os.path.join(folder, name), data)  # an OSError: the folder's, not the member's (a full disk)
        written.append({"id": member.id, "file": name, "sha256": hashlib.sha256(data).hexdigest(), **extra, "run_weight": member.weight,
                        "network": network, "folds": len(member.models)})
    return written, missing


def build_manifest(run: str, file_format: str, stored: StoredEnsemble, written: list[dict], missing: list[dict]) -> dict:
    """The manifest: what the files are, what they take and give, and how to combine them."""
    total = sum(m["run_weight"] for m in written)  # the run's own weights when nothing is missing (exactly), else renormalised
    members = [{"id": m["id"], "file": m["file"], "weight": m["run_weight"] / total if missing else m["run_weight"], **m} for m in written]
    problem = stored.problem
    if problem.kind == "classification":
        described = {"kind": "classification", "classes": problem.num_classes}
        output = {"name": output_name(True), "shape": [None, problem.num_classes],
                  "what": "each member's class probabilities: the softmax of its logits, float32"}
        combine = {"probabilities": "sum over members of weight * output", "label": "argmax of probabilities"}
    else:
        described = {"kind": "regression", "target_shape": list(problem.target_shape), "target_mean": list(problem.mean),
                     "target_scale": list(problem.scale)}
        output = {"name": output_name(False), "shape": [None, problem.outputs],
                  "what": "each member's prediction in the targets' units (already de-standardised: raw * target_scale + "
                          "target_mean inside the member), float32; reshape to (N, *target_shape)"}
        combine = {"mean": "sum over members of weight * output",
                   "std": "sqrt(sum over members of weight * (output - mean) ** 2)"}
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "file_format": file_format,
        "run": run,
        "problem": described,
        "input": {"name": INPUT, "shape": [None, *stored.sample_shape], "dtype": stored.x_dtype,
                  "preprocessing": "none: give x as stored in the data file (" + (
                      "uint8; each member scales it by 1/255" if stored.x_dtype == "uint8" else
                      "float32; cast other float types to float32, as evens predict does") + "). "
                      "A member that standardises its inputs does it itself, with the training split's statistics."},
        "output": output,
        "combine": {**combine, "weights": "each member's weight in the manifest; they sum to 1",
                    "folds": "a member whose folds is k > 1 was cross-validated (data.folds): its file holds its k fold networks "
                             "and gives the mean of their outputs, added in fold order and divided once; use it as one member"},
        "selection": {"method": stored.selection.method, "picks": stored.selection.picks},
        "complete": not missing,
        "members": members,
        "missing": missing,
    }


def _network_name(network: dict) -> str:
    return network.get("builder") or network.get("family", "network")

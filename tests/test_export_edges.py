"""`evens export` at its edges: a full disk, signals, odd `--out` names and a user's code that exits.

Whatever happens, an export is published whole or not at all: one line and a non-zero exit otherwise, and
no hidden ``.NAME.partial-*`` folder left behind. Signals and full disks are tried on a real process.
"""
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict

import h5py
import pytest
from conftest import ROOT, evens_cmd
from test_store_predict import arrays_for, stored_run

from ensemble.builders import add_model_path
from ensemble.hall_of_fame import HallOfFame, Member
from ensemble.problem import Classification
from ensemble.select import select_ensemble
from ensemble.specs import NetworkSpec, TrainSpec
from ensemble.store import EnsembleError, StoredEnsemble, write_ensemble
from ensemble.train import DeviceData, train_and_evaluate
from evolve.app.commands.cli import main
from evolve.runfile.tempfiles import exclusive_temp, remove_stale

pytestmark = pytest.mark.xdist_group("export")
SMALL, BIG = NetworkSpec("mlp", 1, 8), NetworkSpec("mlp", 2, 256)  # as pt2: about 15 kB and 300 kB
IMPORTING = "evens: importing edge_nets (the run's model builder edge_nets:build)"

EDGE_NETS = '''
import os
import sys
import time

from torch import nn


class Net(nn.Module):
    def __init__(self, features, outputs):
        super().__init__()
        self.linear = nn.Linear(features, outputs)

    def forward(self, x):
        gate = os.environ.get("EDGE_FORWARD", "")
        if gate == "exit":
            sys.exit(3)
        if gate:  # the export is capturing this member: say so in a file, then take a long time
            open(gate, "a").close()
            time.sleep(120)
        return self.linear(x)


def build(genes, sample_shape, outputs):
    if os.environ.get("EDGE_BUILD") == "exit":
        sys.exit(3)
    return Net(sample_shape[0], outputs)
'''


@pytest.fixture
def edge_run(tmp_path):
    """A run whose one member is built by the user's module edge_nets (importable from tmp_path / "nets"); its
    forward pass and builder do as EDGE_FORWARD and EDGE_BUILD say. sys.path and sys.modules restored after."""
    nets = tmp_path / "nets"
    nets.mkdir()
    (nets / "edge_nets.py").write_text(EDGE_NETS)
    saved = list(sys.path)
    add_model_path(str(nets))
    arrays = arrays_for((12,))
    problem = Classification(3)
    training, network = TrainSpec(1e-2, 32, 1), {"builder": "edge_nets:build", "genes": {}}
    ev = train_and_evaluate(network, training, DeviceData.from_arrays(arrays, problem), seed=0)
    hall = HallOfFame(2)
    hall.offer(Member(0, ev.fitness, network, asdict(training), ev.val_pred, ev.test_pred, ev.weights))
    selection = select_ensemble(list(hall), problem, arrays["val/y"], arrays["test/y"], "top_k", 1)
    path = str(tmp_path / "run.h5")
    with h5py.File(path, "w") as f:
        write_ensemble(f.create_group("ensemble"), StoredEnsemble(problem, (12,), "float32", arrays["val/y"], arrays["test/y"], hall, selection))
    yield path, str(nets)
    sys.path[:] = saved
    sys.modules.pop("edge_nets", None)


def export_process(args, env=None, limit_kib=None):
    """``evens export ARGS`` as its own process (``limit_kib``: RLIMIT_FSIZE, so that a write past it fails with EFBIG),
    started as from a terminal: SIGINT acts, even where the suite itself runs with it ignored (a shell's background job,
    nohup), which the export would rightly keep."""
    limit = ["bash", "-c", f'ulimit -f {limit_kib} && exec "$@"', "limit"] if limit_kib is not None else []
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT, **(env or {})}
    return subprocess.Popen(limit + evens_cmd() + ["export", *args], cwd=ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def finished(proc, timeout=180):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the export did not end: {err}")
    return proc.returncode, out, err


# 1. A full disk is the folder's failure: one line, exit 2, nothing published and nothing left.

@contextlib.contextmanager
def small_tmpfs(folder, options, why="mounting a small tmpfs needs root (the RLIMIT_FSIZE test covers the write path without it)"):
    """A tmpfs mounted with ``options`` (``size=64k``, ``ro,size=64k``) on the new folder ``folder`` (root only:
    skipped otherwise, saying ``why``)."""
    if os.geteuid() != 0:
        pytest.skip(why)
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs ({options}) here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_full_disk_fails_the_export_in_one_line_and_publishes_nothing(tmp_path):
    # before: torch's C++ writer aborted (SIGABRT, leaving .new.partial-*), or its iostream error left the member
    # out with a warning and published the rest with exit 0
    path, _, _ = stored_run(tmp_path, (12,), [SMALL, BIG])
    with small_tmpfs(tmp_path / "full", "size=64k") as full:
        code, out, err = finished(export_process([path, "--format", "pt2", "--out", str(full / "new")]))
        assert (code, out) == (2, "")
        assert err == f"evens: error: {full / 'new'}: cannot write the export (No space left on device); nothing was written\n"
        assert os.listdir(full) == []


def test_a_file_size_limit_fails_the_export_in_one_line_and_publishes_nothing(tmp_path):
    # the same write path without root: past RLIMIT_FSIZE a write fails with EFBIG (Python ignores SIGXFSZ)
    path, _, _ = stored_run(tmp_path, (12,), [SMALL, BIG])
    (tmp_path / "exports").mkdir()
    out = tmp_path / "exports" / "new"
    code, stdout, err = finished(export_process([path, "--format", "pt2", "--out", str(out)], limit_kib=64))
    assert (code, stdout) == (2, "")
    assert err == f"evens: error: {out}: cannot write the export (File too large); nothing was written\n"
    assert os.listdir(tmp_path / "exports") == []


# 2. Signals remove the temporary folder and end in one line; --out is checked up front, as it will be used.

@pytest.mark.parametrize("sig, code, line", [
    (signal.SIGTERM, 143, "evens: error: ended by SIGTERM; the unfinished export was removed"),
    (signal.SIGINT, 130, "evens: interrupted"),
])
def test_a_signal_during_an_export_removes_its_temporary_folder_in_one_line(tmp_path, edge_run, sig, code, line):
    path, nets = edge_run
    (tmp_path / "exports").mkdir()
    marker = tmp_path / "capturing"
    proc = export_process([path, "--format", "pt2", "--out", str(tmp_path / "exports" / "new"), "--model-path", nets],
                          env={"EDGE_FORWARD": str(marker)})
    deadline = time.monotonic() + 120
    while not marker.exists():  # the member's forward pass is running inside torch.export
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the export never began capturing"
        time.sleep(0.1)
    assert [n for n in os.listdir(tmp_path / "exports") if n.startswith(".new.partial-")]  # the work in progress
    proc.send_signal(sig)
    got, out, err = finished(proc, timeout=60)
    assert got == code
    assert err.splitlines() == [IMPORTING, line]
    assert out == "" and os.listdir(tmp_path / "exports") == []


def test_sighup_ends_an_export_as_sigterm_does():  # (the same handler; a terminal that closes sends it)
    from ensemble.export import ExportEnded

    ended = ExportEnded(signal.SIGHUP)
    assert (ended.status, str(ended)) == (129, "ended by SIGHUP; the unfinished export was removed")


@pytest.fixture
def captured(monkeypatch):
    """What export_ensemble began to do with the members (build them, which runs a user's builder, and capture
    them): nothing, when ``--out`` is refused up front."""
    import ensemble.export

    calls = []
    for name in ("build_ensemble", "export_member"):
        real = getattr(ensemble.export, name)
        monkeypatch.setattr(ensemble.export, name, lambda *args, real=real, name=name, **kw: calls.append(name) or real(*args, **kw))
    return calls


def refused(capsys, path, out):
    """``evens export PATH --out OUT``'s exit status and standard error, which must be one line."""
    code = main(["export", path, "--format", "pt2", "--out", out])
    said = capsys.readouterr()
    assert said.out == "" and len(said.err.splitlines()) == 1, said
    return code, said.err


def test_an_empty_out_or_the_current_folder_is_refused_up_front(tmp_path, monkeypatch, capsys, captured):
    path, _, _ = stored_run(tmp_path, (12,), [SMALL])
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    for out in ("", ".", "..", "./", "/"):
        code, err = refused(capsys, path, out)
        assert code == 2 and err == f"evens: error: {out!r}: not a folder's name; an export goes into a new or empty folder (--out NEW_FOLDER)\n"
    assert captured == [] and os.listdir(here) == [] and sorted(os.listdir(tmp_path)) == ["here", "run.h5"]


def test_an_out_that_is_a_symbolic_link_is_refused_up_front(tmp_path, capsys, captured):
    path, _, _ = stored_run(tmp_path, (12,), [SMALL])
    (tmp_path / "empty").mkdir()
    for name, to in (("to_empty", "empty"), ("dangling", "nowhere"), ("to_run", "run.h5")):
        os.symlink(to, tmp_path / name)
        for out in (str(tmp_path / name), str(tmp_path / name) + "/"):
            code, err = refused(capsys, path, out)
            assert code == 2 and err == f"evens: error: {out}: is a symbolic link; an export goes into a new or empty folder, not through a link\n"
    assert captured == [] and os.listdir(tmp_path / "empty") == []
    assert not [n for n in os.listdir(tmp_path) if ".partial-" in n]


@contextlib.contextmanager
def read_only_folder(folder):
    """``folder``, which no one can write in: a read-only tmpfs for root (to whom permissions do not apply), else mode 555."""
    if os.geteuid() == 0:
        with small_tmpfs(folder, "ro,size=64k") as mounted:
            yield mounted
        return
    folder.mkdir()
    folder.chmod(0o555)
    try:
        yield folder
    finally:
        folder.chmod(0o755)


def test_a_folder_that_cannot_be_written_is_refused_before_any_member_is_captured(tmp_path, capsys, captured):
    path, _, _ = stored_run(tmp_path, (12,), [SMALL])
    with read_only_folder(tmp_path / "locked") as locked:
        code, err = refused(capsys, path, str(locked / "new"))
        assert code == 2 and err.startswith(f"evens: error: {locked / 'new'}: cannot write there (")
        assert err.endswith(("(Read-only file system)\n", "(Permission denied)\n"))
        assert captured == [] and os.listdir(locked) == []


# 16. Temporary names fit wherever the final name fits; a user's code that exits is one line.

def longest_name(folder) -> int:
    return os.pathconf(folder, "PC_NAME_MAX")


def test_an_out_name_as_long_as_the_folder_allows_is_exported(tmp_path, capsys):
    path, _, _ = stored_run(tmp_path, (12,), [SMALL])
    (tmp_path / "exports").mkdir()
    for length in (245, longest_name(tmp_path)):  # before: 'File name too long', from the .NAME.partial-XXXXXXXX temporary
        out = tmp_path / "exports" / ("n" * length)
        assert main(["export", path, "--format", "pt2", "--out", str(out)]) == 0, capsys.readouterr().err
        assert capsys.readouterr().out.startswith(f"wrote {out}: 1 member(s)")
        assert sorted(os.listdir(out)) == ["manifest.json", "member-0.pt2"]
    assert sorted(len(n) for n in os.listdir(tmp_path / "exports")) == [245, longest_name(tmp_path)]
    too_long = str(tmp_path / "exports" / ("n" * (longest_name(tmp_path) + 1)))
    code, err = refused(capsys, path, too_long)  # refused up front, not after the members were captured
    assert code == 2 and err == f"evens: error: {too_long}: cannot put an export there (File name too long)\n"


def test_evens_temporary_files_fit_wherever_their_target_fits(tmp_path):
    # predict's output, report's CSV and the run's own files are written under exclusive_temp's names
    target = tmp_path / ("p" * longest_name(tmp_path))
    temporary = exclusive_temp(str(target))
    assert os.path.dirname(temporary) == str(tmp_path) and os.path.isfile(temporary)
    assert len(os.fsencode(os.path.basename(temporary))) <= longest_name(tmp_path)
    assert os.path.basename(temporary).startswith(".ppp")
    wide = tmp_path / ("é" * (longest_name(tmp_path) // 2))  # two bytes each: cut at a character, not inside one
    assert os.path.basename(exclusive_temp(str(wide))).startswith(".éé")
    assert len(remove_stale(str(tmp_path))) == 2 and os.listdir(tmp_path) == []


def test_a_builder_that_calls_sys_exit_during_an_export_is_one_line_and_exit_2(tmp_path, edge_run, monkeypatch, capsys):
    path, nets = edge_run
    monkeypatch.setenv("EDGE_BUILD", "exit")  # before: exit status 3, without a word
    assert main(["export", path, "--format", "pt2", "--out", str(tmp_path / "new"), "--model-path", nets]) == 2
    assert capsys.readouterr().err.splitlines() == [IMPORTING, "evens: error: member #0: model builder edge_nets:build raised SystemExit: 3"]
    assert not [n for n in os.listdir(tmp_path) if "new" in n]


def test_a_forward_pass_that_calls_sys_exit_while_captured_is_one_line_and_exit_2(tmp_path, edge_run, monkeypatch, capsys):
    path, nets = edge_run
    monkeypatch.setenv("EDGE_FORWARD", "exit")
    out = tmp_path / "made" / "for" / "new"  # the folders made for it go too
    assert main(["export", path, "--format", "pt2", "--out", str(out), "--model-path", nets]) == 2
    assert capsys.readouterr().err.splitlines() == [
        IMPORTING, "evens: error: member #0 (edge_nets:build) called sys.exit(3) while it was exported to pt2; nothing was written"]
    assert not (tmp_path / "made").exists()
    with pytest.raises(EnsembleError, match="called sys.exit"):  # the Python API: the same error, not SystemExit
        from ensemble.export import export_ensemble

        export_ensemble(path, str(tmp_path / "new"), "pt2", model_path=nets, say=lambda line: None)

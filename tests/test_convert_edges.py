"""`evens convert` and the make-* commands at their edges: planted symlinks, long names, and arrays that
declare more than the file, the memory or the disk can hold (issue 35, defects 9 and 10)."""
import errno
import io
import os
import signal
import subprocess
import time
import tracemalloc
import zipfile

import h5py
import numpy as np
import pytest
from conftest import ROOT, blobs, evens_cmd

import data_bcast.convert as convert_module
from data_bcast.convert import npz_to_h5
from data_bcast.h5file import DataError, write_dataset
from evolve.app.commands import cli

X, Y = blobs(30, (4,))
MiB = 1 << 20


def one_line_error(src, dst, **kwargs) -> str:
    with pytest.raises(DataError) as info:
        npz_to_h5(str(src), str(dst), say=lambda line: None, **kwargs)
    message = str(info.value)
    assert "\n" not in message, message
    return message


def npy_bytes(shape, descr="<f4", data=b"") -> bytes:
    """An .npy member whose header declares ``shape`` and ``descr``, followed by ``data`` only."""
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(f, {"descr": descr, "fortran_order": False, "shape": shape})
    return f.getvalue() + data


def npy_of(array) -> bytes:
    f = io.BytesIO()
    np.lib.format.write_array(f, array)
    return f.getvalue()


def leftovers(folder) -> list[str]:
    return sorted(n for n in os.listdir(folder) if ".tmp" in n)


# --- defect 9: the temporary file is exclusive and never follows a symlink ----------------------------------

@pytest.mark.parametrize("command", ["convert", "make-digits"])
def test_a_symlink_planted_at_the_temporary_name_is_never_followed(tmp_path, command, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"the user's own file")
    out = tmp_path / "out.h5"
    planted = tmp_path / f"out.h5.tmp-{os.getpid()}"  # the name the writer used to open with "w"
    planted.symlink_to(victim)
    src = tmp_path / "ok.npz"
    np.savez(src, x=X, y=Y)
    args = ["convert", str(src), str(out)] if command == "convert" else [command, str(out)]
    assert cli.main(args) == 0, capsys.readouterr().err
    assert victim.read_bytes() == b"the user's own file"
    assert not out.is_symlink() and h5py.is_hdf5(out)
    assert planted.is_symlink() and os.readlink(planted) == str(victim)


def test_a_symlink_at_the_random_name_is_skipped_not_followed(tmp_path, monkeypatch):
    import data_bcast.exclusive as exclusive

    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / f".out.h5.{'0' * 16}.tmp").symlink_to(victim)
    tokens = iter(["0" * 16, "1" * 16])
    monkeypatch.setattr(exclusive.secrets, "token_hex", lambda n: next(tokens))
    write_dataset(str(tmp_path / "out.h5"), {"train": (X, Y)})
    assert victim.read_text() == "mine"
    with h5py.File(tmp_path / "out.h5") as f:
        np.testing.assert_array_equal(f["train/y"][...], Y)
    assert leftovers(tmp_path) == [f".out.h5.{'0' * 16}.tmp"]  # the planted link, left as it was


def test_a_name_that_fits_name_max_is_written_with_a_temporary_name_that_fits_too(tmp_path):
    from data_bcast.exclusive import temp_name

    src = tmp_path / "ok.npz"
    np.savez(src, x=X, y=Y)
    name = "d" * 252 + ".h5"  # 255 bytes: the most a name may have
    assert npz_to_h5(str(src), str(tmp_path / name), say=lambda line: None) == {"train": 30}
    assert h5py.is_hdf5(tmp_path / name) and leftovers(tmp_path) == []
    for long_name in (name, "é" * 127 + ".h5"):
        assert len(os.fsencode(temp_name(long_name))) <= 255


@pytest.mark.parametrize("command", ["convert", "make-digits"])
def test_a_folder_that_cannot_be_written_is_one_line(tmp_path, monkeypatch, capsys, command):
    import data_bcast.exclusive as exclusive

    def full(target, mode=0o666):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(exclusive, "exclusive_temp", full)
    src, out = tmp_path / "ok.npz", tmp_path / "out.h5"
    np.savez(src, x=X, y=Y)
    assert cli.main(["convert", str(src), str(out)] if command == "convert" else [command, str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"evens: error: {out}: cannot write it (No space left on device)\n", err


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    with pytest.raises(DataError, match="unknown split"):
        write_dataset(str(tmp_path / "d.h5"), {"train": (X, Y), "extra": (X, Y)})
    assert os.listdir(tmp_path) == []


# --- defect 10: sizes checked against the headers, the memory and the disk before inflating --------------------

@pytest.mark.parametrize("bomb", ["x", "y"])
def test_a_header_that_declares_terabytes_is_one_line_before_any_allocation(tmp_path, bomb, capsys):
    src = tmp_path / "bomb.npz"
    x = npy_bytes((10**6, 10**6)) if bomb == "x" else npy_of(X)
    y = npy_bytes((10**12,), "<i8") if bomb == "y" else npy_of(Y)
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("x.npy", x)
        z.writestr("y.npy", y)
    message = one_line_error(src, tmp_path / "out.h5")
    assert f"cannot read {bomb}: its header declares" in message and "TiB" in message and "crafted" in message, message
    assert cli.main(["convert", str(src), str(tmp_path / "out.h5")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"evens: error: {src}: cannot read {bomb}") and len(err.splitlines()) == 1, err
    assert os.listdir(tmp_path) == ["bomb.npz"]


def test_an_archive_whose_sizes_are_impossible_is_refused(tmp_path):
    src = tmp_path / "liar.npz"
    data = npy_bytes((30000, 30000), data=b"\0" * 64)
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("x.npy", data)
        z.writestr("y.npy", npy_of(Y))
    raw = bytearray(src.read_bytes())
    central = raw.index(b"PK\x01\x02")  # x.npy's entry in the central directory: its uncompressed size at +24
    raw[central + 24 : central + 28] = (0xF000_0000).to_bytes(4, "little")
    src.write_bytes(bytes(raw))
    message = one_line_error(src, tmp_path / "out.h5")
    assert "cannot read x: the archive says" in message and "more than its compression can give" in message, message


def test_a_y_that_inflates_beyond_the_memory_available_is_refused_before_it_is_read(tmp_path, monkeypatch):
    n = 4 << 20
    src = tmp_path / "zeros.npz"
    np.savez_compressed(src, x=np.zeros((n, 1), np.uint8), y=np.arange(n) % 2)  # 36 MiB in well under 1 MiB
    assert src.stat().st_size < MiB
    monkeypatch.setattr(convert_module, "available_memory", lambda: 64 * MiB, raising=False)
    message = one_line_error(src, tmp_path / "out.h5")
    assert "of memory, more than the 64.0 MiB available; y ((4194304,) int64, 32.0 MiB inflated) is read whole" in message, message
    assert not (tmp_path / "out.h5").exists()


def test_a_fortran_ordered_x_beyond_the_memory_available_is_refused_with_the_fix(tmp_path, monkeypatch):
    src = tmp_path / "zeros.npz"
    np.savez_compressed(src, x=np.zeros((1 << 20, 4), np.float64, order="F"), y=np.arange(1 << 20) % 2)
    monkeypatch.setattr(convert_module, "available_memory", lambda: 32 * MiB, raising=False)
    message = one_line_error(src, tmp_path / "out.h5")
    assert "x (" in message and "Fortran order: save np.ascontiguousarray(x) and it is converted in blocks" in message, message


def test_a_large_x_is_converted_in_blocks_never_whole_in_memory(tmp_path, monkeypatch):
    x = np.zeros((3072, 1, 64, 64), np.float32)  # 48 MiB of zeros
    x[1234, 0, 5, 7] = 3.0
    src = tmp_path / "zeros.npz"
    np.savez_compressed(src, x=x, y=np.arange(3072) % 3)
    del x
    monkeypatch.setattr(convert_module, "available_memory", lambda: 16 * MiB, raising=False)
    monkeypatch.setattr(convert_module, "BLOCK_BYTES", MiB, raising=False)
    tracemalloc.start()
    try:
        counts = npz_to_h5(str(src), str(tmp_path / "out.h5"), say=lambda line: None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert counts == {"train": 3072} and peak < 8 * MiB, peak
    with h5py.File(tmp_path / "out.h5") as f:
        assert f["train/x"].shape == (3072, 1, 64, 64) and f["train/x"][1234, 0, 5, 7] == 3.0
        assert float(np.abs(f["train/x"][...]).sum()) == 3.0


def test_output_beyond_the_free_disk_is_refused_before_writing(tmp_path, monkeypatch):
    src = tmp_path / "d.npz"
    np.savez(src, x=np.zeros((1000, 300), np.float32), y=np.arange(1000) % 2)
    monkeypatch.setattr(convert_module, "_free_disk", lambda folder: 1 << 10, raising=False)
    message = one_line_error(src, tmp_path / "out.h5")
    assert f"{tmp_path / 'out.h5'}: the converted arrays take about 1.2 MiB, more than the 1.0 KiB free in {tmp_path}" in message, message
    assert not (tmp_path / "out.h5").exists()


def test_a_dataset_larger_than_this_machine_is_refused_before_writing(tmp_path, monkeypatch):
    src = tmp_path / "d.npz"
    np.savez_compressed(src, x=np.zeros((1000, 300), np.float32), y=np.arange(1000) % 2)
    monkeypatch.setattr(convert_module, "physical_memory", lambda: MiB, raising=False)
    message = one_line_error(src, tmp_path / "out.h5")
    assert "its arrays would take 1.2 MiB, more than this machine's 1.0 MiB of memory" in message, message
    assert "convert it on a node as large as those that will read it" in message and os.listdir(tmp_path) == ["d.npz"]


def test_running_out_of_memory_anywhere_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    src = tmp_path / "d.npz"
    np.savez(src, x=X, y=Y)

    def no_memory(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(convert_module, "_targets", no_memory)
    assert cli.main(["convert", str(src), str(tmp_path / "out.h5")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"evens: error: {src}: out of memory while converting it") and len(err.splitlines()) == 1, err
    assert leftovers(tmp_path) == [] and not (tmp_path / "out.h5").exists()


@pytest.mark.parametrize("dtype", [np.float64, ">f4", np.uint8, np.int16])
@pytest.mark.parametrize("order", ["C", "F"])
def test_blocks_of_a_few_rows_write_the_same_file(tmp_path, monkeypatch, dtype, order):
    x = np.asarray(np.random.default_rng(0).uniform(0, 100, size=(37, 3, 5)), dtype=dtype, order=order)
    src = tmp_path / "d.npz"
    np.savez(src, x=x, y=np.arange(37) % 3)
    monkeypatch.setattr(convert_module, "BLOCK_BYTES", 4 * x.dtype.itemsize * 15)  # 4 rows a block
    npz_to_h5(str(src), str(tmp_path / "out.h5"), say=lambda line: None)
    with h5py.File(tmp_path / "out.h5") as f:
        expected = x.astype(np.uint8 if x.dtype == np.uint8 else np.float32)
        np.testing.assert_array_equal(f["train/x"][...], expected)
        assert f["train/x"].dtype == expected.dtype


def test_bad_rows_are_counted_over_every_block(tmp_path, monkeypatch):
    x = np.random.default_rng(0).normal(size=(12, 6, 100))
    x[2, :, 80:] = np.nan
    x[9, 3, 95:] = np.nan
    src = tmp_path / "d.npz"
    np.savez(src, x=x, y=np.arange(12) % 3)
    monkeypatch.setattr(convert_module, "BLOCK_BYTES", 8 * 600 * 3)  # 3 rows a block
    message = one_line_error(src, tmp_path / "out.h5")
    assert "in 2 rows, first row 2" in message and "padded with NaN" in message, message
    assert leftovers(tmp_path) == []


# --- a signal while writing: one line, 128 + the signal, no temporary file, the user's file as it was ------------

@pytest.mark.parametrize("sig, replacing", [(signal.SIGTERM, False), (signal.SIGINT, True), (signal.SIGHUP, False)])
def test_a_signal_while_converting_leaves_nothing_behind(tmp_path, sig, replacing):
    """h5py runs weakref callbacks, where Python drops an exception a signal handler raises; a lost signal is sent
    again, so each try ends the write (before, a SIGTERM left ``.out.h5.<hex>.tmp`` and SIGINT a traceback)."""
    rng = np.random.default_rng(0)
    src = tmp_path / "big.npz"
    np.savez(src, x_train=rng.standard_normal((30000, 1, 1000), dtype=np.float32), y_train=rng.integers(0, 3, 30000),
             x_test=np.zeros((10, 1, 1000), np.float32), y_test=np.zeros(10, int))
    out = tmp_path / "out.h5"
    if replacing:
        out.write_bytes(b"the user's own file")
    proc = subprocess.Popen([*evens_cmd(), "convert", str(src), str(out), *(["--force"] if replacing else [])],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)
    deadline = time.monotonic() + 120
    while not leftovers(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert leftovers(tmp_path), "the write never began"
    proc.send_signal(sig)
    err = proc.communicate(timeout=120)[1]
    assert (proc.returncode, err) == (128 + sig, f"evens: error: {out}: ended by {signal.Signals(sig).name}; nothing was written\n")
    assert leftovers(tmp_path) == []
    assert out.read_bytes() == b"the user's own file" if replacing else not out.exists()

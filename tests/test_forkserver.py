"""The fork server (evolve.transport.forkserver): a node's training processes forked from one process that imported
torch once. tests/test_isolation.py runs its trainings both ways (a fresh interpreter, the fork server); these tests
are about the server itself: one per node and job, its lifetime, who may use it, and a training process's ties."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from conftest import ROOT

from evolve.transport import forkserver
from evolve.transport.isolation import TrainerProcess, trainer_environment

pytestmark = pytest.mark.skipif(not forkserver.supported(), reason="the fork server needs Linux (abstract sockets, pidfds)")


def servers(token: str) -> list[int]:
    """The pids of the fork servers of job ``token`` on this machine."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                line = f.read()
        except (OSError, ValueError):
            continue
        if b"evolve.transport.forkserver" in line and token.encode() in line and alive(int(pid)):
            found.append(int(pid))
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def until(condition, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.fixture(scope="module")
def shared():
    """A server these tests share (its token, and this process's connection as a rank's), where its lifetime is not
    what they test: each server started imports torch (seconds)."""
    token = os.urandom(6).hex()
    server = forkserver.connect(token, trainer_environment())
    yield token, server
    server.close()


def test_the_ranks_of_a_node_share_one_server_which_ends_with_their_last_connection():
    token = os.urandom(6).hex()
    first = forkserver.connect(token, trainer_environment())
    second = forkserver.connect(token, trainer_environment())  # another rank of the node: it finds the server up
    assert first._server is not None and second._server is None
    assert servers(token) == [first._server.pid]
    first.close()
    time.sleep(0.5)
    assert first._server.poll() is None  # a rank still holds it
    second.close()
    assert first._server.wait(timeout=20) == 0
    assert servers(token) == []


def test_the_rank_that_started_the_server_waits_at_its_end_for_it_to_end_and_kills_one_held_past_that():
    """close(wait=...), as a rank ends: the server, and what it forked, gone before the rank that started it (issue 35,
    defect 17: a job's launcher returned with its fork server still alive)."""
    token = os.urandom(6).hex()
    first = forkserver.connect(token, trainer_environment())
    second = forkserver.connect(token, trainer_environment())
    second.close()
    started = time.monotonic()
    first.close(wait=10)
    assert first._server.returncode == 0 and time.monotonic() - started < 5 and servers(token) == []
    token = os.urandom(6).hex()
    first = forkserver.connect(token, trainer_environment())
    held = forkserver.connect(token, trainer_environment())  # a rank of the node that does not let go
    try:
        first.close(wait=0.5)
        assert first._server.returncode == -signal.SIGKILL and servers(token) == []
    finally:
        held.close()


def test_another_jobs_ranks_get_a_server_of_their_own():
    one, other = (forkserver.connect(os.urandom(6).hex(), trainer_environment()) for _ in range(2))
    try:
        assert one._server is not None and other._server is not None and one._server.pid != other._server.pid
    finally:
        one.close()
        other.close()


RANK = textwrap.dedent("""
    import os, sys, time
    from evolve.transport import forkserver
    from evolve.transport.isolation import trainer_environment
    server = forkserver.connect(sys.argv[1], trainer_environment())
    fds = [*os.pipe(), *os.pipe()]
    child = server.start(trainer_environment(), (fds[0], fds[3], fds[0], fds[3]))  # it waits for a set-up that never comes
    print(child.pid, flush=True)
    time.sleep(600)
""")


def test_a_forked_training_process_dies_with_its_rank_not_with_the_server(shared):
    token, keeper = shared  # (another rank: the server outlives the one killed)
    rank = subprocess.Popen([sys.executable, "-c", RANK, token], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        child = int(rank.stdout.readline())
        assert alive(child)
        time.sleep(0.5)
        assert alive(child)  # waiting for its rank's set-up
        rank.kill()
        rank.wait()
        assert until(lambda: not alive(child), 10), "the training process outlived its rank"
        assert alive(keeper._server.pid)
    finally:
        rank.kill()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to be another user")
def test_a_process_of_another_user_is_refused(shared):
    token, server = shared
    probe = textwrap.dedent(f"""
        import os, socket, json
        os.setgid(65534); os.setuid(65534)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect({forkserver.address(token)!r})
        r, w = os.pipe()
        try:
            socket.send_fds(s, [json.dumps({{"env": {{}}, "rank": os.getpid()}}).encode()], [r, w, r, w])
            s.settimeout(10)
            print(repr(s.recv(4096)))
        except (BrokenPipeError, ConnectionResetError):
            print("hung up")
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() in ("b''", "hung up"), (out.stdout, out.stderr)  # the server hung up: no fork, no reply
    with open(f"/proc/{server._server.pid}/task/{server._server.pid}/children") as f:
        assert f.read().strip() == ""


def test_a_request_the_server_cannot_read_is_refused_and_it_goes_on_serving(shared):
    token, server = shared
    import json
    import socket

    probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    probe.connect(forkserver.address(token))
    r, w = os.pipe()
    for message, fds in ((b"not json", [r, w, r, w]), (json.dumps({"env": {}, "rank": os.getpid()}).encode(), [r])):
        socket.send_fds(probe, [message], fds)
        probe.settimeout(20)
        assert "error" in json.loads(probe.recv(4096))
    probe.close()
    os.close(r)
    os.close(w)
    assert server._server.poll() is None
    setup, memory = small_trainer_setup(5)
    process = TrainerProcess(setup, memory.fd, server)
    try:
        process.start()
        assert isinstance(process.proc, forkserver.ForkedProcess)
    finally:
        process.close()
        memory.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to be another user")
def test_a_server_name_held_by_another_user_is_not_trusted():
    token = os.urandom(6).hex()
    squatter = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, socket, time
        os.setgid(65534); os.setuid(65534)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.bind({forkserver.address(token)!r}); s.listen(4)
        print("up", flush=True)
        while True:
            s.accept()
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert squatter.stdout.readline().strip() == "up"
        with pytest.raises(forkserver.ForkServerError, match="another user"):
            forkserver.connect(token, trainer_environment())
    finally:
        squatter.kill()
        squatter.wait()


def test_a_training_process_forked_trains_what_a_fresh_one_trains(shared):
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from test_isolation import blobs, task, trainer_setup

    setup, memory = trainer_setup(blobs(1), "cpu")
    server = shared[1]
    results = []
    try:
        for through in (server, None):
            process = TrainerProcess(setup, memory.fd, through)
            process.start()
            assert isinstance(process.proc, forkserver.ForkedProcess) == (through is not None)
            results.append(process.evaluate(task(1, "none")))
            process.close()
    finally:
        memory.close()
    forked, fresh = results
    assert forked.status == fresh.status == "ok"
    assert forked.fitness == fresh.fitness and np.array_equal(forked.val_pred, fresh.val_pred)
    assert all(np.array_equal(forked.weights[k], fresh.weights[k]) for k in fresh.weights)


def small_trainer_setup(seed: int):
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from test_isolation import blobs, trainer_setup

    return trainer_setup(blobs(seed), "cpu")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_a_forked_training_process_runs_on_its_ranks_cores(shared):
    setup, memory = small_trainer_setup(3)
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(mine)})  # this rank bound to one core (srun's --cpu-bind), the server not
    try:
        process = TrainerProcess(setup, memory.fd, shared[1])
        process.start()
        assert isinstance(process.proc, forkserver.ForkedProcess)
        assert os.sched_getaffinity(process.proc.pid) == {min(mine)}
        assert os.sched_getaffinity(shared[1]._server.pid) != {min(mine)}
        process.close()
    finally:
        os.sched_setaffinity(0, mine)
        memory.close()


def test_a_forked_process_that_cannot_take_its_ranks_cores_leaves_the_rank_to_fresh_interpreters(shared, monkeypatch, capfd):
    from test_isolation import task

    setup, memory = small_trainer_setup(4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {4095})  # cores no process here may take (as a cgroup's cpuset)
    process = TrainerProcess(setup, memory.fd, shared[1])
    try:
        process.start()
        assert isinstance(process.proc, subprocess.Popen) and process.server is None
        assert process.evaluate(task(1, "none")).status == "ok"
        assert "cannot run on its rank's cores" in capfd.readouterr().err
    finally:
        process.close()
        memory.close()


def test_a_rank_whose_server_is_gone_starts_fresh_interpreters(capfd):
    from test_isolation import task

    setup, memory = small_trainer_setup(2)
    server = forkserver.connect(os.urandom(6).hex(), trainer_environment())
    process = TrainerProcess(setup, memory.fd, server)
    try:
        process.start()
        assert isinstance(process.proc, forkserver.ForkedProcess)
        os.kill(server._server.pid, signal.SIGKILL)
        server._server.wait()
        process.proc.kill()  # the next task needs a new process, and no server is left to fork it
        ev = process.evaluate(task(1, "none"))
        assert ev.status == "crashed"  # the task it was given died with it
        assert process.evaluate(task(2, "none")).status == "ok"
        assert isinstance(process.proc, subprocess.Popen) and process.server is None
        assert "the fork server is gone" in capfd.readouterr().err
    finally:
        process.close()
        server.close()
        memory.close()


def test_the_server_holds_no_mpi_and_ignores_the_stop_signals(shared):
    pid = shared[1]._server.pid
    with open(f"/proc/{pid}/maps") as f:
        maps = f.read()
    assert "libmpi" not in maps and "libcuda" not in maps
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        os.kill(pid, sig)
    time.sleep(0.5)
    assert shared[1]._server.poll() is None  # a drain lets trainings end: the ranks decide


@pytest.mark.parametrize("setting, device, visible, expected", [
    ("off", "cpu", None, False), ("on", "cuda", None, True), ("auto", "cpu", None, True), ("auto", "auto", "", True),
    ("auto", "auto", "-1", True)])
def test_auto_forks_where_no_gpu_can_be_touched(monkeypatch, setting, device, visible, expected):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert forkserver.wanted(setting, device) is expected

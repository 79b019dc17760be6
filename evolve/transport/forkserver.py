"""A fork server per node: the training processes of a node's worker ranks forked from one process that has
imported torch, instead of each importing it (``train.fork_server``).

A training process (evolve.transport.trainer_process) spends most of its start importing: torch, then torch's
compiler stack, which its optimizers import at their first step (``torch._dynamo``, about as much again). On a
2-core machine that is 3 s of CPU a process; on a cluster it is every GPU's process reading thousands of files from
the shared file system at the job's start, and again after each training that dies. Here the first worker rank
of a node to ask starts a server (a fresh interpreter, ``python -m evolve.transport.forkserver``: no MPI, no CUDA,
nothing of the rank's), which imports what a training needs once and then forks a training process for each
rank that asks, in milliseconds. The forked process is the training process as before: the rank hands it its
pipes, the node's data and its stderr (descriptors over the socket), and its environment.

* **Where.** An abstract Unix socket (no file, gone with the server) named by a token the master draws for
  the job, so a node's ranks find one server and no other job's. The rank that binds the starter's name
  starts it; the others wait for it. Only a process of this user may connect (``SO_PEERCRED``).
* **Lifetime.** The server serves until every rank that connected has closed its connection (each keeps it
  for its life, to start a new training process after one dies), or until no rank connected within
  :data:`START_SECONDS`; the rank that started it waits, as it ends, for the server to end (:meth:`ForkServer.close`).
  It ignores the stop signals, as training processes do: a drain lets trainings end.
* **A forked process** takes its rank's environment, working folder and cores (its CPU affinity: srun may bind each
  task to cores of its own; one that cannot take them ends, and its rank starts fresh interpreters instead), and
  dies with its rank (it watches the rank's pidfd), not with the server. The rank
  signals it through a pidfd the server sends (never a pid that may have been reused) and learns its exit
  status from the server, which reaps it.
* **Fork safety.** The server never calls MPI or CUDA and runs no thread of its own; only imports happen
  before a fork, as in PyTorch's DataLoader workers. Where a GPU may be used, ``"auto"`` does not use the
  server (forking after CUDA's driver was touched is unsafe, and this has been measured on CPU only).

Linux only (abstract sockets, pidfds); elsewhere, or if the server cannot start, a rank starts its training
process as a fresh interpreter, as without it.
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

from .trainer_process import ignore_stop_signals

START_SECONDS = 120.0  # for the server to import torch and listen; and, once up, for the first rank to connect
PRELOAD = ("torch", "torch._dynamo", "torch.optim", "ensemble.train", "evolve.transport.worker", "evolve.transport.protocol",
           "evolve.transport.wire", "data_bcast.layout", "data_bcast.memory")
_MAX = 1 << 20  # bytes of one message (an environment)


def supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")


def address(token: str) -> str:
    return f"\0evens-fork-server-{os.getuid()}-{token}"


def _peer_is_us(conn: socket.socket) -> bool:
    import struct

    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid == os.getuid()


# --- the server ------------------------------------------------------------------------------------------

def serve(where: str) -> int:
    """The server's life: import :data:`PRELOAD`, listen at ``where``, fork a training process per request."""
    ignore_stop_signals()
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    import torch

    if torch.cuda.is_initialized():  # (nothing here should have: a fork after it is unsafe) the ranks start fresh interpreters
        print("evens: the fork server found CUDA initialised after its imports; it ends", file=sys.stderr)
        return 3
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        listener.bind(where)
    except OSError:
        return 0  # another server is up (the starter's name was taken and given up in between): it serves
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # (the wakeup fd wakes the loop)
    owners: dict[int, socket.socket] = {}  # a child's pid -> the connection of the rank it trains for
    conns: list[socket.socket] = []
    served, since = False, time.monotonic()
    while conns or (not served and time.monotonic() - since < START_SECONDS):
        ready, _, _ = select.select([listener, wake_r, *conns], [], [], 1.0)
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(owners)
        if listener in ready:
            conn, _ = listener.accept()
            if _peer_is_us(conn):
                conns.append(conn)
                served = True
            else:
                conn.close()
        for conn in [c for c in conns if c in ready]:
            try:
                message, fds, _, _ = socket.recv_fds(conn, _MAX, 8)
            except OSError:
                message, fds = b"", []
            if not message:
                conns.remove(conn)
                conn.close()
                for fd in fds:
                    os.close(fd)
                continue
            request = _request(message, fds)
            if request is None:  # (cut short, say: an environment past _MAX) the rank starts a fresh interpreter
                for fd in fds:
                    os.close(fd)
                _reply(conn, {"error": "a request the fork server cannot read"})
                continue
            _fork(conn, request, fds, owners, (listener, wake_r, wake_w, *conns))
    return 0


def _request(message: bytes, fds: list[int]) -> dict | None:
    """A rank's request as :meth:`ForkServer.start` sends it, or None if it is not one."""
    try:
        request = json.loads(message)
        ok = len(fds) == 4 and isinstance(request.get("env"), dict) and isinstance(request.get("rank"), int)
    except (ValueError, AttributeError):
        return None
    return request if ok else None


def _reply(conn: socket.socket, reply: dict, fds: tuple = ()) -> None:
    try:
        socket.send_fds(conn, [json.dumps(reply).encode()], list(fds)) if fds else conn.send(json.dumps(reply).encode())
    except OSError:
        pass


def _reap(owners: dict[int, socket.socket]) -> None:
    """Reap every child that ended; tell its rank how (a Popen-style return code)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = owners.pop(pid, None)
        if conn is not None:
            _reply(conn, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _fork(conn: socket.socket, request: dict, fds: list[int], owners: dict, inherited: tuple) -> None:
    """Fork a training process for the rank at ``conn``: its descriptors are ``fds`` (from the rank, to the rank, the
    node's data, its stderr), its environment ``request["env"]``; send the rank its pid and a pidfd."""
    pid = os.fork()
    if pid == 0:  # the training process
        code = 1
        try:
            for item in inherited:
                os.close(item if isinstance(item, int) else item.detach())
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            from .trainer_process import serve_forked

            code = serve_forked(fds, request["env"], int(request["rank"]), request.get("cwd"), request.get("cpus"))
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):  # (the child does the same: whichever runs first) a process group of its own
        os.setpgid(pid, pid)
    pidfd = os.pidfd_open(pid)
    owners[pid] = conn
    _reply(conn, {"pid": pid}, (pidfd,))
    os.close(pidfd)


# --- a rank's side ---------------------------------------------------------------------------------------

class ForkServerError(OSError):
    """No server could be reached or started."""


class ForkServer:
    """A rank's connection to its node's server (:func:`connect`): starts training processes."""

    def __init__(self, conn: socket.socket, starter: socket.socket | None, server: subprocess.Popen | None):
        self.conn, self._starter, self._server = conn, starter, server
        self._codes: dict[int, int] = {}  # exit codes the server sent, by pid

    def start(self, env: dict, fds: tuple[int, int, int, int]) -> ForkedProcess:
        """A training process with ``fds`` (from the rank, to the rank, the node's data, its stderr) and ``env``."""
        request = {"env": env, "rank": os.getpid(), "cwd": os.getcwd(), "cpus": sorted(os.sched_getaffinity(0))}
        socket.send_fds(self.conn, [json.dumps(request).encode()], list(fds))
        reply, got = self._receive(None)
        if reply is None:
            raise ForkServerError("the fork server ended")
        if "error" in reply or not got:
            raise ForkServerError(reply.get("error", "no pidfd with the fork server's reply"))
        return ForkedProcess(self, reply["pid"], got[0])

    def exit_code(self, pid: int, timeout: float) -> int | None:
        """The exit code of ``pid`` (ended), as the server reaped it; None if none came within ``timeout``."""
        deadline = time.monotonic() + timeout
        while pid not in self._codes:
            if self._receive(max(0.0, deadline - time.monotonic()), until=pid)[0] is None:
                return None
        return self._codes.pop(pid)

    def _receive(self, timeout: float | None, until: int | None = None) -> tuple[dict | None, list[int]]:
        """The server's next reply to a request, and the descriptors with it; the exit codes it sends meanwhile are
        filed (:meth:`exit_code`), and with ``until`` the one of that pid ends the wait. (None, []) if the server
        ended, or nothing came within ``timeout`` seconds (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and (left <= 0 or not select.select([self.conn], [], [], left)[0]):
                return None, []
            message, got, _, _ = socket.recv_fds(self.conn, _MAX, 1)
            if not message:
                return None, []
            reply = json.loads(message)
            if "exit" not in reply:
                return reply, got
            self._codes[reply["exit"]] = reply["code"]
            if reply["exit"] == until:
                return reply, got

    def close(self, wait: float = 0.0) -> None:
        """Let go of the server. With ``wait`` (a rank's end), the rank that started it then waits up to that many seconds
        for it to end, as it does once every rank of the node has let go, and kills it past that: the server, and the
        training processes it forked and reaped, are gone before that rank ends (and the job's launcher returns)."""
        for s in (self.conn, self._starter):
            if s is not None:
                s.close()
        self.conn = self._starter = None
        if wait > 0 and self._server is not None:
            try:
                self._server.wait(timeout=wait)
            except subprocess.TimeoutExpired:  # (a rank of the node that does not let go: hung, or ending late)
                self._server.kill()
                self._server.wait()


class ForkedProcess:
    """A training process the server forked, as :class:`evolve.transport.isolation.TrainerProcess` uses a
    ``subprocess.Popen``: ``pid``, ``poll``, ``wait``, ``kill`` and ``stderr``."""

    def __init__(self, server: ForkServer, pid: int, pidfd: int):
        self.server, self.pid, self.pidfd = server, pid, pidfd
        self.returncode: int | None = None
        self.stderr = None  # (set by the caller: the read end of the process's stderr)

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self.pidfd], [], [], 0)[0]:
            self._ended(5.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self.pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired("training process", timeout)
            self._ended(5.0)
        return self.returncode

    def _ended(self, timeout: float) -> None:
        code = self.server.exit_code(self.pid, timeout)
        self.returncode = code if code is not None else 1  # (a server that ended cannot say: a failure)
        os.close(self.pidfd)
        self.pidfd = -1

    def kill(self) -> None:
        if self.returncode is None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass


def wanted(setting: str, device: str) -> bool:
    """``train.fork_server`` for a training on ``device`` (train.device): "auto" is on where no process of the node
    may touch a GPU (the device is "cpu", or no GPU is visible: the check opens no driver)."""
    if setting == "off" or not supported():
        return False
    if setting == "on" or device == "cpu":
        return True
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1")
    return hidden or not any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/kfd", "/dev/dxg"))


def reach(token: str, env: dict) -> ForkServer | None:
    """:func:`connect`, or None with a warning on stderr (training processes then start as fresh interpreters)."""
    try:
        return connect(token, env)
    except OSError as exc:
        print(f"evens: no fork server ({exc}); training processes start as fresh interpreters", file=sys.stderr)
        return None


def connect(token: str, env: dict) -> ForkServer:
    """This node's server for the job ``token``: the one running, or one this rank starts (with ``env``, the
    training processes' environment) if no other rank of the node is starting it. Raises ForkServerError."""
    where = address(token)
    starter, server, claimed = None, None, False
    deadline = time.monotonic() + START_SECONDS
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.connect(where)
        except OSError:
            conn.close()
        else:
            if not _peer_is_us(conn):  # a name taken by another user's process: not ours to hand descriptors to
                conn.close()
                raise ForkServerError("the fork server's name is held by another user's process")
            return ForkServer(conn, starter, server)
        if not claimed:
            claimed, claim = True, socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                claim.bind(where + "-starter")  # this rank starts it (a name held while the rank lives)
            except OSError:
                claim.close()  # another rank starts it
            else:
                starter = claim
                server = subprocess.Popen([sys.executable, "-m", "evolve.transport.forkserver", where[1:]], env=env,
                                          stdin=subprocess.DEVNULL, close_fds=True)
        if server is not None and server.poll() is not None:
            raise ForkServerError(f"the fork server ended at its start (exit status {server.returncode})")
        if time.monotonic() > deadline:
            raise ForkServerError("no fork server came up")
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    return serve("\0" + argv[0])


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stderr.flush()
    os._exit(code)  # without the interpreter's teardown of torch's modules (seconds, which the rank that started it waits for)

"""A real single-node Slurm for the tests: munged, slurmctld and slurmd on localhost, each private to one test session.

Everything lives in one temporary folder: munge's key, socket and logs, slurm.conf (ports chosen free, the node
claiming more CPUs than the machine has, ``SlurmdParameters=config_overrides``), the daemons' state, spool and logs.
Slurm's commands find the cluster through ``SLURM_CONF``, which :attr:`LocalSlurm.env` sets; nothing of the
machine's own Slurm or munge set-up is read or changed. The daemons run as root (Slurm's own test suites do so).

    with LocalSlurm(tmp) as slurm:
        job = slurm.sbatch(["--wrap", "hostname"])
        slurm.wait_for(job, "COMPLETED")

``why_not()`` says why a machine cannot run it (not root, Slurm not installed), for a skip.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

DAEMONS = ("munged", "slurmctld", "slurmd")
CPUS = 16  # what the node claims (config_overrides): room for three jobs of three ranks at once on a 2-core machine
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


def why_not() -> str | None:
    """Why a real Slurm cannot run here, or None."""
    if os.geteuid() != 0:
        return "the real-Slurm tests run the daemons as root (scripts/test.sh installs Slurm where it runs as root with apt)"
    missing = [d for d in DAEMONS + ("sbatch", "scontrol", "sinfo") if not _which(d)]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing): scripts/test.sh installs slurm-wlm and munge where it runs as root with apt"
    return None


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class LocalSlurm:
    """munged, slurmctld and slurmd of one test session, in ``folder``."""

    def __init__(self, folder: str):
        self.folder = os.path.abspath(folder)
        self.node = socket.gethostname().split(".")[0]
        self.procs: dict[str, subprocess.Popen] = {}
        self.conf = os.path.join(self.folder, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        for name in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS"):  # not from a job of the machine's
            self.env.pop(name, None)

    # --- set-up ---------------------------------------------------------------------------------

    def _path(self, *parts: str) -> str:
        return os.path.join(self.folder, *parts)

    def _munge(self) -> None:
        os.makedirs(self._path("munge"), mode=0o700, exist_ok=True)
        key = self._path("munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self.procs["munged"] = subprocess.Popen(
            [_which("munged"), "--foreground", "--force", f"--socket={self._path('munge', 'socket')}", f"--key-file={key}",
             f"--pid-file={self._path('munge', 'pid')}", f"--log-file={self._path('munge', 'log')}",
             f"--seed-file={self._path('munge', 'seed')}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._until(lambda: os.path.exists(self._path("munge", "socket")), 20, "munged did not start")

    def _write_conf(self) -> None:
        for sub in ("state", "spool", "log", "jobs"):
            os.makedirs(self._path(sub), exist_ok=True)
        ctld, slurmd = _free_ports(2)
        lines = [
            "ClusterName=evenstest",
            f"SlurmctldHost={self.node}",
            f"SlurmctldPort={ctld}",
            f"SlurmdPort={slurmd}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self._path('munge', 'socket')}",
            f"StateSaveLocation={self._path('state')}",
            f"SlurmdSpoolDir={self._path('spool')}",
            f"SlurmctldPidFile={self._path('slurmctld.pid')}",
            f"SlurmdPidFile={self._path('slurmd.pid')}",
            f"SlurmctldLogFile={self._path('log', 'slurmctld.log')}",
            f"SlurmdLogFile={self._path('log', 'slurmd.log')}",
            "ProctrackType=proctrack/linuxproc",  # no cgroups in a container
            "TaskPlugin=task/none",
            "MpiDefault=none",  # as many sites: the job scripts must choose pmi2 for PyPI's MPICH (EVENS_SRUN_MPI)
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SlurmdParameters=config_overrides",  # the node claims more CPUs than the machine has
            "ReturnToService=2",
            "JobRequeue=1",
            "KillWait=30",  # SIGTERM to SIGKILL at a cancel, a preemption or the time limit (Slurm's default): room for evens' drain and save on a loaded machine
            "OverTimeLimit=0",
            "MinJobAge=600",  # ended jobs stay visible to scontrol for the tests
            "InactiveLimit=0",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={CPUS} RealMemory=4000 State=UNKNOWN",
            "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(self._path("cgroup.conf"), "w") as f:
            f.write("IgnoreSystemd=yes\n")

    def start(self) -> LocalSlurm:
        os.makedirs(self.folder, exist_ok=True)
        self._munge()
        self._write_conf()
        for daemon in ("slurmctld", "slurmd"):
            args = [_which(daemon), "-D", "-f", self.conf] + (["-i"] if daemon == "slurmctld" else [])
            log = open(self._path("log", f"{daemon}.out"), "w")
            self.procs[daemon] = subprocess.Popen(args, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._until(self._node_ready, 60, "the node did not come up")
        return self

    def _node_ready(self) -> bool:
        for daemon in ("slurmctld", "slurmd"):
            if self.procs[daemon].poll() is not None:
                raise RuntimeError(f"{daemon} exited: {self.log(daemon)[-2000:]}")
        out = self.run(["sinfo", "-h", "-N", "-o", "%T"], check=False)
        return out.returncode == 0 and out.stdout.strip() in ("idle", "mixed", "allocated")

    def stop(self) -> None:
        if "slurmctld" in self.procs:
            self.run(["scancel", "--full", "--user=root"], check=False)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- use ------------------------------------------------------------------------------------

    def run(self, args: list[str], check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        out = subprocess.run(args, env=kwargs.pop("env", self.env), capture_output=True, text=True, timeout=kwargs.pop("timeout", 30), **kwargs)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: exit {out.returncode}: {out.stderr.strip()}")
        return out

    def sbatch(self, args: list[str], env: dict | None = None, cwd: str | None = None) -> int:
        """Submit; the job's id."""
        out = self.run(["sbatch", "--parsable", *args], env={**self.env, **(env or {})}, cwd=cwd)
        return int(out.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """``scontrol show job``'s fields (JobState, Restarts, ExitCode, ...)."""
        out = self.run(["scontrol", "show", "job", str(job_id), "-o"], check=False)
        return dict(item.split("=", 1) for item in out.stdout.split() if "=" in item)

    def state(self, job_id: int) -> str:
        return self.job(job_id).get("JobState", "")

    def wait_for(self, job_id: int, states, seconds: float, started_again: bool = False) -> dict[str, str]:
        """Until the job's state is one of ``states``; its fields. A requeued job is started at once (Slurm would hold
        it back for about two minutes) when ``started_again``."""
        states = (states,) if isinstance(states, str) else tuple(states)
        deadline = time.monotonic() + seconds
        while True:
            job = self.job(job_id)
            if job.get("JobState") in states:
                return job
            if started_again and job.get("JobState") == "PENDING" and job.get("Reason") == "BeginTime":
                self.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=False)
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} is {job.get('JobState')}, not {'/'.join(states)}, after {seconds} s")
            time.sleep(0.5)

    def log(self, daemon: str) -> str:
        for name in (f"{daemon}.log", f"{daemon}.out"):
            path = self._path("log", name)
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    return f.read()
        return ""

    @staticmethod
    def _until(ready, seconds: float, message: str) -> None:
        deadline = time.monotonic() + seconds
        while not ready():
            if time.monotonic() > deadline:
                raise RuntimeError(message)
            time.sleep(0.2)

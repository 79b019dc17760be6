"""Choose a worker's device and CPU thread count from facts the caller gathers.

Nothing here reads the environment or asks MPI: the driver passes the node-local
rank, the ranks on the node and the cores it may use.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEVICES = ("auto", "cpu", "cuda")


def gpu_index(local_index: int, gpus: int, workers_per_gpu: int = 0) -> int:
    """Which of the ``gpus`` GPUs a rank sees its node's worker number ``local_index`` takes.

    ``workers_per_gpu`` 0 deals them round robin; k >= 1 puts workers 0..k-1 on the first, k..2k-1
    on the second, and so on, wrapping round. It never refuses: where each task sees only its own
    GPU (``srun --gpus-per-task=1``) every worker takes "GPU 0", and that is right. Whether two
    workers really landed on one GPU is decided afterwards, by UUID, over all ranks
    (:func:`check_bindings`).
    """
    return (local_index // max(1, workers_per_gpu)) % gpus


def choose_device(local_index: int, prefer: str = "auto", workers_per_gpu: int = 0) -> torch.device:
    """A GPU by :func:`gpu_index` when CUDA is wanted and present, else the CPU.

    Only the GPUs that ``CUDA_VISIBLE_DEVICES`` shows are counted (torch numbers them from 0). With
    one rank per GPU (``srun --gpus-per-task=1``, where each task sees one GPU, or node-local ranks
    0..G-1 seeing them all) every worker gets a GPU of its own.
    """
    import torch  # (here, not at the top: a worker rank whose trainings run in a process of their own imports no torch)

    if prefer not in DEVICES:
        raise ValueError(f"unknown device {prefer!r} (known: {', '.join(DEVICES)})")
    if prefer == "cpu":
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if count == 0:
        if prefer == "cuda":
            raise RuntimeError("the device 'cuda' was asked for, but no CUDA device is visible on this node")
        return torch.device("cpu")
    device = torch.device("cuda", gpu_index(local_index, count, workers_per_gpu))
    torch.cuda.set_device(device)  # so that nothing, library code included, opens a context on GPU 0
    return device


def describe_device(device: torch.device) -> dict:
    """What a worker trains on, for the start-up log: the device, its name and (GPUs) its UUID."""
    import torch

    if device.type != "cuda":
        return {"device": "cpu", "name": "cpu", "uuid": "", "threads": torch.get_num_threads()}
    props = torch.cuda.get_device_properties(device)
    uuid = str(getattr(props, "uuid", "")) or f"index-{device.index}"
    return {"device": str(device), "name": props.name, "uuid": uuid if uuid.startswith("GPU-") else f"GPU-{uuid}",
            "threads": torch.get_num_threads()}


def check_bindings(bindings: list[dict], workers_per_gpu: int, cores: dict[str, int]) -> tuple[str | None, list[str]]:
    """Every worker's device (dicts from :func:`describe_device` plus ``rank`` and ``host``), checked.

    Returns (an error, or None; lines for the log). With ``workers_per_gpu`` k >= 1, more than k
    workers on one GPU (the same UUID on the same host) is an error: a launch that binds ranks to GPUs
    by mistake (every task seeing GPU 0, say) is caught before any training. With 0, sharing is
    reported. CPU workers whose threads oversubscribe their host's ``cores`` are reported.
    """
    lines, error = [], None
    on_gpu: dict[tuple[str, str], list[int]] = {}
    threads: dict[str, int] = {}
    most_threads: dict[str, int] = {}
    for b in bindings:
        if b["device"] == "cpu":
            threads[b["host"]] = threads.get(b["host"], 0) + b["threads"]
            most_threads[b["host"]] = max(most_threads.get(b["host"], 0), b["threads"])
        else:
            on_gpu.setdefault((b["host"], b["uuid"]), []).append(b["rank"])
    if on_gpu:
        names = sorted({b["name"] for b in bindings if b["device"] != "cpu"})
        hosts = {host for host, _ in on_gpu}
        most = max(len(r) for r in on_gpu.values())
        lines.append(f"devices: {sum(len(r) for r in on_gpu.values())} worker(s) on {len(on_gpu)} GPU(s) ({', '.join(names)}) "
                     f"of {len(hosts)} host(s), up to {most} worker(s) per GPU")
        crowded = {k: r for k, r in on_gpu.items() if workers_per_gpu >= 1 and len(r) > workers_per_gpu}
        if crowded:
            (host, uuid), ranks = sorted(crowded.items())[0]
            error = (f"ranks {', '.join(map(str, ranks))} are all bound to GPU {uuid} on {host}, but train.workers_per_gpu "
                     f"is {workers_per_gpu}; check the launch's GPU binding (each task seeing the same GPU?) or raise it")
    if threads:
        lines.append(f"devices: {sum(1 for b in bindings if b['device'] == 'cpu')} worker(s) on the CPUs of {len(threads)} host(s)")
        for host, used in sorted(threads.items()):
            # more single-threaded ranks than cores is the launch's choice (the demo's 3 workers on 2
            # cores); threads per rank that could be fewer and oversubscribe are worth a warning
            if cores.get(host, 0) and used > cores[host] and most_threads[host] > 1:
                lines.append(f"warning: the workers on {host} run {used} torch threads on {cores[host]} cores; "
                             "set train.threads lower, or leave it 0 to divide the cores")
    return error, lines


def cpu_threads(cores: int, ranks_sharing: int, requested: int = 0, cores_per_task: int = 0) -> int:
    """Threads per rank so that the ranks sharing ``cores`` together do not oversubscribe them.

    ``requested`` (the config's ``train.threads``) wins; then ``cores_per_task`` (what the user or the
    launcher asked for each task: ``OMP_NUM_THREADS``, Slurm's ``--cpus-per-task``); else the cores are divided.
    """
    if requested > 0:
        return requested
    if cores_per_task > 0:
        return cores_per_task
    return max(1, cores // max(1, ranks_sharing))

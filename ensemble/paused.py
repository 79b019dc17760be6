"""A training paused at the end of an epoch, to be carried on later (successive halving's promotion): everything
that decides the rest of the training, as named numpy arrays (what the run file and MPI carry; never a pickle).

Carrying on from a :class:`Paused` gives, bit for bit, the network an unbroken training gives: the weights and
buffers (batch norm's statistics), the optimizer's state (moments, momentum buffers, step counts), the position
in the learning-rate schedule (its epoch: the schedule is always planned over the training's whole epochs), and
the random streams (the minibatch order and augmentation's generator; torch's global stream, which dropout
draws from; a GPU's, on a GPU). The model and optimizer are rebuilt from the same network and training
settings and then take these values.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

PREFIXES = ("w/", "opt/", "rng/")


@dataclass
class Paused:
    """``epoch`` epochs done of a training; its state (see the module's docstring)."""

    epoch: int
    weights: dict[str, np.ndarray]
    optimizer: dict[str, np.ndarray]  # "<parameter index>/<state name>" -> array (a step count: a 0-d array)
    rng: dict[str, np.ndarray]  # "batches", "torch", and "cuda" on a GPU: the generators' states (uint8)
    curve: list[float] = field(default_factory=list)  # the validation fitness after each epoch so far (the median rule's)

    @classmethod
    def capture(cls, epoch: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, generator: torch.Generator,
                curve: list[float] = ()) -> Paused:
        """The state of a training after ``epoch`` epochs (copies: training on changes none of it)."""
        weights = {name: t.detach().cpu().numpy().copy() for name, t in model.state_dict().items()}
        state = optimizer.state_dict()["state"]
        opt = {f"{i}/{name}": (v.detach().cpu().numpy().copy() if torch.is_tensor(v) else np.asarray(v))
               for i, entries in state.items() for name, v in entries.items()}
        rng = {"batches": generator.get_state().numpy().copy(), "torch": torch.get_rng_state().numpy().copy()}
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        if device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(device).numpy().copy()
        return cls(int(epoch), weights, opt, rng, [float(c) for c in curve])

    def restore(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, generator: torch.Generator) -> None:
        """Give a freshly built model, optimizer and generator this state (ValueError if it is not theirs)."""
        missing = set(model.state_dict()) ^ set(self.weights)
        if missing:
            raise ValueError(f"the paused training's weights do not fit this network ({len(missing)} names differ, e.g. {sorted(missing)[0]})")
        model.load_state_dict({name: torch.from_numpy(np.array(w)) for name, w in self.weights.items()})
        entries: dict[int, dict] = {}
        for key, value in self.optimizer.items():
            index, _, name = key.partition("/")
            entries.setdefault(int(index), {})[name] = torch.from_numpy(np.array(value))
        optimizer.load_state_dict({"state": entries, "param_groups": optimizer.state_dict()["param_groups"]})
        generator.set_state(torch.from_numpy(np.array(self.rng["batches"], dtype=np.uint8)))
        torch.set_rng_state(torch.from_numpy(np.array(self.rng["torch"], dtype=np.uint8)))
        if "cuda" in self.rng:
            device = next(p.device for p in model.parameters())
            torch.cuda.set_rng_state(torch.from_numpy(np.array(self.rng["cuda"], dtype=np.uint8)), device)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """One flat dict of named arrays: ``epoch``, ``curve``, and the weights, optimizer and rng states under ``w/``, ``opt/``, ``rng/``."""
        out = {"epoch": np.asarray(self.epoch, dtype=np.int64), "curve": np.asarray(self.curve, dtype=np.float64)}
        for prefix, part in zip(PREFIXES, (self.weights, self.optimizer, self.rng)):
            out.update({prefix + name: a for name, a in part.items()})
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Paused:
        """The inverse of :meth:`to_arrays` (ValueError for anything else)."""
        if "epoch" not in arrays:
            raise ValueError("a paused training's arrays need its epoch")
        parts: list[dict[str, np.ndarray]] = [{}, {}, {}]
        for name, a in arrays.items():
            if name in ("epoch", "curve"):
                continue
            for part, prefix in zip(parts, PREFIXES):
                if name.startswith(prefix):
                    part[name[len(prefix):]] = a
                    break
            else:
                raise ValueError(f"a paused training's arrays hold an unknown {name!r}")
        if "batches" not in parts[2] or "torch" not in parts[2]:
            raise ValueError("a paused training's arrays need its random streams")
        return cls(int(arrays["epoch"]), *parts, [float(c) for c in np.asarray(arrays.get("curve", ()), dtype=np.float64)])


class PausedCache:
    """The paused trainings a worker holds, by (network, part), up to ``max_bytes`` (least recently paused go first).

    A cache, not a store: a promotion whose paused training is gone (evicted, another worker's, a worker
    that died, a resumed run) trains from the start to the same network, bit for bit, at the cost of the
    epochs done before. ``hits`` and ``misses`` count the carry-ons that found their training or did not."""

    def __init__(self, max_bytes: int):
        import collections

        self.max_bytes = max_bytes
        self._held: collections.OrderedDict = collections.OrderedDict()
        self.bytes = 0
        self.hits = self.misses = 0

    def put(self, key: tuple, arrays: dict[str, np.ndarray]) -> None:
        self._drop(key)
        size = sum(a.nbytes for a in arrays.values())
        if size > self.max_bytes:
            return
        self._held[key] = (arrays, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, gone) = self._held.popitem(last=False)
            self.bytes -= gone

    def take(self, key: tuple) -> Paused | None:
        """The paused training ``key``, no longer held; None if it is not here."""
        arrays = self._drop(key)
        if arrays is None:
            self.misses += 1
            return None
        self.hits += 1
        return Paused.from_arrays(arrays)

    def _drop(self, key: tuple) -> dict[str, np.ndarray] | None:
        """Hold ``key`` no longer; its arrays, or None if it was not held."""
        held = self._held.pop(key, None)
        if held is None:
            return None
        self.bytes -= held[1]
        return held[0]

    def __len__(self) -> int:
        return len(self._held)

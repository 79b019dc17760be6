"""A result's header as a compact binary message: a fixed header (``struct``) and runs of float64.

The master takes one per evaluation, so it is never pickled: the status, fitness, metrics, times,
curve, message and the payload the worker offers are packed by a precompiled ``struct`` and
unpacked the same way. Decoding reads numbers and UTF-8 text only (and the offer's array specs as
JSON), so it executes nothing; a message that is not one (a wrong marker, lengths that do not add
up, text that is not UTF-8, an offer that is not a list of specs) raises :class:`WireError` naming
what is wrong.
"""
from __future__ import annotations

import json
import struct

from ensemble.results import Evaluation

RESULT_MARK, LONG_MARK = 0xE1, 0xE2

# result: mark, status bytes, metrics, curve length, names bytes, message bytes, offer bytes, task id, fitness,
# seconds, epochs done; then metrics + curve float64, status, names ("\0"-joined), message, offer (JSON)
_RESULT_HEAD = struct.Struct("<BBHIIIIqddq")
_LONG = struct.Struct("<BxxxxxxxQ")  # a result too long for the master's buffer follows on its own tag: its length


class WireError(ValueError):
    """A message that is not a well-formed result."""


_structs: dict[int, struct.Struct] = {}


def _floats(n: int) -> struct.Struct:
    """``n`` float64, little-endian (one compiled struct per length)."""
    s = _structs.get(n)
    if s is None:
        s = struct.Struct(f"<{n}d")
        if len(_structs) < 1024:
            _structs[n] = s
    return s


def pack_result(task_id: int, ev: Evaluation, offer: list | None) -> bytes:
    """A result's header (no payload) and the payload's array specs it offers, if any."""
    status = ev.status.encode()
    metrics = ev.metrics
    names = "\0".join(metrics).encode()
    message = ev.message.encode()
    offered = json.dumps(offer, separators=(",", ":")).encode() if offer else b""
    curve = ev.curve
    head = _RESULT_HEAD.pack(RESULT_MARK, len(status), len(metrics), len(curve), len(names), len(message), len(offered),
                             task_id, ev.fitness, ev.seconds, ev.epochs_done)
    return b"".join((head, _floats(len(metrics) + len(curve)).pack(*metrics.values(), *curve), status, names, message, offered))


def long_marker(size: int) -> bytes:
    """What goes in place of a result longer than the master's buffer: the length that follows."""
    return _LONG.pack(LONG_MARK, size)


def long_size(message, count: int) -> int | None:
    """The length a :func:`long_marker` announces, or None if ``message`` (``count`` bytes) is not one."""
    if count == _LONG.size and message[0] == LONG_MARK:
        return _LONG.unpack_from(message)[1]
    return None


_texts: dict[bytes, tuple[str, tuple[str, ...]]] = {}  # status and metric names as sent -> as decoded (a few kinds)


def unpack_result(message, count: int) -> tuple[int, Evaluation, list | None]:
    """(task id, evaluation without payload, offered array specs or None) of the first ``count`` bytes of
    ``message``, made by :func:`pack_result`."""
    if count < _RESULT_HEAD.size or message[0] != RESULT_MARK:
        raise WireError(f"not a result message ({count} bytes)")
    _, n_status, n_metrics, n_curve, n_names, n_message, n_offer, task_id, fitness, seconds, epochs = _RESULT_HEAD.unpack_from(message)
    at = _RESULT_HEAD.size + 8 * (n_metrics + n_curve)
    named = at + n_status + n_names
    if count != named + n_message + n_offer:
        raise WireError(f"a result message of {count} bytes does not add up")
    values = _floats(n_metrics + n_curve).unpack_from(message, _RESULT_HEAD.size)
    raw = bytes(message[at:named])
    try:
        texts = _texts.get(raw)
        if texts is None:
            names = raw[n_status:]
            texts = (raw[:n_status].decode(), tuple(names.decode().split("\0")) if names else ())
            if len(texts[1]) != n_metrics:
                raise WireError(f"a result message names {len(texts[1])} metrics and holds {n_metrics}")
            if len(_texts) < 256:
                _texts[raw] = texts
        text = bytes(message[named:named + n_message]).decode() if n_message else ""
        offer = _offer(bytes(message[named + n_message:count])) if n_offer else None
    except UnicodeDecodeError as exc:
        raise WireError(f"a result message with text that is not UTF-8 ({exc.reason})") from None
    status, names = texts
    metrics = dict(zip(names, values)) if n_metrics else {}
    return task_id, Evaluation(status, fitness, metrics, seconds, epochs, text, list(values[n_metrics:])), offer


def _offer(raw: bytes) -> list:
    """Array specs (name, shape, dtype) from JSON, checked to be just that."""
    try:
        specs = json.loads(raw)
    except ValueError as exc:
        raise WireError(f"a result's offer is not JSON ({exc})") from None
    if not isinstance(specs, list) or not specs:
        raise WireError("a result's offer is not a list of array specs")
    out = []
    for spec in specs:
        if not (isinstance(spec, list) and len(spec) == 3 and isinstance(spec[0], str) and isinstance(spec[2], str)
                and isinstance(spec[1], list) and all(isinstance(n, int) and n >= 0 for n in spec[1])):
            raise WireError(f"a result's offer holds {spec!r}, not (name, shape, dtype)")
        out.append((spec[0], tuple(spec[1]), spec[2]))
    return out

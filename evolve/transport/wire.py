"""A result's header as a compact binary message, laid out from :class:`ensemble.results.Outcome`'s fields.

The master takes one per evaluation, so it is never pickled. The message is a fixed ``struct``
(a marker, the task id, the offer's length, then per field of the outcome: a number for a scalar
field; a byte length for a string; a count for a list of floats; a count and a byte length for
named floats), then every float of the outcome as float64, then the strings (UTF-8; the names of
named floats ``\\0``-joined), then the payload the worker offers (its array specs as JSON).

Decoding reads numbers and UTF-8 text only, so it executes nothing; a message that is not one (a
wrong marker, lengths that do not add up, text that is not UTF-8, an offer that is not a list of
specs) raises :class:`WireError` naming what is wrong.
"""
from __future__ import annotations

import json
import struct
from functools import lru_cache

from ensemble.results import Evaluation, Outcome, kinds

RESULT_MARK, LONG_MARK = 0xE1, 0xE2

_FIELDS = tuple(kinds(Outcome).items())
_CODES = {"integer": "q", "real": "d", "label": "I", "text": "I", "reals": "I", "named": "HI"}
_HEAD = struct.Struct("<BqI" + "".join(_CODES[kind] for _, kind in _FIELDS))  # mark, task id, offer bytes, the fields
# the fixed header's slots after the offer's length: which hold counts of floats, which byte lengths of text
_SLOTS = [slot for _, kind in _FIELDS for slot in (("floats", "text") if kind == "named" else (kind,))]
_FLOAT_SLOTS = [i for i, slot in enumerate(_SLOTS) if slot in ("reals", "floats")]
_TEXT_SLOTS = [i for i, slot in enumerate(_SLOTS) if slot in ("label", "text")]
# each field's kind as unpack_result branches on it (one test a field, by identity)
_NUMBER, _TEXT, _REALS, _NAMED = "number", "text", "reals", "named"
_UNPACK = tuple((name, {"integer": _NUMBER, "real": _NUMBER, "label": _TEXT, "text": _TEXT, "reals": _REALS}.get(kind, _NAMED))
                for name, kind in _FIELDS)
_LONG = struct.Struct("<BxxxxxxxQ")  # a result too long for the master's buffer follows on its own tag: its length


class WireError(ValueError):
    """A message that is not a well-formed result."""


@lru_cache(maxsize=64)
def _floats(n: int) -> struct.Struct:
    """``n`` float64, little-endian (a result's count is one of a few: kept, not compiled again for each)."""
    return struct.Struct(f"<{n}d")


def pack_result(task_id: int, ev: Evaluation, offer: list | None) -> bytes:
    """A result's header (no payload) and the payload's array specs it offers, if any."""
    head, floats, texts = [], [], []
    for name, kind in _FIELDS:
        value = getattr(ev, name)
        if kind in ("integer", "real"):
            head.append(value)
        elif kind in ("label", "text"):
            texts.append(value.encode())
            head.append(len(texts[-1]))
        elif kind == "reals":
            head.append(len(value))
            floats.extend(value)
        else:  # named
            texts.append("\0".join(value).encode())
            head += [len(value), len(texts[-1])]
            floats.extend(value.values())
    offered = json.dumps(offer, separators=(",", ":")).encode() if offer else b""
    return b"".join((_HEAD.pack(RESULT_MARK, task_id, len(offered), *head), _floats(len(floats)).pack(*floats), *texts, offered))


def long_marker(size: int) -> bytes:
    """What goes in place of a result longer than the master's buffer: the length that follows."""
    return _LONG.pack(LONG_MARK, size)


def long_size(message, count: int) -> int | None:
    """The length a :func:`long_marker` announces, or None if ``message`` (``count`` bytes) is not one."""
    if count == _LONG.size and message[0] == LONG_MARK:
        return _LONG.unpack_from(message)[1]
    return None


def unpack_result(message, count: int) -> tuple[int, Evaluation, list | None]:
    """(task id, evaluation without payload, offered array specs or None) of the first ``count`` bytes of
    ``message``, made by :func:`pack_result`."""
    if count < _HEAD.size or message[0] != RESULT_MARK:
        raise WireError(f"not a result message ({count} bytes)")
    _, task_id, n_offer, *head = _HEAD.unpack_from(message)
    n_floats, text_bytes = sum(map(head.__getitem__, _FLOAT_SLOTS)), sum(map(head.__getitem__, _TEXT_SLOTS))
    at = _HEAD.size + 8 * n_floats
    if count != at + text_bytes + n_offer:
        raise WireError(f"a result message of {count} bytes does not add up")
    floats = _floats(n_floats).unpack_from(message, _HEAD.size)
    values, head_at, float_at = {}, 0, 0
    try:
        for name, kind in _UNPACK:
            if kind is _NUMBER:
                values[name] = head[head_at]
            elif kind is _TEXT:
                end = at + head[head_at]
                values[name] = str(message[at:end], "utf-8")
                at = end
            elif kind is _REALS:
                end = float_at + head[head_at]
                values[name] = list(floats[float_at:end])
                float_at = end
            else:  # named: a count, then the names' byte length
                n, n_bytes = head[head_at], head[head_at + 1]
                names = str(message[at:at + n_bytes], "utf-8").split("\0") if n_bytes else []
                if len(names) != n:
                    raise WireError(f"a result message names {len(names)} {name} and holds {n}")
                values[name] = dict(zip(names, floats[float_at:float_at + n]))
                at, float_at, head_at = at + n_bytes, float_at + n, head_at + 1
            head_at += 1
        offer = _offer(bytes(message[at:count])) if n_offer else None
    except UnicodeDecodeError as exc:
        raise WireError(f"a result message with text that is not UTF-8 ({exc.reason})") from None
    return task_id, Evaluation(**values), offer


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

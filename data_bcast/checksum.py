"""The CRC-32 of the data plane: ISA-L's when the optional ``isal`` package is installed (several
times faster; see docs/measurements/data-plane-notes.md), else zlib's. Both compute the same
standard CRC-32, so fingerprints and chunk checks agree whichever a rank has.

``crc32_combine(a, b, n)`` is the CRC-32 of two pieces joined, from the CRC-32s of each (``n``: the
second's length), as zlib's C function of that name computes it: so a chunk is checksummed once,
in pieces by several threads if need be, and its array's running CRC follows without a second
pass over the bytes. :func:`fingerprint` names the data a broadcast sent by its arrays' CRC-32s.
"""
import zlib

try:
    from isal.isal_zlib import crc32, crc32_combine
except ImportError:  # pragma: no cover - depends on what is installed
    from zlib import crc32

    crc32_combine = None

__all__ = ["crc32", "crc32_combine", "crc32_combine_python", "fingerprint"]

_POLY = 0xEDB88320  # CRC-32's polynomial, bit-reversed


def _times(matrix: list[int], vector: int) -> int:
    """A 32x32 matrix over GF(2) (one int per column) times a 32-bit vector."""
    total, i = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[i]
        vector >>= 1
        i += 1
    return total


def _square(matrix: list[int]) -> list[int]:
    return [_times(matrix, column) for column in matrix]


# _ZEROS[k] appends 2**k zero bytes to a CRC register: the operator for one zero bit, squared 3 + k times.
_ZEROS: list[list[int]] = []
_op = [_POLY] + [1 << n for n in range(31)]
for _ in range(3):
    _op = _square(_op)
for _ in range(64):
    _ZEROS.append(_op)
    _op = _square(_op)
del _op


def crc32_combine_python(crc1: int, crc2: int, len2: int) -> int:
    """zlib's ``crc32_combine``: the CRC-32 of A + B from ``crc1`` (A's), ``crc2`` (B's) and ``len2 = len(B)``."""
    if len2 < 0:
        raise ValueError("len2 must not be negative")
    k = 0
    while len2:
        if len2 & 1:
            crc1 = _times(_ZEROS[k], crc1)
        len2 >>= 1
        k += 1
    return crc1 ^ crc2


if crc32_combine is None:  # pragma: no cover - depends on what is installed
    crc32_combine = crc32_combine_python


def fingerprint(crcs: dict[str, int]) -> str:
    """One string for the data sent: each array's name and CRC-32 (independent of the chunking)."""
    return zlib.crc32(";".join(f"{name}={crc:08x}" for name, crc in sorted(crcs.items())).encode()).to_bytes(4, "big").hex() + \
        f"-{len(crcs)}"

"""Synthetic datasets where the architecture matters, generated deterministically from a seed.

What identifies a class sits at a random place in the sample, among distractors, so that
translation-invariant features (convolutions with pooling or a global average) win over a flat MLP.
``evens make-signals`` and ``evens make-shapes`` write them in the evens format; bench_quality.py
measures the search on them.

=================  ==============  =========  ==================
name               sample shape    classes    default train / val / test
=================  ==============  =========  ==================
signals            (2, 128)        5          1000 / 500 / 1500
shapes             (1, 16, 16)     6          1000 / 500 / 1500
=================  ==============  =========  ==================

Each split is drawn from its own stream of the seed (``numpy.random.default_rng([seed, split])``),
so the test split does not change when the training split's size does.
"""
from __future__ import annotations

import math

import numpy as np

from .h5file import write_dataset

SPLIT_SIZES = {"train": 1000, "val": 500, "test": 1500}
SPLIT_STREAMS = {"train": 0, "val": 1, "test": 2}


# ------------------------------------------------------------------------------------------ 1-D signals

SIGNAL_CLASSES = ("slow burst", "fast burst", "chirp", "doublet", "coincident slow bursts")


def _burst(t: np.ndarray, period: float, width: float, phase: float) -> np.ndarray:
    """A sine of ``period`` samples under a Gaussian envelope of standard deviation ``width``, centred at t = 0."""
    return np.exp(-0.5 * (t / width) ** 2) * np.sin(2 * math.pi * t / period + phase)


def _chirp(t: np.ndarray, width: float, phase: float) -> np.ndarray:
    """A burst whose period falls from 14 to 4 samples across the envelope (a rising frequency)."""
    period = np.clip(9.0 - 5.0 * t / (2 * width), 4.0, 14.0)
    return np.exp(-0.5 * (t / width) ** 2) * np.sin(2 * math.pi * np.cumsum(1.0 / period) + phase)


def _pulse(t: np.ndarray, width: float = 1.5) -> np.ndarray:
    return np.exp(-0.5 * (t / width) ** 2)


def make_signals(n: int, rng: np.random.Generator, channels: int = 2, length: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """``n`` two-channel signals of ``length`` samples, float32 (n, channels, length), and labels 0-4 (balanced, shuffled).

    Each sample is made as follows (t in samples, c0 a uniform position in [24, length - 24)):

    1. Background in every channel: white Gaussian noise (standard deviation 0.25) plus a slow drift,
       a random walk (steps of standard deviation 0.05) smoothed by a 16-sample moving average, centred.
    2. The class's motif, at c0, in one channel chosen at random (class 4: in both), times a random
       amplitude in [0.6, 1.4] (drawn per channel), with a random phase:

       * 0 slow burst: a sine of period 12 under a Gaussian envelope of standard deviation 7;
       * 1 fast burst: the same with period 5;
       * 2 chirp: the envelope of 0 with a period that falls from 14 to 4 across it;
       * 3 doublet: two narrow pulses (standard deviation 1.5) of one random sign, 10 samples apart;
       * 4 coincident slow bursts: class 0's burst in both channels at the same place.

    3. Three distractors anywhere in the signal, each in a random channel and the same for every
       class: a wide bump (a Gaussian of standard deviation 6-12, amplitude +-[0.5, 1.2]), a single
       narrow pulse (amplitude +-[0.6, 1.4]), or a slow burst's half-sized cousin, a sine of period 8
       under an envelope of standard deviation 3 (amplitude [0.4, 0.9]): too short and of the wrong
       period to be a class motif, but close enough to fool a detector that looks at one place.

    A flat MLP must learn each motif at every position from 200 examples per class; a convolution
    with pooling or a global average learns it once.
    """
    if channels < 2:
        raise ValueError("the signal task needs two channels (class 4 is two coincident bursts)")
    y = rng.permutation(np.arange(n) % len(SIGNAL_CLASSES)).astype(np.int64)
    t = np.arange(length, dtype=np.float64)
    x = 0.25 * rng.standard_normal((n, channels, length))
    walk = np.cumsum(0.05 * rng.standard_normal((n, channels, length + 15)), axis=-1)
    sums = np.concatenate([np.zeros((n, channels, 1)), np.cumsum(walk, axis=-1)], axis=-1)
    drift = (sums[..., 16:] - sums[..., :-16]) / 16  # the walk's 16-sample moving average
    x += drift - drift.mean(axis=-1, keepdims=True)
    for i in range(n):
        c0 = rng.uniform(24, length - 24)
        u = t - c0
        phase = rng.uniform(0, 2 * math.pi)
        amp = rng.uniform(0.6, 1.4, size=channels)
        ch = int(rng.integers(channels))
        label = y[i]
        if label == 0:
            x[i, ch] += amp[ch] * _burst(u, 12.0, 7.0, phase)
        elif label == 1:
            x[i, ch] += amp[ch] * _burst(u, 5.0, 7.0, phase)
        elif label == 2:
            x[i, ch] += amp[ch] * _chirp(u, 7.0, phase)
        elif label == 3:
            x[i, ch] += amp[ch] * rng.choice((-1.0, 1.0)) * (_pulse(u + 5.0) + _pulse(u - 5.0))
        else:
            for c in range(channels):
                x[i, c] += amp[c] * _burst(u, 12.0, 7.0, phase)
        for _ in range(3):
            where, dch, kind = rng.uniform(0, length), int(rng.integers(channels)), int(rng.integers(3))
            v = t - where
            if kind == 0:
                x[i, dch] += rng.choice((-1.0, 1.0)) * rng.uniform(0.5, 1.2) * np.exp(-0.5 * (v / rng.uniform(6, 12)) ** 2)
            elif kind == 1:
                x[i, dch] += rng.choice((-1.0, 1.0)) * rng.uniform(0.6, 1.4) * _pulse(v)
            else:
                x[i, dch] += rng.uniform(0.4, 0.9) * _burst(v, 8.0, 3.0, rng.uniform(0, 2 * math.pi))
    return x.astype(np.float32), y


# ------------------------------------------------------------------------------------------ small images

SHAPE_CLASSES = ("cross", "ring", "bar", "L", "triangle", "square")
# Each shape as strokes (segments between points) in a unit frame centred on the origin, arms of length ~1.
_STROKES = {
    "cross": [((-1, 0), (1, 0)), ((0, -1), (0, 1))],
    "bar": [((-1, 0), (1, 0))],
    "L": [((-0.5, -1), (-0.5, 1)), ((-0.5, 1), (0.7, 1))],
    "triangle": [((0, -1), (0.9, 0.7)), ((0.9, 0.7), (-0.9, 0.7)), ((-0.9, 0.7), (0, -1))],
    "square": [((-0.75, -0.75), (0.75, -0.75)), ((0.75, -0.75), (0.75, 0.75)), ((0.75, 0.75), (-0.75, 0.75)), ((-0.75, 0.75), (-0.75, -0.75))],
}
STROKE_SIGMA = 0.55  # pixels: the width of a stroke's Gaussian profile


def _segment_distance(px: np.ndarray, py: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each pixel's distance to the segment from ``a`` to ``b`` (points in pixels)."""
    d = b - a
    s = np.clip(((px - a[0]) * d[0] + (py - a[1]) * d[1]) / max(float(d @ d), 1e-9), 0.0, 1.0)
    return np.hypot(px - a[0] - s * d[0], py - a[1] - s * d[1])


def _stroke(distance: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * (distance / STROKE_SIGMA) ** 2)


def make_shapes(n: int, rng: np.random.Generator, side: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """``n`` grey images of ``side`` x ``side`` pixels, float32 (n, 1, side, side), and labels 0-5 (balanced, shuffled).

    Each image is made as follows (coordinates in pixels, pixel centres at 0.5, 1.5, ...):

    1. The class's shape, drawn as strokes with a Gaussian profile (standard deviation 0.55 pixels,
       the brightest stroke at each pixel counts): a cross (+), a ring (circle outline), a bar, an L,
       a triangle outline or a square outline, made at unit size (arms of length 1), then mirrored
       left-right with probability 1/2, rotated by a uniform angle, scaled by a half-size in [3.5, 5.5]
       pixels (the ring's radius is 0.8 of it) and centred at a uniform point that keeps it at least
       one pixel inside the image. Its brightness is uniform in [0.6, 1.1].
    2. Two distractor strokes anywhere: short segments of length 1.5-3.5 pixels at any angle,
       brightness [0.3, 0.9] (a bar is at least 6 pixels long).
    3. White Gaussian noise of standard deviation 0.15 on every pixel.

    A flat MLP sees each shape at a new place and angle; a convolution with pooling sees strokes,
    corners and crossings wherever they are.
    """
    y = rng.permutation(np.arange(n) % len(SHAPE_CLASSES)).astype(np.int64)
    py, px = np.mgrid[0:side, 0:side].astype(np.float64) + 0.5
    x = np.zeros((n, 1, side, side))
    for i in range(n):
        name = SHAPE_CLASSES[y[i]]
        half = rng.uniform(3.5, 5.5)
        centre = rng.uniform(half + 1.0, side - half - 1.0, size=2)
        angle = rng.uniform(0, 2 * math.pi)
        rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
        mirror = np.array([-1.0, 1.0]) if rng.random() < 0.5 else np.ones(2)
        if name == "ring":
            ink = _stroke(np.abs(np.hypot(px - centre[0], py - centre[1]) - 0.8 * half))
        else:
            ink = np.zeros((side, side))
            for a, b in _STROKES[name]:
                a, b = ((rot @ (np.asarray(p, dtype=np.float64) * mirror)) * half + centre for p in (a, b))
                ink = np.maximum(ink, _stroke(_segment_distance(px, py, a, b)))
        image = rng.uniform(0.6, 1.1) * ink
        for _ in range(2):
            start, theta, size = rng.uniform(0, side, size=2), rng.uniform(0, 2 * math.pi), rng.uniform(1.5, 3.5)
            end = start + size * np.array([math.cos(theta), math.sin(theta)])
            image = np.maximum(image, rng.uniform(0.3, 0.9) * _stroke(_segment_distance(px, py, start, end)))
        x[i, 0] = image + 0.15 * rng.standard_normal((side, side))
    return x.astype(np.float32), y


def write_generated(dst: str, make, seed: int = 0, sizes: dict[str, int] = SPLIT_SIZES, overwrite: bool = False) -> dict[str, int]:
    """``make(n, rng)`` for each split, from its own stream of ``seed``, written to ``dst``; the split sizes."""
    write_dataset(dst, {split: make(n, np.random.default_rng([seed, SPLIT_STREAMS[split]])) for split, n in sizes.items()}, overwrite=overwrite)
    return dict(sizes)


def write_signals(dst: str, seed: int = 0, overwrite: bool = False) -> dict[str, int]:
    """The signal task (:func:`make_signals`), as ``evens make-signals`` writes it."""
    return write_generated(dst, make_signals, seed, overwrite=overwrite)


def write_shapes(dst: str, seed: int = 0, overwrite: bool = False) -> dict[str, int]:
    """The small-image task (:func:`make_shapes`), as ``evens make-shapes`` writes it."""
    return write_generated(dst, make_shapes, seed, overwrite=overwrite)

"""Per-sample seeds: counter-based random numbers that do not depend on how a batch is cut.

A sampler seeded once per batch (``torch.manual_seed(seed)`` before ``generate``) draws every
row's random numbers from one stream, so a row's sample depends on which other rows share its
batch and in which order. Where each sample must be reproducible on its own (the credit
instrument's continuations, :mod:`g2po_bench.analysis.credit`, which are cut into batches as
memory allows), each sample carries its own 64-bit seed and every random number it needs is a
pure function of (seed, counter):

- :func:`mix_seed` combines integers into one 63-bit seed (e.g. a continuation's seed and the
  step index);
- :func:`uniforms` turns seeds and a counter (e.g. the token index inside a response) into
  uniforms in [0, 1), one per seed.

The mixing function is SplitMix64's finaliser (Steele, Lea and Flood, "Fast splittable
pseudorandom number generators", OOPSLA 2014; the constants of Vigna's ``splitmix64.c``),
applied to a running 64-bit state; numpy ``uint64`` arithmetic wraps modulo 2^64 as the
algorithm requires. Not a cryptographic generator; its outputs pass BigCrush when used as a
stream, which is ample for sampling tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["mix_seed", "uniforms", "text_seed"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK63 = (1 << 63) - 1


def _finalise(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def _mix_arrays(state: np.ndarray, value: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return _finalise(state + _GOLDEN + _finalise(value + _GOLDEN))


def mix_seed(*values: int) -> int:
    """One non-negative 63-bit seed from any number of integers (order matters).

    ``mix_seed(a, b) != mix_seed(b, a)`` in general; negative integers and integers of any size
    are reduced modulo 2^64 first.

    Returns:
        int in [0, 2^63).

    Raises:
        ValueError: no value given.
    """
    if not values:
        raise ValueError("mix_seed needs at least one integer")
    state = np.zeros(1, dtype=np.uint64)
    for v in values:
        state = _mix_arrays(state, np.array([int(v) % (1 << 64)], dtype=np.uint64))
    return int(state[0]) & _MASK63


def text_seed(text: str) -> int:
    """A stable 63-bit integer for a string (BLAKE2b, 8 bytes), for seeds keyed by names
    (task ids, action sequences); stable across processes and Python versions."""
    import hashlib

    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little") & _MASK63


def uniforms(seeds: Sequence[int] | Iterable[int] | np.ndarray, counter: int) -> np.ndarray:
    """One uniform number in [0, 1) per seed, a pure function of (seed, counter).

    Args:
        seeds: (n,) non-negative integers (e.g. :func:`mix_seed` outputs).
        counter: which draw of each seed's stream (e.g. the token index, 0-based).

    Returns:
        (n,) float64 in [0, 1) with 53 random bits each.
    """
    s = np.asarray([int(x) % (1 << 64) for x in seeds], dtype=np.uint64)
    c = np.full(s.shape, int(counter) % (1 << 64), dtype=np.uint64)
    bits = _mix_arrays(s, c)
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))

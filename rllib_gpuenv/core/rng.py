"""Counter-based random numbers for initial states, identical on every backend.

A stateful generator (numpy's, torch's, cuRAND's) gives different numbers on different devices.
Here the starting state of an episode is a pure function of ``(seed, env_index, episode,
component)``: a 32-bit integer hash (murmur3's finaliser, chained), turned into a float64 in
``[low, high)``. Any backend computes the same bits from the same counters, so an experiment
run on the GPU can be replayed exactly on a laptop, and no random state has to live on the
device: each environment only keeps its episode counter.

The hash is the same for Python ints, int64 torch tensors and int64 numba values: each is exact
modulo 2**32 (``mul32``).
"""

from __future__ import annotations

from rllib_gpuenv.core.jit import jitable

MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9  # 2**32 / golden ratio, spreads the component index over 32 bits
_INV_2_32 = 1.0 / 4294967296.0


def _numba_mul32(a, c):
    high = ((a * (c >> 16)) & 0xFFFF) << 16
    return (high + a * (c & 0xFFFF)) & MASK32


@jitable(numba_body=_numba_mul32)
def mul32(a, c):
    """``(a * c) mod 2**32`` for ``a, c < 2**32``. One product on tensors and Python ints: a Python
    int is exact, and torch's int64 product keeps the low 64 bits where it passes 2**63 (two's
    complement, on the CPU and on CUDA), of which the mask keeps 32. Kernels split the product in
    two below 2**48 instead (six ops, not two): compiled code may assume that an int64 never
    overflows."""
    return (a * c) & MASK32


@jitable
def mix32(h):
    """murmur3's 32-bit finaliser: a bijection on [0, 2**32) with full avalanche."""
    h = h ^ (h >> 16)
    h = mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


@jitable
def env_bits(seed32, env_index, component):
    """The hash of one state component of one environment before its episode is mixed in: the
    same for every episode, so code on whole tensors computes it once per seed (the torch backend;
    ``core.step.DrawConstants``) and a step only finishes it (``episode_bits``)."""
    h = mix32((seed32 + mul32(_GOLDEN, component + 1)) & MASK32)
    return mix32(h ^ (env_index & MASK32))


@jitable
def episode_bits(bits, episode):
    """``env_bits`` finished with the episode counter: 32 random bits for that episode."""
    return mix32(bits ^ (episode & MASK32))


@jitable
def reset_bits(seed32, env_index, episode, component):
    """32 random bits for one state component of one episode of one environment."""
    return episode_bits(env_bits(seed32, env_index, component), episode)


@jitable
def bits_to_uniform(bits, low, high):
    """Map 32 random bits (as a float64 value) to a float64 in ``[low, high)``."""
    return low + (high - low) * (bits * _INV_2_32)


def fold_seed(seed: int) -> int:
    """Fold any Python int seed into the 32 bits the hash takes: a seed below 2**32 is itself; each
    further 32-bit word is mixed in after a hash of those before, offset so that zero words count
    too (``k * 2**32`` is not ``k``)."""
    seed = int(seed)
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed}")
    folded = 0
    while True:
        folded ^= seed & MASK32
        seed >>= 32
        if not seed:
            return folded
        folded = mix32((folded + _GOLDEN) & MASK32)

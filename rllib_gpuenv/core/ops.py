"""The elementwise primitives env definitions are written with.

Each runs on whole torch tensors (the torch backend) and on one env's numbers inside numba CPU
and CUDA kernels (``jit.jitable``). Arithmetic and comparisons need nothing: ``+``, ``*``, ``<``,
``&``, ``%`` mean the same on tensors and on kernel scalars (``%`` takes the divisor's sign on
both, as Python and numpy do). What is spelled differently on the two is here:

* ``select(c, a, b)``: ``a`` where ``c``, else ``b`` (``torch.where``; a conditional in kernels).
  Env code never branches on state: a tensor has no single truth value, and a branch-free
  kernel vectorises.
* ``sin``, ``cos``: libm in float64 (what numpy calls, so float64 envs match gymnasium bit for
  bit; on tensors too, on the CPU), a branch-free polynomial in float32 kernels (see
  ``_quadrant_polynomials``), torch's on other tensors.
* ``clip(x, low, high)``: ``np.clip`` of one number.
* ``square(x)``: ``x**2`` exactly as gymnasium's numpy scalars compute it (C's ``pow``).
* ``to_float(n)``: an integer as the kernel's float type. numba types an integer mixed with a
  float32 as float64, so float32 kernels need it said (they make it a float32).
* ``to_float32(x)``: ``x`` rounded to float32, for envs whose gymnasium version keeps float32
  numbers in its state (an exact float32 operation is a float64 operation rounded once).
* ``wrap(x, low, high)``: gymnasium's ``wrap``, shifting by whole periods one at a time.
* ``to_int(x)``: a whole-numbered float as an integer, to index an array with.
* ``get(array, index)`` and ``put(array, index, value)``: one element of an env's own array
  (``EnvDef.array_shape``) at a per-env ``index`` (a tuple of integers). On tensors the array
  is ``(*array_shape, N)`` and each env reads and writes its own element; in kernels it is the
  env's ``array_shape`` view. ``put`` writes the element in place on both (the core hands
  ``step`` an array of its own) and returns the array: write ``grid = put(grid, (y, x), 1.0)``.
  (A constant index needs no ``get``: ``grid[0, 3]`` reads the same on both.)
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math

import numpy as np
import torch

from rllib_gpuenv.core.jit import float_floor, jitable


def _numba_select(c, a, b):
    return a if c else b


@jitable(numba_body=_numba_select)
def select(c, a, b):
    """``a`` where ``c`` holds, else ``b``."""
    if not isinstance(c, torch.Tensor):  # a condition on parameters
        return a if c else b
    return torch.where(c, a, b)


def _numba_clip(x, low, high):
    return min(max(x, low), high)


@jitable(numba_body=_numba_clip)
def clip(x, low, high):
    """``x`` limited to ``[low, high]`` (``np.clip``)."""
    return torch.clamp(x, low, high)


FLOAT = np.float64  # the kernel's float type: float32 kernels see np.float32 (jit.single_precision)


def _numba_to_float(n):
    return FLOAT(n)  # not float(): numba's float() keeps a float32 a float32


_TENSOR_FLOAT: contextvars.ContextVar[torch.dtype] = contextvars.ContextVar("tensor_float", default=torch.float64)


@contextlib.contextmanager
def tensor_float(dtype: torch.dtype):
    """Within: ``to_float`` makes tensors of ``dtype`` (the torch backend's step)."""
    token = _TENSOR_FLOAT.set(dtype)
    try:
        yield
    finally:
        _TENSOR_FLOAT.reset(token)


@jitable(numba_body=_numba_to_float)
def to_float(n):
    """An integer (tensor) as a float, in the step's precision."""
    return n.to(_TENSOR_FLOAT.get()) if isinstance(n, torch.Tensor) else float(n)


def _numba_to_float32(x):
    # Back to the kernel's type: the same in compiled code, and under the CUDA simulator (plain
    # Python) a float32 would make later arithmetic with Python floats float32 (numpy's rules).
    return FLOAT(np.float32(x))


@jitable(numba_body=_numba_to_float32)
def to_float32(x):
    """``x`` rounded to the nearest float32 (kept in float64 where the rest of the step is)."""
    if not isinstance(x, torch.Tensor):  # a parameter
        return float(np.float32(x))
    return x.to(torch.float32).to(x.dtype)


# Cody-Waite split of pi/2 (fdlibm's pio2_1 and pio2_1t): k * _PIO2_HI is exact for |k| < 2**20.
_PIO2_HI = 1.57079632673412561417
_PIO2_LO = 6.07710050650619224932e-11
_TWO_OVER_PI = 0.63661977236758134308


@jitable
def _quadrant_polynomials(theta):
    """``theta = r + k * pi/2`` with ``r`` in [-pi/4, pi/4]: ``(sin(r), cos(r), k mod 4)``.

    Taylor polynomials in Horner form, accurate to float32 rounding for |theta| < 1e5 rad.
    libm's scalar sin and cos cost ~75 cycles per env on x86 and cannot be vectorised without
    Intel's SVML; this is branch-free arithmetic that LLVM vectorises. Floats throughout: AVX2
    has no vector float64 -> int64 conversion.
    """
    k = float_floor(theta * _TWO_OVER_PI + 0.5)
    r = (theta - k * _PIO2_HI) - k * _PIO2_LO
    r2 = r * r
    s = r * (1.0 + r2 * (-1.0 / 6 + r2 * (1.0 / 120 + r2 * (-1.0 / 5040 + r2 * (1.0 / 362880)))))
    c = 1.0 + r2 * (-0.5 + r2 * (1.0 / 24 + r2 * (-1.0 / 720 + r2 * (1.0 / 40320 + r2 * (-1.0 / 3628800)))))
    return s, c, k - 4.0 * float_floor(k * 0.25)


@jitable
def _poly_sin(theta):
    s, c, quadrant = _quadrant_polynomials(theta)
    odd = (quadrant == 1.0) | (quadrant == 3.0)
    return (-1.0 if quadrant >= 2.0 else 1.0) * (c if odd else s)


@jitable
def _poly_cos(theta):
    s, c, quadrant = _quadrant_polynomials(theta)
    odd = (quadrant == 1.0) | (quadrant == 3.0)
    return (-1.0 if (quadrant == 1.0) | (quadrant == 2.0) else 1.0) * (s if odd else c)


def _numba_sin(x):
    return math.sin(x)


def _numba_cos(x):
    return math.cos(x)


def _libm(numpy_fn, torch_fn, x):
    """float64 on the CPU: the C library's function, as numpy (and so gymnasium) calls it; torch's
    own vectorised one differs in the last bit for ~0.2% of inputs."""
    if x.dtype == torch.float64 and x.device.type == "cpu":
        return torch.from_numpy(np.asarray(numpy_fn(x.numpy())))
    return torch_fn(x)


@jitable(numba_body=_numba_sin, single=_poly_sin)
def sin(x):
    return _libm(np.sin, torch.sin, x)


@jitable(numba_body=_numba_cos, single=_poly_cos)
def cos(x):
    return _libm(np.cos, torch.cos, x)


_PY_POW = np.frompyfunc(pow, 2, 1)


@jitable
def _product_square(x):
    return x * x


@jitable(numba_body="rllib_gpuenv.core.libm:square", cuda_body=_product_square, single=_product_square)
def square(x):
    """``x**2`` as gymnasium computes it on numpy scalars: C's ``pow(x, 2.0)``, which differs from
    ``x * x`` in the last bit for ~0.1% of inputs (enough, in a chaotic system like Acrobot, to
    part trajectories). float64 on the CPU (kernels, and tensors: one Python call per element)
    calls C's pow; float32 and GPUs multiply."""
    if not isinstance(x, torch.Tensor):  # a parameter
        return x**2
    if x.dtype == torch.float64 and x.device.type == "cpu":
        return torch.from_numpy(np.asarray(_PY_POW(x.numpy(), 2.0), dtype=np.float64))
    return x * x


WRAP_PASSES_ON_GPU = 4  # whole periods a torch step on a GPU shifts at most (no host sync)


_GPU_CODE_PATHS: contextvars.ContextVar[bool] = contextvars.ContextVar("gpu_code_paths", default=False)


def host_reads_are_free(device: torch.device) -> bool:
    """Whether reading a value of a tensor on ``device`` back to Python costs nothing (the CPU),
    so that code may ask before it does work. On a GPU the read would wait for all queued work,
    so code there does the work without asking (and on the CPU too, within ``gpu_code_paths``)."""
    return device.type == "cpu" and not _GPU_CODE_PATHS.get()


@contextlib.contextmanager
def gpu_code_paths():
    """Within (in this thread): code on the CPU takes the GPU's way where the two differ
    (``host_reads_are_free``), so that a CPU can count what a GPU step runs (``rllib-gpuenv bench
    ops``) and check it."""
    token = _GPU_CODE_PATHS.set(True)
    try:
        yield
    finally:
        _GPU_CODE_PATHS.reset(token)


def _numba_wrap(x, low, high):
    diff = high - low
    while x > high:
        x = x - diff
    while x < low:
        x = x + diff
    return x


@jitable(numba_body=_numba_wrap)
def wrap(x, low, high):
    """gymnasium's ``wrap``: ``x`` moved into ``[low, high]`` by whole periods, one at a time
    (the same rounding as gymnasium, unlike one ``%``). On a GPU tensor at most
    ``WRAP_PASSES_ON_GPU`` periods, so that a step needs no host synchronisation."""
    diff = high - low
    passes = None if host_reads_are_free(x.device) else WRAP_PASSES_ON_GPU
    while passes is None or passes > 0:
        above, below = x > high, x < low
        if passes is None and not bool((above | below).any()):
            break
        x = torch.where(above, x - diff, torch.where(below, x + diff, x))
        passes = None if passes is None else passes - 1
    return x


def _numba_to_int(x):
    return int(x)


@jitable(numba_body=_numba_to_int)
def to_int(x):
    """A whole-numbered float (a grid position kept in the float state) as an integer index."""
    return x.long() if isinstance(x, torch.Tensor) else int(x)


@functools.lru_cache(maxsize=16)
def _env_numbers(num_envs: int, device: torch.device) -> torch.Tensor:
    return torch.arange(num_envs, device=device)


def _batch_index(array: torch.Tensor, index: tuple) -> tuple:
    """``index`` for ``(*shape, N)`` tensors: per-env positions as int64 (constant ones stay Python
    integers: no tensor to copy to a GPU), then each env's own column."""
    envs = _env_numbers(array.shape[-1], array.device)
    return (*(i.long() if isinstance(i, torch.Tensor) else int(i) for i in index), envs)


def _numba_get(array, index):
    return array[index]


@jitable(numba_body=_numba_get)
def get(array, index):
    """Element ``index`` (a tuple of integers, one per array dimension) of each env's array."""
    return array[_batch_index(array, index)]


def _numba_put(array, index, value):
    array[index] = value
    return array


@jitable(numba_body=_numba_put)
def put(array, index, value):
    """Element ``index`` of each env's array set to ``value``, in place; the array returned (use
    that one: a step's code reads as pure functions do, and runs as one env's in-place writes)."""
    if isinstance(value, torch.Tensor):
        value = value.to(array.dtype)
    else:  # filled on the device: a number made a tensor on the host would be copied over, and wait
        value = torch.full((), value, dtype=array.dtype, device=array.device)
    array[_batch_index(array, index)] = value
    return array

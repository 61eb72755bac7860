"""Write a function once, run it from Python, torch, numba CPU and numba CUDA.

A function marked ``@jitable`` stays a plain Python function (so torch code can call it on
tensors), and numba learns to compile it when it is called from any jitted function, on the
CPU (``njit``) or the GPU (``cuda.jit``): numba's ``overload`` with the ``generic`` target.

``single_precision`` gives a kernel whose float constants are float32. numba types every
Python float (a module constant like ``GRAVITY``, a literal like ``4.0 / 3.0``) as float64, and
float64 wins over float32 in arithmetic, so a kernel over float32 state would otherwise compute
in float64: half the vector lanes on a CPU, and 1/32 to 1/64 of the arithmetic rate on
consumer GPUs. Torch needs no such help: it keeps a float32 tensor float32 whatever Python
floats it meets.
"""

from __future__ import annotations

import types
from typing import Callable, TypeVar

import numpy as np

F = TypeVar("F", bound=Callable)

try:
    from numba.extending import overload as _overload
except ImportError:  # numba is a dependency, but keep the torch backend importable without it
    _overload = None

_JITABLE = "__rllib_gpuenv_jitable__"
_single_versions: dict[Callable, Callable] = {}


def jitable(fn: F) -> F:
    """Make ``fn`` callable from numba-compiled code on every target; return it unchanged."""
    if _overload is not None:
        _overload(fn, target="generic", strict=False, inline="always")(lambda *args: fn)
    setattr(fn, _JITABLE, True)
    return fn


def _single(value):
    """``value`` with its floats made float32, and jitable functions their float32 versions."""
    if type(value) is float:
        return np.float32(value)
    if isinstance(value, types.FunctionType) and getattr(value, _JITABLE, False):
        return single_precision(value)
    return value


def single_precision(fn: F) -> F:
    """A copy of ``fn`` for float32 kernels: its float literals and the floats it reads from
    globals or its closure are float32, and so, recursively, are those of the ``@jitable``
    functions it calls.

    Integers, arrays and arguments keep their types: a float64 argument still computes in
    float64, so the caller passes float32 numbers where it wants float32 arithmetic.
    """
    if fn in _single_versions:
        return _single_versions[fn]
    code = fn.__code__.replace(co_consts=tuple(_single(c) for c in fn.__code__.co_consts))
    names = set(code.co_names)
    fn_globals = {**fn.__globals__, **{k: _single(v) for k, v in fn.__globals__.items() if k in names}}
    closure = fn.__closure__ and tuple(types.CellType(_single(c.cell_contents)) for c in fn.__closure__)
    copy = types.FunctionType(code, fn_globals, fn.__name__, fn.__defaults__, closure)
    copy.__qualname__, copy.__module__ = fn.__qualname__, fn.__module__
    if getattr(fn, _JITABLE, False):
        jitable(copy)
    _single_versions[fn] = copy
    return copy

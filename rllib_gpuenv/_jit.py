"""Write a function once, run it from Python, torch, numba CPU and numba CUDA.

A function marked ``@jitable`` stays a plain Python function (so torch code can call it on
tensors), and numba's CPU compiler learns to compile it when a jitted function calls it
(numba's ``overload``). CUDA kernels get their own copy of the call tree instead
(``cuda_device_functions``): numba-cuda, numba's maintained CUDA target, keeps its own typing
registry and fails to lower overloads registered with numba's core (even ``a + 1`` inside one),
while ``cuda.jit(device=True)`` is understood by every numba CUDA target, the simulator included.

``single_precision`` gives a kernel whose float constants are float32. numba types every
Python float (a module constant like ``GRAVITY``, a literal like ``4.0 / 3.0``) as float64, and
float64 wins over float32 in arithmetic, so a kernel over float32 state would otherwise compute
in float64: half the vector lanes on a CPU, and 1/32 to 1/64 of the arithmetic rate on
consumer GPUs. Torch needs no such help: it keeps a float32 tensor float32 whatever Python
floats it meets.
"""

from __future__ import annotations

import math
import types
from typing import Any, Callable, TypeVar

import numpy as np

F = TypeVar("F", bound=Callable)

try:
    from numba.extending import overload as _overload
except ImportError:  # numba is a dependency, but keep the torch backend importable without it
    _overload = None

_JITABLE = "__rllib_gpuenv_jitable__"
_CUDA_BODY = "__rllib_gpuenv_cuda_body__"
_single_versions: dict[Callable, Callable] = {}
_cuda_versions: dict[Callable, Callable] = {}


def jitable(fn: F | None = None, *, cuda_body: Callable | None = None):
    """Make ``fn`` callable from numba-compiled CPU code; return it unchanged.

    ``cuda_body``: what CUDA kernels run instead, for the rare primitive that numba spells
    differently on the two targets (``float_floor``).
    """
    if fn is None:
        return lambda f: jitable(f, cuda_body=cuda_body)
    if _overload is not None:
        _overload(fn, target="cpu", strict=False, inline="always")(lambda *args: fn)
    setattr(fn, _JITABLE, True)
    if cuda_body is not None:
        setattr(fn, _CUDA_BODY, cuda_body)
    return fn


def _cuda_floor(x):
    return math.floor(x)  # numba CUDA's math.floor keeps the float type (numba CPU's gives an int)


@jitable(cuda_body=_cuda_floor)
def float_floor(x):
    """``floor(x)`` as a float on every target. numba CPU's ``math.floor`` returns an integer
    (and AVX2 cannot convert float64 vectors to int64), numba-cuda has no ``np.floor``."""
    return np.floor(x)


def _is_jitable(value: Any) -> bool:
    return isinstance(value, types.FunctionType) and getattr(value, _JITABLE, False)


def _rebind(fn: F, value: Callable[[Any], Any], const: Callable[[Any], Any] = lambda c: c) -> F:
    """A copy of ``fn`` whose globals and closure values pass through ``value`` and whose
    literals pass through ``const``."""
    code = fn.__code__.replace(co_consts=tuple(const(c) for c in fn.__code__.co_consts))
    names = set(code.co_names)
    fn_globals = {**fn.__globals__, **{k: value(v) for k, v in fn.__globals__.items() if k in names}}
    closure = fn.__closure__ and tuple(types.CellType(value(c.cell_contents)) for c in fn.__closure__)
    copy = types.FunctionType(code, fn_globals, fn.__name__, fn.__defaults__, closure)
    copy.__qualname__, copy.__module__ = fn.__qualname__, fn.__module__
    return copy


def _single(value):
    """``value`` with its floats made float32, and jitable functions their float32 versions."""
    if type(value) is float:
        return np.float32(value)
    return single_precision(value) if _is_jitable(value) else value


def single_precision(fn: F) -> F:
    """A copy of ``fn`` for float32 kernels: its float literals and the floats it reads from
    globals or its closure are float32, and so, recursively, are those of the ``@jitable``
    functions it calls.

    Integers, arrays and arguments keep their types: a float64 argument still computes in
    float64, so the caller passes float32 numbers where it wants float32 arithmetic.
    """
    if fn not in _single_versions:
        copy = _rebind(fn, _single, const=_single)
        if _is_jitable(fn):
            body = getattr(fn, _CUDA_BODY, None)
            copy = jitable(copy, cuda_body=body and single_precision(body))
        _single_versions[fn] = copy
    return _single_versions[fn]


def _cuda_device_function(value):
    if not _is_jitable(value):
        return value
    from numba import cuda

    body = getattr(value, _CUDA_BODY, value)
    return cuda.jit(device=True)(cuda_device_functions(body))


def cuda_device_functions(fn: F) -> F:
    """A copy of ``fn`` for ``cuda.jit`` whose ``@jitable`` callees, recursively, are numba
    CUDA device functions."""
    if fn not in _cuda_versions:
        _cuda_versions[fn] = _rebind(fn, _cuda_device_function)
    return _cuda_versions[fn]

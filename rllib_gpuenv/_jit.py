"""Write a function once, run it from Python, torch, numba CPU and numba CUDA.

A function marked ``@jitable`` stays a plain Python function (so torch code can call it on
tensors), and numba learns to compile it when it is called from any jitted function, on the
CPU (``njit``) or the GPU (``cuda.jit``): numba's ``overload`` with the ``generic`` target.
"""

from __future__ import annotations

from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)

try:
    from numba.extending import overload as _overload
except ImportError:  # numba is a dependency, but keep the torch backend importable without it
    _overload = None


def jitable(fn: F) -> F:
    """Make ``fn`` callable from numba-compiled code on every target; return it unchanged."""
    if _overload is not None:
        _overload(fn, target="generic", strict=False, inline="always")(lambda *args: fn)
    return fn

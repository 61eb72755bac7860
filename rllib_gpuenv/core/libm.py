"""C math library functions that numba kernels call by a name LLVM does not rewrite.

gymnasium squares numpy scalars with ``x**2``, which calls C's ``pow(x, 2.0)``: within 1 ulp of
``x * x``, but not always the same number. LLVM turns a ``pow(x, 2.0)`` call into ``x * x``, so
float64 kernels call glibc's other name for it, ``powf64``; where the C library lacks that name,
``x * x``. Imported only by kernels (it imports numba).
"""

from __future__ import annotations

import ctypes
import ctypes.util

from numba import types


def _has(symbol: str) -> bool:
    try:
        return hasattr(ctypes.CDLL(ctypes.util.find_library("m")), symbol)
    except OSError:
        return False


HAS_POWF64 = _has("powf64")
_powf64 = types.ExternalFunction("powf64", types.float64(types.float64, types.float64))


def _pow_square(x):
    return _powf64(x, 2.0)


def _product_square(x):
    return x * x


square = _pow_square if HAS_POWF64 else _product_square

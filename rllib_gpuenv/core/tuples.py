"""Fixed-size tuple helpers, made once per size: what lets the core step handle any env's state.

Env functions take and return their state as a tuple (``x, x_dot, theta, theta_dot = state``),
which numba compiles to plain registers. Building a tuple of a size known only at kernel-build
time has no spelling in numba's Python subset, so these few helpers are written out for each
size from a template, e.g. for size 2::

    def load_state(state, array, i): return (state[0, i], state[1, i])  # then array[:, i] with an array
    def store_column(array, i, v):   array[0, i] = v[0]; array[1, i] = v[1]
    def load_row(array, i):          return (to_float(array[i, 0]), to_float(array[i, 1]))
    def select_each(c, a, b):        return (select(c, a[0], b[0]), select(c, a[1], b[1]))

They are ``@jitable``: numba inlines them, and ``select_each`` runs on tensors as well.

Envs with an array of their own (``EnvDef.array_shape``) keep it in a ``(*array_shape, N)``
buffer; kernels hand each env its view ``array[:, :, i]`` (``load_state`` ends with it), clear it at a reset
(``clear_column``) and copy an array observation into the ``(*obs_shape, N)`` output
(``store_array_column``), with one loop per dimension.
"""

from __future__ import annotations

import functools

from rllib_gpuenv.core.jit import jitable
from rllib_gpuenv.core.ops import select, to_float


def _make(name: str, args: str, body: str, size: int):
    source = f"def {name}({args}):\n    {body}\n"
    namespace = {"select": select, "to_float": to_float}
    exec(compile(source, f"<rllib_gpuenv.core.tuples.{name}[{size}]>", "exec"), namespace)  # noqa: S102
    return jitable(namespace[name])


def _tuple(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


@functools.cache
def store_column(size: int):
    """``array[k, i] = values[k]`` for every k."""
    body = "; ".join(f"array[{k}, i] = values[{k}]" for k in range(size))
    return _make("store_column", "array, i, values", body, size)


@functools.cache
def load_row(size: int):
    """``(to_float(array[i, 0]), ...)``: env ``i``'s row of a ``(N, size)`` array, in the
    kernel's float precision (float64, or float32 in float32 kernels)."""
    return _make("load_row", "array, i", "return " + _tuple([f"to_float(array[i, {k}])" for k in range(size)]), size)


@functools.cache
def select_each(size: int):
    """``select(c, a[k], b[k])`` for every k: a tuple of ``a`` where ``c``, else of ``b``."""
    return _make("select_each", "c, a, b", "return " + _tuple([f"select(c, a[{k}], b[{k}])" for k in range(size)]), size)


def _slice(ndim: int) -> str:
    return ", ".join([":"] * ndim)


@functools.cache
def load_state(size: int, ndim: int):
    """Env ``i``'s state as the env sees it: its ``size`` numbers, then (``ndim`` > 0) the view of
    its own ``ndim``-dimensional array."""
    items = [f"state[{k}, i]" for k in range(size)] + ([f"array[{_slice(ndim)}, i]"] if ndim else [])
    return _make("load_state", "state, array, i", "return " + _tuple(items), size)


def _loops(ndim: int, shape_of: str, statement: str) -> str:
    """``statement`` (over indices ``a0..``) nested in one loop per dimension of ``shape_of``."""
    lines = [" " * 4 * k + f"for a{k} in range({shape_of}.shape[{k}]):" for k in range(ndim)]
    return "\n    ".join([*lines, " " * 4 * ndim + statement])


@functools.cache
def clear_column(ndim: int):
    """``array[..., i] = 0``: env ``i``'s array zeroed (nothing for ``ndim`` 0)."""
    if ndim == 0:
        return _make("clear_column", "array, i", "return None", 0)
    index = ", ".join(f"a{k}" for k in range(ndim))
    return _make("clear_column", "array, i", _loops(ndim, "array", f"array[{index}, i] = 0"), ndim)


@functools.cache
def store_array_column(ndim: int):
    """``array[..., i] = values``: an env's array observation into the ``(*obs_shape, N)`` output."""
    index = ", ".join(f"a{k}" for k in range(ndim))
    return _make(
        "store_array_column", "array, i, values", _loops(ndim, "values", f"array[{index}, i] = values[{index}]"), ndim
    )

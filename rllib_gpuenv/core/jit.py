"""Write a function once, run it on torch tensors, in numba CPU kernels and in numba CUDA kernels.

A function marked ``@jitable`` stays a plain Python function, so the torch backend calls it on
whole tensors, and numba's CPU compiler learns to compile it where a kernel calls it (numba's
``overload``, a function of its own that LLVM always inlines; registered when a numba backend is
first used, ``use_numba``). CUDA kernels get their own copy of the call tree instead
(``cuda_device_functions``): numba-cuda keeps its own typing registry and fails to lower
overloads registered with numba's core, while ``cuda.jit(device=True)`` is understood by every
numba CUDA target, the simulator included.

A few primitives are spelled differently on tensors and in kernels (``select`` is
``torch.where`` on tensors and a conditional expression in a kernel): ``jitable(numba_body=...)``
gives the body kernels compile, ``cuda_body=`` the one CUDA kernels compile where that differs
again. Env definitions are written only in terms of such primitives and arithmetic, so the same
code runs everywhere.

``single_precision`` gives a kernel whose float constants are float32. numba types every Python
float (a module constant, a literal like ``4.0 / 3.0``) as float64, and float64 wins over
float32 in arithmetic, so a kernel over float32 state would otherwise compute in float64: half
the vector lanes on a CPU, and 1/32 to 1/64 of the arithmetic rate on consumer GPUs. Torch
needs no such help: it keeps a float32 tensor float32 whatever Python floats it meets.

``bind`` makes a copy of a function with some of its global names bound to other objects: the
core step is written once against the names ``ENV_STEP``, ``PARAMS``, ... and bound to one env
definition per kernel.
"""

from __future__ import annotations

import dis
import inspect
import math
import types
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

F = TypeVar("F", bound=Callable)

_NUMBA_BODY = "__rllib_gpuenv_numba_body__"
_CUDA_BODY = "__rllib_gpuenv_cuda_body__"
_SINGLE = "__rllib_gpuenv_single__"
_RETURNS_ARRAY = "__rllib_gpuenv_returns_array__"
_single_versions: dict[Callable, Callable] = {}
_cuda_versions: dict[Callable, Callable] = {}
_unregistered: list[Callable] | None = []  # None once numba knows every jitable


def _register_with_numba(fn: Callable) -> None:
    from numba.extending import overload

    body = _body(fn, _NUMBA_BODY)
    overload(fn, target="cpu", strict=False, jit_options={"forceinline": True})(lambda *args: body)


def use_numba() -> None:
    """Teach numba's CPU compiler every jitable (the numba backends call this on import). Until
    then nothing imports numba: the torch backend does without it."""
    global _unregistered
    if _unregistered is not None:
        pending, _unregistered = _unregistered, None
        for fn in pending:
            _register_with_numba(fn)


def jitable(
    fn: F | None = None,
    *,
    numba_body: Callable | str | None = None,
    cuda_body: Callable | str | None = None,
    single: Callable | None = None,
    returns_array: bool = False,
):
    """Make ``fn`` callable from numba-compiled code; return it unchanged.

    ``numba_body``: what numba kernels run instead of ``fn`` (which then only runs on tensors);
    a ``"module:name"`` string names one that is imported only when a kernel needs it.
    ``cuda_body``: what CUDA kernels run, where numba CPU and CUDA spell a primitive differently.
    ``single``: the version float32 kernels call (a jitable), where float32 wants another
    algorithm, not just float32 constants.
    ``returns_array``: the function returns an array that is not one of its arguments as it
    came (``put``'s result, a part of the state: functions of envs with an array). A CUDA device
    function may not (numba-cuda has no reference counting to return a new one), so CUDA
    kernels inline it into its caller's IR instead.
    """
    if fn is None:
        return lambda f: jitable(f, numba_body=numba_body, cuda_body=cuda_body, single=single, returns_array=returns_array)
    body = numba_body or fn
    setattr(fn, _RETURNS_ARRAY, returns_array)
    setattr(fn, _NUMBA_BODY, body)
    setattr(fn, _CUDA_BODY, cuda_body or body)
    if single is not None:
        setattr(fn, _SINGLE, single)
    if _unregistered is None:
        _register_with_numba(fn)
    else:
        _unregistered.append(fn)
    return fn


def _body(fn: Callable, attribute: str) -> Callable:
    """A jitable's kernel body; a ``"module:name"`` body is imported now (it may need numba)."""
    body = getattr(fn, attribute)
    if isinstance(body, str):
        import importlib

        module, name = body.split(":")
        body = getattr(importlib.import_module(module), name)
        setattr(fn, attribute, body)
    return body


def is_jitable(value: Any) -> bool:
    return isinstance(value, types.FunctionType) and hasattr(value, _NUMBA_BODY)


def _cuda_floor(x):
    return math.floor(x)  # numba CUDA's math.floor keeps the float type (numba CPU's gives an int)


def _numba_floor(x):
    return np.floor(x)


@jitable(numba_body=_numba_floor, cuda_body=_cuda_floor)
def float_floor(x):
    """``floor(x)`` as a float on every target: numba CPU's ``math.floor`` returns an integer (and
    AVX2 cannot convert float64 vectors to int64), numba-cuda has no ``np.floor``."""
    import torch

    return torch.floor(x) if isinstance(x, torch.Tensor) else float(math.floor(x))


def _global_names(code: types.CodeType) -> set[str]:
    """The global names ``code`` reads (``co_names`` also holds attribute names: ``math.cos``)."""
    return {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}


def module_attributes(fn: Callable) -> list[tuple[str, types.ModuleType, str]]:
    """``(name, module, attribute)`` for each attribute ``fn`` reads of a module it names by a
    global name: ``np.sin`` is ``("np", numpy, "sin")`` (``ops.clip`` beside it is ops' only)."""
    found = []

    def scan(code: types.CodeType) -> None:
        instructions = list(dis.get_instructions(code))
        for load, then in zip(instructions, instructions[1:]):
            module = fn.__globals__.get(load.argval) if load.opname in ("LOAD_GLOBAL", "LOAD_NAME") else None
            if isinstance(module, types.ModuleType) and then.opname in ("LOAD_ATTR", "LOAD_METHOD"):
                found.append((load.argval, module, then.argval))
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                scan(const)

    scan(fn.__code__)
    return sorted(set(found), key=lambda f: (f[0], f[2]))


def global_functions(fn: Callable) -> dict[str, types.FunctionType]:
    """The Python functions ``fn`` reads by global name: what numba compiles along with it."""
    found = {name: fn.__globals__.get(name) for name in _global_names(fn.__code__)}
    return {name: value for name, value in found.items() if isinstance(value, types.FunctionType)}


def _names_read(code: types.CodeType, opnames: tuple[str, ...]) -> set[str]:
    """The names ``code`` and the functions nested in it read by these instructions (globals:
    ``LOAD_GLOBAL``; attributes, ``consts.BONUS``'s ``BONUS``: ``LOAD_ATTR``)."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in opnames}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_read(const, opnames)
    return names


def _value_text(value: Any) -> bytes:
    """What a compiled kernel takes from a value it reads: its contents (numba freezes globals as
    constants); an object whose text is only its address, its type's name (stable across runs)."""
    if isinstance(value, np.ndarray):
        return repr((value.dtype, value.shape)).encode() + value.tobytes()
    text = repr(value)
    if " at 0x" in text:
        text = f"<{type(value).__module__}.{type(value).__qualname__}>"
    return text.encode()


def source_fingerprint(functions: list[Callable], digest) -> bool:
    """Feed ``digest`` with everything the kernel that compiles ``functions`` is made of: their
    sources, and recursively those of the functions they call (a jitable's kernel bodies too)
    and the values they read (globals, the attributes they read of a module, closure cells).
    numba's on-disk cache checks only the kernel's own file: a helper or a constant edited in
    another module, or a factory's closure, would otherwise load a kernel built from the old
    ones. False where a source cannot be read (a notebook, ``exec``): not cached on disk then."""
    seen: set[int] = set()
    stack: list[Any] = list(functions)
    while stack:
        fn = stack.pop()
        fn = inspect.unwrap(getattr(fn, "py_func", fn))  # a numba dispatcher, a functools.wraps wrapper
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        try:
            digest.update(inspect.getsource(fn).encode())
        except (OSError, TypeError):
            return False
        globals_read = _names_read(fn.__code__, ("LOAD_GLOBAL", "LOAD_NAME"))
        read = [fn.__globals__[n] for n in sorted(globals_read) if n in fn.__globals__]
        attributes = sorted(n for n in _names_read(fn.__code__, ("LOAD_ATTR", "LOAD_METHOD")) if not n.startswith("__"))
        for module in [v for v in read if isinstance(v, types.ModuleType)]:
            read += [getattr(module, n) for n in attributes if hasattr(module, n)]
        read += [getattr(fn, a) for a in (_NUMBA_BODY, _CUDA_BODY, _SINGLE) if callable(getattr(fn, a, None))]
        read += _cell_values(fn)
        for value in read:
            if isinstance(value, types.FunctionType) or hasattr(value, "py_func"):
                stack.append(value)
            elif not isinstance(value, (type, types.ModuleType, types.BuiltinFunctionType)):
                digest.update(_value_text(value))
    return True


def _cell_values(fn: types.FunctionType) -> list[Any]:
    values = []
    for cell in fn.__closure__ or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # a cell not filled yet
            pass
    return values


def _rebind(fn: F, value: Callable[[Any], Any], const: Callable[[Any], Any] = lambda c: c, name: str | None = None) -> F:
    """A copy of ``fn`` whose globals and closure values pass through ``value`` and whose
    literals pass through ``const``."""
    code = fn.__code__.replace(co_consts=tuple(const(c) for c in fn.__code__.co_consts))
    if name is not None:
        code = code.replace(co_name=name, **({"co_qualname": name} if hasattr(code, "co_qualname") else {}))
    names = _global_names(code)
    attributes = _names_read(code, ("LOAD_ATTR", "LOAD_METHOD"))

    def passed(v):
        return _module_view(v, attributes, value) if isinstance(v, types.ModuleType) else value(v)

    fn_globals = {**fn.__globals__, **{k: passed(v) for k, v in fn.__globals__.items() if k in names}}
    closure = fn.__closure__ and tuple(types.CellType(passed(c.cell_contents)) for c in fn.__closure__)
    copy = types.FunctionType(code, fn_globals, name or fn.__name__, fn.__defaults__, closure)
    copy.__qualname__, copy.__module__ = name or fn.__qualname__, fn.__module__
    return copy


def _module_view(module: types.ModuleType, names: set[str], value: Callable[[Any], Any]) -> types.ModuleType:
    """``module`` as a kernel reads it: where a function reads jitable functions from it by
    attribute (``ops.clip``, as the README's env does), a stand-in module whose those attributes
    pass through ``value`` (their CUDA or float32 versions), as ``clip`` imported by name does;
    else the module itself. Without it a CUDA kernel called the torch body (numba-cuda cannot)."""
    jitables = {name: getattr(module, name) for name in names if is_jitable(getattr(module, name, None))}
    changed = {name: version for name, f in jitables.items() if (version := value(f)) is not f}
    if not changed:
        return module
    view = types.ModuleType(module.__name__, module.__doc__)
    view.__dict__.update({k: v for k, v in vars(module).items() if k not in ("__name__", "__doc__")}, **changed)
    return view


def bind(fn: F, name: str | None = None, **globals_: Any) -> F:
    """A copy of ``fn`` whose global names in ``globals_`` refer to the given objects (a jitable
    copy if ``fn`` is jitable). ``name`` renames the copy: numba's on-disk cache tells kernels
    apart by name, so every distinct binding of a cached kernel needs its own."""
    copy = _rebind(fn, lambda v: v, name=name)
    unknown = set(globals_) - _global_names(copy.__code__)
    if unknown:
        raise NameError(f"{fn.__qualname__} does not use the global name(s) {sorted(unknown)}")
    copy.__globals__.update(globals_)
    if not is_jitable(fn):
        return copy
    return jitable(
        copy,
        numba_body=_bound_body(fn, copy, _NUMBA_BODY),
        cuda_body=_bound_body(fn, copy, _CUDA_BODY),
        single=getattr(fn, _SINGLE, None),
        returns_array=getattr(fn, _RETURNS_ARRAY),
    )


def _bound_body(fn: Callable, copy: Callable, attribute: str) -> Callable:
    """The kernel body of a bound copy: the copy itself where ``fn`` runs its own body there."""
    body = getattr(fn, attribute)
    return copy if body is fn else body


def _single(value):
    """``value`` with its floats made float32, the float64 type float32, and jitable functions
    their float32 versions."""
    if type(value) is float:
        return np.float32(value)
    if value is np.float64:
        return np.float32
    return single_precision(value) if is_jitable(value) else value


def single_precision(fn: F) -> F:
    """A copy of ``fn`` for float32 kernels: its float literals and the floats it reads from
    globals or its closure are float32 (``np.float64`` is ``np.float32``), and so, recursively,
    are those of the ``@jitable`` functions it calls (or their declared ``single`` versions).

    Integers, arrays and arguments keep their types: a float64 argument still computes in
    float64, so the caller passes float32 numbers where it wants float32 arithmetic.
    """
    if fn not in _single_versions:
        explicit = getattr(fn, _SINGLE, None)
        if explicit is not None:
            _single_versions[fn] = single_precision(explicit)
        elif is_jitable(fn):
            numba_body = _body(fn, _NUMBA_BODY)
            cuda_body = _body(fn, _CUDA_BODY)
            single_numba = _rebind(numba_body, _single, const=_single)
            single_cuda = single_numba if cuda_body is numba_body else _rebind(cuda_body, _single, const=_single)
            # The Python body is unchanged: it runs on tensors, which keep their own dtype.
            _single_versions[fn] = jitable(
                _rebind(fn, lambda v: v),
                numba_body=single_numba,
                cuda_body=single_cuda,
                returns_array=getattr(fn, _RETURNS_ARRAY),
            )
        else:
            _single_versions[fn] = _rebind(fn, _single, const=_single)
    return _single_versions[fn]


def _cuda_device_function(value):
    if not is_jitable(value):
        return value
    from numba import cuda

    inline = "always" if getattr(value, _RETURNS_ARRAY) else "never"  # numba IR inlining: see ``jitable``
    return cuda.jit(device=True, inline=inline)(cuda_device_functions(_body(value, _CUDA_BODY)))


def cuda_device_functions(fn: F) -> F:
    """A copy of ``fn`` for ``cuda.jit`` whose ``@jitable`` callees, recursively, are numba
    CUDA device functions."""
    if fn not in _cuda_versions:
        _cuda_versions[fn] = _rebind(fn, _cuda_device_function)
    return _cuda_versions[fn]

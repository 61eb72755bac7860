import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Backends that run on this machine's CPU (numba-cuda runs here only under the simulator,
# in its own subprocess: see test_numba_cuda_sim.py).
CPU_BACKENDS = ["torch", "numba-cpu"]


def run_python(code: str, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (for registration and simulator tests)."""
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=timeout)


@pytest.fixture(params=CPU_BACKENDS)
def backend(request):
    return request.param


class HostReads:
    """Counts, by name, the torch calls that on a CUDA tensor make the host wait for the GPU,
    also where tensors are on the CPU (so CI can check a GPU path for host syncs).

    Two kinds: ATen ops that read a value back (``item``/``bool``: ``_local_scalar_dense``; an
    output whose size depends on the data: ``nonzero``, ``masked_select``, indexing with a
    mask; ``multinomial`` and ``normal`` with tensor scales, which check their inputs on the
    host) and Python-level copies to the host (``tolist``, ``numpy``, ``cpu``).
    """

    OPS = {"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.masked_select.default", "aten.equal.default",
           "aten.multinomial.default", "aten.normal.Tensor_Tensor", "aten.normal.Tensor_float", "aten.normal.float_Tensor",
           "aten.repeat_interleave.Tensor", "aten._unique2.default", "aten.unique_consecutive.default"}  # fmt: skip
    METHODS = {"tolist", "numpy", "cpu"}

    def __init__(self):
        import collections

        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        self.counts = collections.Counter()
        reads = self

        class Ops(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = str(func)
                masked = name.startswith(("aten.index.", "aten.index_put")) and any(
                    getattr(i, "dtype", None) is not None and not i.dtype.is_floating_point and i.dtype.itemsize == 1
                    for i in (args[1] if len(args) > 1 and isinstance(args[1], (list, tuple)) else ())
                )  # a bool (or uint8) index: the output's size is the mask's count
                if name in reads.OPS or masked:
                    reads.counts[name] += 1
                return func(*args, **(kwargs or {}))

        class Methods(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = getattr(func, "__name__", "")
                if name in reads.METHODS:
                    reads.counts[f"Tensor.{name}"] += 1
                return func(*args, **(kwargs or {}))

        self._modes = (Methods(), Ops())

    def __enter__(self) -> "HostReads":
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

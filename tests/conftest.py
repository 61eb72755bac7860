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

"""The numba CUDA kernels compiled for a real GPU (PTX for an H100, sm_90), on a machine without one.

numba's CUDA simulator (test_numba_cuda_sim.py) runs a kernel as Python, so it cannot see what
numba-cuda's compiler rejects. It passed while the kernel called overloads registered with
numba's core and ``np.floor``, neither of which numba-cuda can compile: the backend would have
failed on every GPU. Here numba-cuda and the CUDA toolkit's NVVM compile the kernels as they
would on the GPU. Needs numba-cuda (the ``test`` extra installs it with NVRTC) and NVVM (the
CUDA toolkit); skipped where one is missing.

numba-cuda asks the current GPU for its compute capability when it compiles a device function;
where there is no GPU these tests answer sm_90 for it. Nothing else is stood in for.
"""

import re
import types

import numba
import pytest
import torch

from rllib_gpuenv import CartPoleVectorEnv
from rllib_gpuenv._jit import cuda_device_functions, single_precision
from rllib_gpuenv.backends.base import StepOutputs
from rllib_gpuenv.backends.numba_kernel import advance

pytest.importorskip("numba_cuda", reason="numba-cuda (the CUDA target) is not installed")
from numba import cuda  # noqa: E402  (numba-cuda's, after the check above)
from numba.cuda import dispatcher  # noqa: E402

from rllib_gpuenv.backends.numba_cuda import STEP_KERNELS, kernel_arguments  # noqa: E402

CC = (9, 0)
F64_ARITHMETIC = re.compile(r"^\s*(add|sub|mul|div|fma|neg|abs|min|max|sqrt|rcp)\.\S*f64\b", re.M)


@pytest.fixture
def compile_ptx(monkeypatch):
    """``fn`` compiled to PTX for ``CC``; skips where numba-cuda cannot compile at all here."""
    if not torch.cuda.is_available():
        monkeypatch.setattr(dispatcher, "get_current_device", lambda: types.SimpleNamespace(compute_capability=CC))

    def probe(out, a):
        out[0] = a + 1

    try:
        cuda.compile_ptx(probe, (numba.typeof(torch.zeros(1, dtype=torch.int64).numpy()), numba.int64), cc=CC)
    except Exception as err:  # no NVVM or NVRTC: numba-cuda names what it could not find
        pytest.skip(f"numba-cuda cannot compile here: {str(err).splitlines()[0]}")
    return lambda fn, signature: cuda.compile_ptx(fn, signature, cc=CC)[0]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_step_kernel_compiles_for_the_gpu(compile_ptx, dtype):
    env = CartPoleVectorEnv(8, backend="torch", device="cpu", dtype=dtype)
    env.reset(seed=0)
    arrays = [t.numpy() for t in env._buffers.tensors()], [t.numpy() for t in StepOutputs.allocate(8, env.device)]
    actions = env._action_tensor(torch.zeros(8, dtype=torch.int64)).numpy()
    signature = tuple(numba.typeof(a) for a in kernel_arguments(actions, *arrays, env._params))
    ptx = compile_ptx(STEP_KERNELS[env._params.exact_math].py_func, signature)
    assert ".entry" in ptx and "st.global" in ptx  # a kernel that writes its results


def test_float32_physics_compiles_to_float32_gpu_arithmetic(compile_ptx):
    """No float64 arithmetic in a float32 step's physics (full rate on every GPU).

    The initial-state hash is float64 by design (the same reset states on every backend), so the
    check compiles ``advance``, the step without ``begin_episode``.
    """

    def advance_all(actions, state, steps, ep_return, dt):
        i = cuda.grid(1)
        if i < state.shape[1]:
            x, x_dot, theta, theta_dot, reward, term, trunc, n, ret = advance(
                0, actions[i], state[0, i], state[1, i], state[2, i], state[3, i], steps[i], ep_return[i],
                500, 2, 0, dt, 0)  # fmt: skip
            state[0, i], state[1, i], state[2, i], state[3, i] = x, x_dot, theta, theta_dot
            steps[i], ep_return[i] = n + term + trunc, ret + reward

    array = numba.typeof(torch.zeros(4, 8).numpy())
    signature = (numba.int64[::1], array, numba.int32[::1], numba.float32[::1], numba.float32)
    single = compile_ptx(cuda_device_functions(single_precision(advance_all)), signature)
    double = compile_ptx(cuda_device_functions(advance_all), (signature[0], numba.float64[:, ::1], *signature[2:4], numba.float64))
    assert F64_ARITHMETIC.findall(double), "the float64 version should show float64 arithmetic"
    assert not F64_ARITHMETIC.findall(single)

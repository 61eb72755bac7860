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

from rllib_gpuenv import make_vector_env
from rllib_gpuenv.core.buffers import StepOutputs
from rllib_gpuenv.core.step import KernelArguments
from rllib_gpuenv.envs import SHIPPED_DEFS
from tests.helpers import register_example_env

pytest.importorskip("numba_cuda", reason="numba-cuda (the CUDA target) is not installed")
from numba import cuda  # noqa: E402  (numba-cuda's, after the check above)
from numba.cuda import dispatcher  # noqa: E402

from rllib_gpuenv.backends.numba_cuda import kernel_source  # noqa: E402
from rllib_gpuenv.core.jit import cuda_device_functions  # noqa: E402

# The README's own env: its CUDA kernel called the torch bodies of ops.clip and ops.select
# (numba-cuda cannot compile them) until module attributes were bound too (``core/jit.py``).
ENVS = [*SHIPPED_DEFS, register_example_env()]

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


def kernel_signature(env, fn) -> tuple:
    """The numba types of ``fn``'s arguments for ``env``, from the arrays the backend would pass."""
    env.reset(seed=0)
    arrays = {k: v.numpy() for k, v in env._backend.kernel_tensors(env._buffers).items()}
    arrays.update(
        {
            k: v.numpy()
            for k, v in StepOutputs.allocate(env.definition.obs_shape, env.num_envs, env.dtype, env.device)._asdict().items()
        }
    )
    actions = env._action_tensor(torch.as_tensor(env.action_space.sample())).numpy()
    arguments = KernelArguments(fn)
    arguments.prepare(actions=actions, **arrays, **env._constants._asdict())
    return tuple(numba.typeof(a) for a in arguments.fill())


_STEP_KERNEL_PTX = {}  # (env id, dtype) -> PTX: each compile takes seconds, and two tests read the float64 ones


def step_kernel_ptx(compile_ptx, env_id: str, dtype: str) -> str:
    """The PTX of ``env_id``'s step kernel in ``dtype``, compiled once in this test process."""
    if (env_id, dtype) not in _STEP_KERNEL_PTX:
        env = make_vector_env(env_id, 8, backend="torch", device="cpu", dtype=dtype)
        fn = kernel_source(env._bound, env.dtype)
        _STEP_KERNEL_PTX[env_id, dtype] = compile_ptx(fn, kernel_signature(env, fn))
    return _STEP_KERNEL_PTX[env_id, dtype]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("env_id", ENVS)
def test_step_kernel_compiles_for_the_gpu(compile_ptx, env_id, dtype):
    ptx = step_kernel_ptx(compile_ptx, env_id, dtype)
    assert ".entry" in ptx and "st.global" in ptx  # a kernel that writes its results


@pytest.mark.parametrize("env_id", ENVS)
def test_float32_steps_compile_to_float32_gpu_arithmetic(compile_ptx, env_id):
    """No float64 arithmetic in a float32 env's step (full rate on every GPU).

    The initial-state hash is float64 by design (the same initial states on every backend), so
    the check compiles the per-env step without the reset draw.
    """
    env = make_vector_env(env_id, 8, backend="torch", device="cpu", dtype="float32")
    _, advance_env = env._bound.kernel_functions(env.dtype)

    def advance_all(
        actions,
        state,
        array,
        steps,
        prev_done,
        ep_return,
        obs,
        reward,
        terminated,
        truncated,
        final_return,
        final_length,
        final_mask,
        max_steps,
    ):
        i = cuda.grid(1)
        if i < state.shape[1]:
            advance_env(
                i,
                actions,
                state,
                array,
                steps,
                prev_done,
                ep_return,
                obs,
                reward,
                terminated,
                truncated,
                final_return,
                final_length,
                final_mask,
                max_steps,
            )

    signature = dict(
        zip(
            KernelArguments(kernel_source(env._bound, env.dtype)).names,
            kernel_signature(env, kernel_source(env._bound, env.dtype)),
        )
    )
    names = KernelArguments(advance_all).names
    ptx = compile_ptx(cuda_device_functions(advance_all), tuple(signature[n] for n in names))
    assert not F64_ARITHMETIC.findall(ptx)
    assert F64_ARITHMETIC.findall(step_kernel_ptx(compile_ptx, env_id, "float64"))  # the float64 one does show it


def test_an_array_returned_without_the_mark_gets_an_error_naming_the_fix(compile_ptx):
    """numba-cuda refuses a device function that returns a new array: the backend says which mark fixes it."""
    from dataclasses import replace

    from rllib_gpuenv import jitable
    from rllib_gpuenv.backends.numba_cuda import explain_compile_error
    from rllib_gpuenv.envs.minatar_breakout import BREAKOUT

    unmarked = replace(BREAKOUT, id="UnmarkedBreakout-v0", observe=jitable(lambda state, p: state[-1]))
    env = make_vector_env(unmarked, 8, backend="torch", device="cpu")
    fn = kernel_source(env._bound, env.dtype)
    with pytest.raises(Exception) as raised:
        compile_ptx(fn, kernel_signature(env, fn))
    explained = explain_compile_error(raised.value, unmarked.id)
    assert isinstance(explained, TypeError)
    assert "UnmarkedBreakout-v0" in str(explained) and "@jitable(returns_array=True)" in str(explained)

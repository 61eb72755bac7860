"""The numba CUDA backend: one GPU thread per environment running ``numba_kernel``'s step.

The kernel works on the env's torch CUDA tensors in place, through
``__cuda_array_interface__`` (no copies), and is launched on torch's current stream without
the implicit synchronisation numba performs by default for foreign arrays
(numba issue 7706), so a step costs one kernel launch and no host round trip.

With ``NUMBA_ENABLE_CUDASIM=1`` numba simulates the GPU on the CPU: the same kernel then runs
on CPU tensors, which is how the tests check it on machines without a GPU.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Sequence

import torch
from numba import config as numba_config
from numba import cuda

from rllib_gpuenv._jit import cuda_device_functions, single_precision
from rllib_gpuenv.backends.base import Backend, EnvBuffers, StepOutputs, StepParams
from rllib_gpuenv.backends.numba_kernel import advance_env, begin_episode, kernel_constants

logger = logging.getLogger(__name__)

SIMULATED = bool(numba_config.ENABLE_CUDASIM)
DEFAULT_THREADS_PER_BLOCK = 256


def step_one_env(actions, state, steps, prev_done, episode, ep_return, obs, reward,
                terminated, truncated, final_return, final_length, final_mask,
                seed32, low, high, max_steps, substeps, sutton_barto, dt, exact_math):  # fmt: skip
    i = cuda.grid(1)
    if i < state.shape[1]:
        if prev_done[i]:
            begin_episode(i, state, episode, seed32, low, high)
        advance_env(i, actions, state, steps, prev_done, ep_return, obs, reward, terminated,
                    truncated, final_return, final_length, final_mask,
                    max_steps, substeps, sutton_barto, dt, exact_math)  # fmt: skip


# One kernel per precision: float32 envs compute in float32 (full-rate arithmetic on every GPU).
STEP_KERNELS = {
    0: cuda.jit(cuda_device_functions(single_precision(step_one_env))),
    1: cuda.jit(cuda_device_functions(step_one_env)),
}


def kernel_arguments(actions, buffer_arrays: Sequence, output_arrays: Sequence, params: StepParams) -> tuple:
    """``step_one_env``'s arguments in order, from the arrays of ``EnvBuffers.tensors()`` and
    ``StepOutputs`` (numba views on the GPU; numpy arrays give the same numba types)."""
    return (actions, *buffer_arrays, *output_arrays, *kernel_constants(params), params.exact_math)


def cuda_available() -> bool:
    """numba can launch kernels here: a real GPU with a working driver, or the simulator."""
    try:
        return bool(cuda.is_available())
    except Exception:  # a broken driver install raises instead of answering False
        return False


def _as_kernel_array(tensor: torch.Tensor):
    """A zero-copy numba view of a torch tensor (a numpy view under the simulator)."""
    if SIMULATED:
        return tensor.numpy()
    return cuda.as_cuda_array(tensor.detach(), sync=False)


class NumbaCUDABackend(Backend):
    name = "numba-cuda"

    def __init__(
        self,
        num_envs: int,
        device: torch.device,
        dtype: torch.dtype,
        threads_per_block: int = DEFAULT_THREADS_PER_BLOCK,
    ):
        if not cuda_available():
            raise RuntimeError(
                "backend 'numba-cuda' needs a CUDA GPU that numba can use, and none was found "
                f"(torch.cuda.is_available()={torch.cuda.is_available()}). Use backend='torch' "
                "or 'numba-cpu', or install the CUDA target with `pip install rllib_gpuenv[cuda]`"
            )
        if SIMULATED and device.type != "cpu":
            raise ValueError("under NUMBA_ENABLE_CUDASIM=1 the numba-cuda backend runs on device='cpu'")
        if not SIMULATED and device.type != "cuda":
            raise ValueError(
                f"backend 'numba-cuda' runs on a CUDA device, but device={device} was asked for: "
                "use device='cuda', or backend='numba-cpu' or 'torch' for the CPU"
            )
        if not 1 <= threads_per_block <= 1024:
            raise ValueError(f"threads_per_block must be in 1..1024, got {threads_per_block}")
        super().__init__(num_envs, device, dtype)
        self.threads_per_block = int(threads_per_block)
        self._outputs = StepOutputs.allocate(num_envs, device)
        self._out_arrays = tuple(_as_kernel_array(t) for t in self._outputs)
        self._buffers_id = None
        self._buf_arrays: tuple = ()

    def step(self, buffers: EnvBuffers, actions: torch.Tensor, params: StepParams, fresh: bool) -> StepOutputs:
        if self._buffers_id != id(buffers):  # numba views are slow to make: once, not per step
            self._buf_arrays = tuple(_as_kernel_array(t) for t in buffers.tensors())
            self._buffers_id = id(buffers)
        blocks = (self.num_envs + self.threads_per_block - 1) // self.threads_per_block
        kernel = STEP_KERNELS[params.exact_math]
        launch = kernel[blocks, self.threads_per_block]
        if not SIMULATED:
            stream = cuda.external_stream(torch.cuda.current_stream(self.device).cuda_stream)
            launch = kernel[blocks, self.threads_per_block, stream]
        launch(*kernel_arguments(_as_kernel_array(actions), self._buf_arrays, self._out_arrays, params))
        # Numba views of new tensors are slow to make, so fresh outputs are copies (on the GPU).
        return self._outputs.clone() if fresh else self._outputs


@dataclass
class BlockSizeResult:
    threads_per_block: int
    env_steps_per_second: float


def search_threads_per_block(
    num_envs: int = 1 << 20,
    candidates: Sequence[int] = (32, 64, 128, 256, 512, 1024),
    steps: int = 200,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cuda",
) -> list[BlockSizeResult]:
    """Measure env-steps/s of the CUDA kernel for each threads-per-block value, best first.

    The kernel's speed depends on the GPU and on ``num_envs`` (occupancy, tail effects), so the
    right block size is found by measuring, as the CS267 paper did. Each candidate steps a
    fresh env ``steps`` times with actions from a pre-made pool, timed with CUDA events.
    """
    from rllib_gpuenv.vector_env import CartPoleVectorEnv

    results = []
    for tpb in candidates:
        env = CartPoleVectorEnv(
            num_envs, backend="numba-cuda", device=device, dtype=dtype,
            threads_per_block=tpb, reuse_outputs=True, validate_actions=False,
        )  # fmt: skip
        env.reset(seed=0)
        gen = torch.Generator(device=env.device).manual_seed(0)
        pool = torch.randint(0, 2, (8, num_envs), device=env.device, generator=gen)
        for t in range(3):  # warm-up: compile and fill caches
            env.step(pool[t % 8])
        _synchronize(env.device)
        start = time.perf_counter()
        for t in range(steps):
            env.step(pool[t % 8])
        _synchronize(env.device)
        elapsed = time.perf_counter() - start
        results.append(BlockSizeResult(tpb, num_envs * steps / elapsed))
        env.close()
        logger.info("threads_per_block=%d: %.3g env-steps/s", tpb, results[-1].env_steps_per_second)
    return sorted(results, key=lambda r: -r.env_steps_per_second)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
